"""Type-check the shared libraries and the SDK with mypy (`make test` runs it through
tests/unit/repo/test_lint.py; `make typecheck` runs it alone).

The `ratchet` package is assembled from several folders (setup.py: sdk/ratchet, libs,
services, gen/ratchet/*), which mypy cannot map from the source tree. This builds the
package as installed, as a tree of links under build/typecheck/, checks it there, and
reports paths as they are in the repository.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
# Where each part of the installed `ratchet` package lives (the same map as setup.py's).
PARTS = {"libs": ROOT / "libs", "services": ROOT / "services",
         "api": ROOT / "gen" / "ratchet" / "api", "internal": ROOT / "gen" / "ratchet" / "internal"}
SDK = ROOT / "sdk" / "ratchet"


def build_tree() -> pathlib.Path:
    pkg = TREE / "ratchet"
    if TREE.exists():
        shutil.rmtree(TREE)
    pkg.mkdir(parents=True)
    for entry in SDK.iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, folder in PARTS.items():
        (pkg / name).symlink_to(folder)
    return pkg


def targets() -> list[str]:
    """libs/ and every SDK module (the services are checked only where the two import them)."""
    out = ["-p", "ratchet.libs", "-m", "ratchet"]
    for entry in sorted(SDK.iterdir()):
        if entry.name.startswith("__"):
            continue
        if entry.is_dir() and (entry / "__init__.py").exists():
            out += ["-p", f"ratchet.{entry.name}"]
        elif entry.suffix == ".py":
            out += ["-m", f"ratchet.{entry.stem}"]
    return out


def repo_path(line: str, pkg: pathlib.Path) -> str:
    """A mypy line with the link tree's path replaced by the file's own."""
    head, sep, rest = line.partition(":")
    if not sep or not head.startswith("ratchet/"):
        return line
    return f"{(TREE / head).resolve().relative_to(ROOT)}:{rest}"


def main() -> int:
    pkg = build_tree()
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *targets()]
    proc = subprocess.run(cmd, cwd=TREE, capture_output=True, text=True, timeout=600)
    for line in (proc.stdout + proc.stderr).splitlines():
        print(repo_path(line, pkg))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
