"""Bundle verification and safe extraction; config validation."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest

from ratchet.libs.config import ConfigError
from ratchet.services.hostagent.bundles import digest_hex, extract, verify
from ratchet.services.hostagent.config import load
from ratchet.services.hostagent.errors import BundleInvalid


def tarball(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, kind in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_digest_must_match():
    bundle = tarball([("app.py", b"x = 1\n", tarfile.REGTYPE)])
    good = "sha256:" + hashlib.sha256(bundle).hexdigest()
    verify(good, bundle)
    with pytest.raises(BundleInvalid, match="refusing"):
        verify("sha256:" + "0" * 64, bundle)
    with pytest.raises(BundleInvalid, match="form"):
        digest_hex("md5:abc")


def test_extract_is_read_only_and_complete(tmp_path):
    dest = tmp_path / "b"
    extract(tarball([("app.py", b"x = 1\n", tarfile.REGTYPE), ("pkg/m.py", b"", tarfile.REGTYPE)]), dest)
    assert (dest / "app.py").read_text() == "x = 1\n" and (dest / "pkg" / "m.py").exists()
    assert not os.access(dest / "app.py", os.W_OK) or os.geteuid() == 0
    assert oct((dest / "app.py").stat().st_mode & 0o777) == oct(0o444)


@pytest.mark.parametrize("entry", [
    ("/etc/evil", b"x", tarfile.REGTYPE),
    ("../evil", b"x", tarfile.REGTYPE),
    ("a/../../evil", b"x", tarfile.REGTYPE),
    ("link", "/etc/passwd", tarfile.SYMTYPE),
    ("fifo", b"", tarfile.FIFOTYPE),
])
def test_unsafe_entries_are_refused_and_nothing_is_left(tmp_path, entry):
    dest = tmp_path / "b"
    with pytest.raises(BundleInvalid):
        extract(tarball([("ok.py", b"", tarfile.REGTYPE), entry]), dest)
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_config_requires_targets_token_and_a_short_work_dir(tmp_path):
    base = dict(dispatcher_target="127.0.0.1:1", control_target="127.0.0.1:2", host_token="s3cr3t-value",
                work_dir=str(tmp_path))
    cfg = load(overrides=base)
    assert cfg.capacity == 512 and cfg.sandbox_concurrency == 128
    assert cfg.auth_metadata == (("authorization", "Bearer s3cr3t-value"),)
    assert "s3cr3t-value" not in repr(cfg)
    with pytest.raises(ConfigError, match="host_token"):
        load(overrides={k: v for k, v in base.items() if k != "host_token"})
    with pytest.raises(ConfigError, match="capacity"):
        load(overrides={**base, "capacity": 0})
    with pytest.raises(ConfigError, match="work_dir"):
        load(overrides={**base, "work_dir": "/tmp/" + "x" * 100})
