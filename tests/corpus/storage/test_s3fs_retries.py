"""The s3fs path (``s3://`` paths with a storage option only s3fs knows) through every fault a store gives, on the
real S3 server behind the fault proxy with botocore's own retries off: throttling (503 SlowDown), a temporary server
error (500 InternalError), a connection dropped halfway through an upload or a download, and one dropped before any
answer. s3fs's own retry loop is set to one attempt, so the faults reach the project's retry
(:func:`corpus.storage.filesystems.call`), where they are counted by method and matched by retries; every operation
ends with the exact bytes, and a store that keeps failing ends in one line after the set number of attempts.

Faults come two in a row: aiohttp, under s3fs, sends an idempotent request again once by itself when its
connection closes before any answer (RFC 9112 allows it), so the second of the two is the one the project sees."""

from __future__ import annotations

import numpy as np
import pytest

from corpus import storage
from corpus.storage import chunked, filesystems
from corpus.storage.remote_file import RemoteReader
from corpus.storage.s3_client import s3_client
from tests.corpus.storage.test_retries import _data
from tests.s3_server import TRANSIENT

#: Two requests in four fail, one after the other: past aiohttp's own repeat, then (an operation made of two
#: requests, a glob's listings, included) through.
BURST = {"every": 4, "burst": 2}


def _repeated_by_aiohttp(fault: str, method: str) -> bool:
    """Whether aiohttp sends the failed request again itself: the connection closed before any answer (a reset,
    or a drop that had no answer to cut: halfway through an upload's body, or a HEAD's)."""
    return fault == "reset" or (fault == "drop" and method in ("PUT", "HEAD"))


def _retried_once_per_failure(faults, fault: str, method: str) -> None:
    """Only ``method`` requests failed, two at a time, and the project retried each failure aiohttp did not
    repeat itself."""
    assert set(faults.injected) == {method}
    bursts, odd = divmod(faults.injected[method], 2)
    assert bursts >= 1 and not odd
    assert len(faults.retries) == bursts * (1 if _repeated_by_aiohttp(fault, method) else 2)


def _uploaded(faults, bucket: str, tmp_path, size: int, seed: int) -> tuple[bytes, str]:
    """``size`` random bytes put at ``bucket/blob`` through s3fs with no fault; the bytes and the URL."""
    data = _data(size, seed=seed)
    (tmp_path / "blob").write_bytes(data)
    url = f"{bucket}/blob"
    assert s3_client(url) is None, "the storage options should leave s3:// paths to s3fs"
    faults.fail(None)
    storage.upload(tmp_path / "blob", url)
    return data, url


@pytest.mark.parametrize("fault", TRANSIENT)
def test_an_upload_a_stat_and_whole_reads_through_s3fs_are_retried_through_each_fault(s3fs_faults, bucket,
                                                                                     tmp_path, fault):
    faults = s3fs_faults
    data = _data(3 << 20, seed=5)
    (tmp_path / "blob").write_bytes(data)
    url = f"{bucket}/blob"
    faults.fail(fault, methods=("PUT",), **BURST)
    storage.upload(tmp_path / "blob", url)
    _retried_once_per_failure(faults, fault, "PUT")
    faults.fail(fault, methods=("HEAD",), **BURST)
    assert storage.info(url).size == len(data)
    _retried_once_per_failure(faults, fault, "HEAD")
    faults.fail(fault, methods=("GET",), **BURST)
    assert storage.read_bytes(url) == data
    _retried_once_per_failure(faults, fault, "GET")
    faults.fail(fault, methods=("GET",), **BURST)
    storage.download(url, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data
    _retried_once_per_failure(faults, fault, "GET")


@pytest.mark.parametrize("fault", TRANSIENT)
def test_listings_through_s3fs_are_retried_through_each_fault(s3fs_faults, bucket, tmp_path, fault):
    _, url = _uploaded(s3fs_faults, bucket, tmp_path, 1000, seed=6)
    storage.write_bytes(f"{bucket}/more/other", b"x")
    s3fs_faults.fail(fault, methods=("GET",), **BURST)
    assert [found.path for found in storage.list_objects(f"{bucket}/")] == [url, f"{bucket}/more/other"]
    _retried_once_per_failure(s3fs_faults, fault, "GET")
    s3fs_faults.fail(fault, methods=("GET",), **BURST)
    assert storage.glob(f"{bucket}/*/oth*") == [f"{bucket}/more/other"]
    _retried_once_per_failure(s3fs_faults, fault, "GET")


@pytest.mark.parametrize("fault", TRANSIENT)
def test_ranged_reads_and_the_chunk_cache_through_s3fs_are_retried_through_each_fault(s3fs_faults, bucket,
                                                                                      tmp_path, monkeypatch, fault):
    """Nothing read ahead, so the blocks and chunks are requested one at a time and the counts are exact."""
    monkeypatch.setattr(chunked, "READ_AHEAD", 0)
    piece = 64 << 10
    data, url = _uploaded(s3fs_faults, bucket, tmp_path, 12 * piece, seed=7)
    found = storage.info(url)
    for read in (lambda: RemoteReader(found, block_bytes=piece, ahead=0).read(),
                 lambda: np.asarray(chunked.ChunkedArray(found, np.uint16, chunk_bytes=piece))):
        s3fs_faults.fail(fault, methods=("GET",), **BURST)
        assert bytes(read()) == data
        _retried_once_per_failure(s3fs_faults, fault, "GET")
        assert s3fs_faults.requests["GET"] - s3fs_faults.total == 12  # one good answer per block or chunk


def test_a_multipart_upload_through_s3fs_is_retried_whole_and_aborted_each_time(s3fs_faults, bucket, tmp_path,
                                                                                monkeypatch, s3):
    """s3fs sends the parts itself: a part that fails past botocore's retries (off here) fails the upload, which
    s3fs aborts and the project starts again. One PUT in four fails: the first three uploads lose a part each, the
    fourth gets its three through."""
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    data = _data(11 << 20, seed=8)  # three parts
    (tmp_path / "big").write_bytes(data)
    s3fs_faults.fail("internal", every=4, methods=("PUT",))
    storage.upload(tmp_path / "big", f"{bucket}/big")
    assert s3fs_faults.injected == {"PUT": 3} and len(s3fs_faults.retries) == 3
    assert s3fs_faults.requests["PUT"] == 12 and s3fs_faults.requests["POST"] == 4 + 1  # four starts, one completion
    s3fs_faults.fail(None)
    assert storage.info(f"{bucket}/big").version.endswith("-3")  # a multipart ETag: three parts
    assert storage.read_bytes(f"{bucket}/big") == data
    assert not s3.client().list_multipart_uploads(Bucket=bucket.split("://")[1]).get("Uploads")


@pytest.mark.parametrize("fault", TRANSIENT)
def test_a_store_that_keeps_failing_through_s3fs_ends_in_one_line_after_the_set_attempts(s3fs_faults, bucket,
                                                                                        tmp_path, fault):
    """The project's attempts (each repeated once by aiohttp where it repeats), not s3fs's five inside each."""
    _, url = _uploaded(s3fs_faults, bucket, tmp_path, 1000, seed=9)
    for method, action, target, operation in (
            ("GET", "read", url, lambda: storage.read_bytes(url)),
            ("PUT", "upload", f"{bucket}/up", lambda: storage.upload(tmp_path / "blob", f"{bucket}/up"))):
        s3fs_faults.fail(fault, every=1, methods=(method,))
        with pytest.raises(storage.StorageError) as failure:
            operation()
        repeats = 2 if _repeated_by_aiohttp(fault, method) else 1
        assert s3fs_faults.requests[method] == filesystems.ATTEMPTS * repeats
        assert len(s3fs_faults.retries) == filesystems.ATTEMPTS - 1
        message = str(failure.value)
        assert message.startswith(f"{target}: the store kept failing to {action} it after retries")
        assert "try again later, or lower the request rate" in message and "\n" not in message
