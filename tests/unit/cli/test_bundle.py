"""App bundles are deterministic: the digest is the version's identity."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from ratchet.cli import bundle
from ratchet.cli.errors import CLIError


def _write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


APP = {"app.py": "from ratchet import task\n", "lib/util.py": "X = 1\n", "data/readme.txt": "hi\n"}


def test_same_folder_gives_same_bytes(tmp_path):
    _write(tmp_path, APP)
    assert bundle.package(tmp_path) == bundle.package(tmp_path)


def test_digest_ignores_mtimes_modes_and_creation_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, APP)
    _write(b, dict(reversed(list(APP.items()))))
    os.utime(b / "app.py", (1_000_000, 1_000_000))
    os.chmod(b / "lib" / "util.py", 0o600)
    assert bundle.digest(bundle.package(a)) == bundle.digest(bundle.package(b))


def test_content_change_changes_digest(tmp_path):
    _write(tmp_path, APP)
    before = bundle.digest(bundle.package(tmp_path))
    (tmp_path / "lib" / "util.py").write_text("X = 2\n")
    assert bundle.digest(bundle.package(tmp_path)) != before


def test_digest_format(tmp_path):
    _write(tmp_path, APP)
    d = bundle.digest(bundle.package(tmp_path))
    assert d.startswith("sha256:") and len(d) == len("sha256:") + 64


def test_skips_caches_vcs_and_virtualenvs(tmp_path):
    _write(tmp_path, {**APP, "__pycache__/app.cpython-311.pyc": "x", ".git/HEAD": "ref",
                      ".venv/bin/python": "x", "lib/old.pyc": "x", "lib/__pycache__/u.pyc": "x"})
    with tarfile.open(fileobj=io.BytesIO(bundle.package(tmp_path)), mode="r:gz") as tar:
        names = tar.getnames()
    assert names == ["app.py", "data", "data/readme.txt", "lib", "lib/util.py"]


def test_entries_are_sorted_with_fixed_owner_time_and_mode(tmp_path):
    _write(tmp_path, APP)
    os.chmod(tmp_path / "app.py", 0o755)
    with tarfile.open(fileobj=io.BytesIO(bundle.package(tmp_path)), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", bundle.FIXED_MTIME)}
    modes = {m.name: m.mode for m in members}
    assert modes["app.py"] == 0o755 and modes["lib/util.py"] == 0o644 and modes["lib"] == 0o755


def test_link_outside_the_folder_is_refused(tmp_path):
    app = tmp_path / "app"
    _write(app, APP)
    (tmp_path / "secret.txt").write_text("s")
    (app / "secret.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(CLIError, match="links outside the app folder"):
        bundle.package(app)


def test_not_a_folder(tmp_path):
    with pytest.raises(CLIError, match="is not a folder"):
        bundle.package(tmp_path / "missing")


def test_description_is_the_last_json_line():
    out = 'hello from import\n{"module": "app", "handlers": [{"name": "greet"}]}\n'
    assert bundle._last_json(out)["handlers"][0]["name"] == "greet"
    pretty = '{\n  "module": "app",\n  "handlers": []\n}\n'
    assert bundle._last_json(pretty) == {"module": "app", "handlers": []}
