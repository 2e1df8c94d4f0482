"""App bundles on disk: fetched once per digest, verified, extracted safely
under work_dir/bundles/<digest-hex>/ and made read-only."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import pathlib
import re
import shutil
import tarfile
import uuid
from collections.abc import Awaitable, Callable

from ratchet.services.hostagent.errors import BundleInvalid

DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
MAX_EXTRACTED_BYTES = 512 * 1024 * 1024


def digest_hex(digest: str) -> str:
    """The hex part of "sha256:<hex>"; BundleInvalid for anything else."""
    m = DIGEST.fullmatch(digest or "")
    if not m:
        raise BundleInvalid(f"bundle digest {digest!r} is not of the form sha256:<64 hex digits>")
    return m.group(1)


def verify(digest: str, bundle: bytes) -> None:
    """BundleInvalid unless sha256(bundle) matches digest."""
    want = digest_hex(digest)
    got = hashlib.sha256(bundle).hexdigest()
    if got != want:
        raise BundleInvalid(f"bundle for {digest} has sha256:{got}; refusing to run it")


def _check_members(tar: tarfile.TarFile) -> None:
    total = 0
    for member in tar.getmembers():
        name = member.name
        parts = pathlib.PurePosixPath(name).parts
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in parts:
            raise BundleInvalid(f"bundle entry {name!r} is absolute or climbs out with '..'")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise BundleInvalid(f"bundle entry {name!r} is a device, fifo or other special file")
        total += max(member.size, 0)
        if total > MAX_EXTRACTED_BYTES:
            raise BundleInvalid(f"bundle expands to more than {MAX_EXTRACTED_BYTES} bytes")


def _make_read_only(root: pathlib.Path) -> None:
    # Sandboxes of one version share the folder: none may change the code the next one runs.
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, 0o555 if os.stat(p).st_mode & 0o111 else 0o444)
        os.chmod(dirpath, 0o555)


def extract(bundle: bytes, dest: pathlib.Path) -> None:
    """Extract a gzip tar into dest (which must not exist), atomically."""
    tmp = dest.parent / f".tmp-{dest.name}-{uuid.uuid4().hex[:8]}"
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:*") as tar:
            _check_members(tar)
            # The "data" filter also refuses links that point outside the folder.
            tar.extractall(tmp, filter="data")
        _make_read_only(tmp)
        os.rename(tmp, dest)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BundleInvalid(f"bundle could not be extracted: {e}") from None
    finally:
        if tmp.exists():
            for dirpath, _dirs, _files in os.walk(tmp):
                os.chmod(dirpath, 0o755)
            shutil.rmtree(tmp, ignore_errors=True)


class BundleStore:
    """Extracted bundles by digest; each digest is fetched and extracted once."""

    def __init__(self, root: pathlib.Path, fetch: Callable[[str], Awaitable[bytes]]):
        self._root = root
        self._fetch = fetch
        self._locks: dict[str, asyncio.Lock] = {}
        # Extracted folders are never removed while the agent runs: remember them, so the
        # per-task look-up is a dict hit, not a path join and a stat.
        self._known: dict[str, pathlib.Path] = {}

    def known(self, digest: str) -> pathlib.Path | None:
        """The folder of a bundle this agent already extracted, else None (nothing is fetched)."""
        return self._known.get(digest)

    async def ensure(self, digest: str) -> pathlib.Path:
        """The folder holding digest's bundle, fetching and extracting it if needed."""
        known = self.known(digest)
        if known is not None:
            return known
        dest = self._root / digest_hex(digest)
        if dest.is_dir():
            self._known[digest] = dest
            return dest
        lock = self._locks.setdefault(digest, asyncio.Lock())
        async with lock:
            if dest.is_dir():
                return dest
            bundle = await self._fetch(digest)
            verify(digest, bundle)
            await asyncio.to_thread(extract, bundle, dest)
        self._known[digest] = dest
        return dest
