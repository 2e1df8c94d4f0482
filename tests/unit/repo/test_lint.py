"""Lint and types are part of `make test`: ruff over the repository (rules in pyproject.toml),
mypy over libs/ and the SDK (scripts/typecheck.py), and no silenced finding without its
reason."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
# A silenced finding names its codes and then says why, after " - ", " -- " or in
# parentheses; a type-ignore names its error codes in brackets and then says why.
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")
NOQA_OK = re.compile(r":\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s*(-{1,2}\s*\S|\(\S)")
IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<rest>.*)$")
IGNORE_OK = re.compile(r"\[[a-z-]+(,\s*[a-z-]+)*\]\s*(#|-{1,2})\s*\S")


def _python_files() -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files", "*.py", "*.pyi"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    # (this file's own examples below are not silenced findings)
    return [ROOT / p for p in out if not p.startswith("gen/") and p != "tests/unit/repo/test_lint.py"]


def test_ruff_finds_nothing():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing_in_libs_and_the_sdk():
    proc = subprocess.run([sys.executable, "scripts/typecheck.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_silenced_finding_says_which_and_why():
    bad = []
    for path in _python_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if (m := NOQA.search(line)) and not NOQA_OK.match(m["rest"]):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
            if (m := IGNORE.search(line)) and not IGNORE_OK.match(m["rest"]):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "a noqa or type: ignore without its code and reason:\n" + "\n".join(bad)


@pytest.mark.parametrize("line, ok", [
    ("x = 1  # noqa: F401 - re-exported", True),
    ("x = 1  # noqa: E402 -- after the switch", True),
    ("x = 1  # noqa: E402  (after the sys.path insert)", True),
    ("x = 1  # noqa: F401,E402 - both", True),
    ("x = 1  # noqa: F401", False),
    ("x = 1  # noqa", False),
    ("x = f()  # type: ignore[attr-defined]  # set in __init__", True),
    ("x = f()  # type: ignore[attr-defined]", False),
    ("x = f()  # type: ignore", False),
])
def test_the_reason_check_itself(line, ok):
    noqa, ignore = NOQA.search(line), IGNORE.search(line)
    found = (noqa and not NOQA_OK.match(noqa["rest"])) or (ignore and not IGNORE_OK.match(ignore["rest"]))
    assert (not found) == ok
