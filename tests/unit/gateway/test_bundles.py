"""Bundle checks: digest, size, archive shape."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from ratchet.libs.rpc.errors import DataLoss, InvalidArgument, TooLarge
from ratchet.services.gateway.bundles import LocalBlobStore, check_archive, check_digest


def make_tar(entries: dict[str, bytes], extra=None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if extra:
            tar.addfile(extra)
    return buf.getvalue()


def digest(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def test_good_bundle_passes():
    b = make_tar({"app.py": b"print(1)\n", "lib/x.py": b""})
    assert check_digest(b, digest(b), 1 << 20) == digest(b)[7:]
    check_archive(b)


def test_digest_mismatch_and_format():
    b = make_tar({"app.py": b""})
    with pytest.raises(InvalidArgument, match="does not match"):
        check_digest(b, digest(b + b"x"), 1 << 20)
    with pytest.raises(InvalidArgument, match="sha256:"):
        check_digest(b, "md5:abc", 1 << 20)


def test_too_large_is_413():
    b = make_tar({"app.py": b""})
    with pytest.raises(TooLarge) as e:
        check_digest(b, digest(b), len(b) - 1)
    assert e.value.http_status == 413


@pytest.mark.parametrize("name", ["/etc/passwd", "../up.py", "a/../../b.py"])
def test_escaping_paths_are_refused(name):
    with pytest.raises(InvalidArgument, match="escapes"):
        check_archive(make_tar({name: b"x"}))


def test_links_are_refused():
    link = tarfile.TarInfo("evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(InvalidArgument, match="link"):
        check_archive(make_tar({"app.py": b""}, extra=link))


def test_not_a_gzip_tar():
    with pytest.raises(InvalidArgument, match="gzip-compressed tar"):
        check_archive(b"plain text")


def test_blob_store_round_trip_and_corruption(tmp_path):
    store = LocalBlobStore(tmp_path / "blobs dir")
    data = make_tar({"app.py": b"x"})
    uri = store.put(hashlib.sha256(data).hexdigest(), data)
    assert (tmp_path / "blobs dir" / "sha256" / f"{hashlib.sha256(data).hexdigest()}.tar.gz").exists()
    assert store.get(uri) == data
    assert store.put(hashlib.sha256(data).hexdigest(), data) == uri
    path = tmp_path / "blobs dir" / "sha256" / f"{hashlib.sha256(data).hexdigest()}.tar.gz"
    path.write_bytes(b"tampered")
    with pytest.raises(DataLoss):
        store.get(uri)
