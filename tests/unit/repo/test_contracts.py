"""The contracts are the one shared interface: lint, breaking-change and
staleness checks run with every `make test`."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _buf() -> str:
    cand = pathlib.Path(sys.executable).parent / "buf"
    found = str(cand) if cand.exists() else shutil.which("buf")
    if not found:
        pytest.fail("buf is not installed: `pip install -e '.[dev]'` provides it (buf-bin)")
    return found


def test_buf_lint_standard():
    res = subprocess.run([_buf(), "lint"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_buf_breaking_against_committed_baseline():
    baseline = ROOT / "protos" / "baseline.binpb"
    assert baseline.exists(), "protos/baseline.binpb is missing: `make proto-baseline` writes it"
    res = subprocess.run([_buf(), "breaking", "--against", str(baseline)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, "breaking contract change:\n" + res.stdout + res.stderr


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_generated_code_is_fresh(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    fresh, committed = _tree(tmp_path / "ratchet"), _tree(ROOT / "gen" / "ratchet")
    assert sorted(fresh) == sorted(committed), "generated file set differs: run `make protos`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated code {stale}: run `make protos`"
