"""App bundles: an app folder as a deterministic gzip tar, and what it registers.

The same folder always gives the same bytes (sorted entries, fixed times,
owners and modes, no gzip timestamp), so its sha256 is the version's
identity and redeploying unchanged code is a no-op.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pathlib
import subprocess
import sys
import tarfile
import tempfile

from ratchet.cli.errors import CLIError

MAX_BUNDLE_BYTES = 32 * 1024 * 1024
SKIP_DIRS = frozenset({"__pycache__", ".git", ".hg", ".venv", "venv", ".ratchet", ".pytest_cache",
                       ".mypy_cache", ".ruff_cache", ".tox"})
SKIP_SUFFIXES = (".pyc", ".pyo")
# 1980-01-01: the zip epoch; some tools reject archive times before it.
FIXED_MTIME = 315532800
DESCRIBE_TIMEOUT_S = 60


def _entries(root: pathlib.Path) -> list[pathlib.Path]:
    """Files and folders to pack, sorted by their path inside the bundle."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS for part in rel.parts) or path.name.endswith(SKIP_SUFFIXES):
            continue
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root):
                raise CLIError(f"{path} links outside the app folder ({target}); copy the file in instead")
        if path.is_dir() or path.is_file():
            out.append(path)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def package(app_dir: str | pathlib.Path) -> bytes:
    """The app folder as gzip-compressed tar bytes; identical input gives identical bytes."""
    root = pathlib.Path(app_dir).resolve()
    if not root.is_dir():
        raise CLIError(f"{app_dir} is not a folder")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _entries(root):
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.mtime = FIXED_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    bundle = out.getvalue()
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise CLIError(f"the bundle of {app_dir} is {len(bundle)} bytes, over the 32 MiB limit; "
                       "leave data files out of the app folder")
    return bundle


def digest(bundle: bytes) -> str:
    """The content digest: "sha256:<hex>"."""
    return "sha256:" + hashlib.sha256(bundle).hexdigest()


def describe(bundle: bytes, module: str | None = None, python: str = sys.executable) -> dict:
    """Unpack the bundle and ask the sandbox which module and handlers it registers.

    Describing the unpacked bundle, not the source folder, checks exactly what
    will run. The sandbox alone decides the module (--module, else ratchet.toml's
    [app] module, else app), so deploy and the host agent cannot disagree.
    """
    with tempfile.TemporaryDirectory(prefix="ratchet-describe-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        cmd = [python, "-m", "ratchet.sandbox", "describe", "--app-dir", tmp]
        if module:
            cmd += ["--module", module]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise CLIError(f"importing the app took over {DESCRIBE_TIMEOUT_S}s; "
                           "does the module do work at import time?") from None
    if res.returncode != 0:
        detail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise CLIError(f"could not load the app's handlers:\n{detail}")
    return _last_json(res.stdout)


def _last_json(stdout: str) -> dict:
    # The app may print while it is imported; the description is the last JSON line.
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "handlers" in data:
            return data
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        raise CLIError(f"the sandbox's describe printed no description: {stdout[-500:]!r}") from None
