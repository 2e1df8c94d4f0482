"""App bundles: checks on the uploaded archive and where the bytes live.

Bundles are stored content-addressed, so the same bytes are stored once and
a digest names them forever. LocalBlobStore (blob_dir/sha256/<hex>.tar.gz) is
the local default; an object store can replace it behind the same two calls.
"""

from __future__ import annotations

import hashlib
import io
import os
import pathlib
import re
import tarfile
import tempfile
import urllib.parse
from typing import Protocol

from ratchet.libs.rpc.errors import DataLoss, InvalidArgument, NotFound, TooLarge

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
# An archive that inflates past this is refused: it is not an app folder.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 20_000


def check_digest(bundle: bytes, digest: str, max_bytes: int) -> str:
    """The hex sha256 of bundle, after checking size and that digest matches it."""
    if not bundle:
        raise InvalidArgument("bundle is empty: send the app folder as a gzip-compressed tar archive")
    if len(bundle) > max_bytes:
        raise TooLarge(f"bundle is {len(bundle)} bytes; the limit is {max_bytes} bytes")
    m = _DIGEST.match(digest)
    if not m:
        raise InvalidArgument(f"digest must be 'sha256:' followed by 64 lowercase hex characters, got {digest[:80]!r}")
    actual = hashlib.sha256(bundle).hexdigest()
    if actual != m.group(1):
        raise InvalidArgument(f"digest {digest} does not match the bundle, whose sha256 is {actual}; "
                              f"the upload may be truncated")
    return actual


def check_archive(bundle: bytes) -> None:
    """A gzip tar of regular files and folders only, every path relative and inside the archive."""
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
            for n, member in enumerate(tar):
                if n >= MAX_MEMBERS:
                    raise InvalidArgument(f"bundle holds more than {MAX_MEMBERS} entries")
                name = member.name
                parts = pathlib.PurePosixPath(name).parts
                if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or ".." in parts:
                    raise InvalidArgument(f"bundle entry {name[:200]!r} escapes the app folder "
                                          f"(absolute path or '..'); archive relative paths only")
                if not (member.isfile() or member.isdir()):
                    raise InvalidArgument(f"bundle entry {name[:200]!r} is a link or device; "
                                          f"only regular files and folders are allowed")
                total += max(member.size, 0)
                if total > MAX_UNPACKED_BYTES:
                    raise InvalidArgument(f"bundle unpacks to more than {MAX_UNPACKED_BYTES} bytes")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise InvalidArgument(f"bundle is not a valid gzip-compressed tar archive: {e}") from None


class BlobStore(Protocol):
    """Content-addressed bundle storage."""

    def put(self, hex_digest: str, data: bytes) -> str: ...
    def get(self, uri: str) -> bytes: ...


class LocalBlobStore:
    """Bundles as files under root/sha256/<hex>.tar.gz, written atomically."""

    def __init__(self, root: str | os.PathLike):
        self.root = pathlib.Path(root)

    def _path(self, hex_digest: str) -> pathlib.Path:
        return self.root / "sha256" / f"{hex_digest}.tar.gz"

    def put(self, hex_digest: str, data: bytes) -> str:
        """Store data (already verified to hash to hex_digest); returns its uri."""
        path = self._path(hex_digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                pathlib.Path(tmp).unlink(missing_ok=True)
                raise
        return path.resolve().as_uri()

    def get(self, uri: str) -> bytes:
        """The bytes at uri, checked against the digest in its name."""
        if not uri.startswith("file://"):
            raise DataLoss(f"bundle uri {uri} is not a local file")
        path = pathlib.Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"bundle file {path.name} is missing from the blob store") from None
        if hashlib.sha256(data).hexdigest() != path.name.removesuffix(".tar.gz"):
            raise DataLoss(f"bundle file {path.name} does not match its digest")
        return data
