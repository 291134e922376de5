"""The project's retry (:func:`corpus.storage.filesystems.call`) through every fault a store gives, on the real S3
server behind the fault proxy with botocore's own retries off: throttling (503 SlowDown), a temporary server error
(500 InternalError), a connection dropped halfway through an upload or a download, and one dropped before any
answer. Each fault is counted where it was served and matched by a retry here; uploads in one PUT and in parts,
block and streaming reads, and the chunk cache all end with the exact bytes; a store that keeps failing ends in one
line after the set number of attempts."""

from __future__ import annotations

import numpy as np
import pytest

from corpus import storage
from corpus.storage import chunked, filesystems
from corpus.storage.object_stream import ObjectStream
from corpus.storage.remote_file import RemoteReader
from corpus.storage.s3_client import s3_client
from tests.s3_server import TRANSIENT


def _data(size: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 255, size, dtype=np.uint8).tobytes()


def _failing_reads(faults, bucket: str, fault: str, seed: int) -> tuple[bytes, storage.ObjectInfo]:
    """A 3 MiB object's bytes and listing, with one GET in two failing with ``fault`` from now on."""
    data = _data(3 << 20, seed=seed)
    storage.write_bytes(f"{bucket}/blob", data)
    found = storage.info(f"{bucket}/blob")
    faults.fail(fault, every=2, methods=("GET",))
    return data, found


@pytest.mark.parametrize("fault", TRANSIENT)
def test_an_upload_in_one_put_is_retried_through_each_fault(faults, bucket, tmp_path, fault):
    data = _data(3 << 20)
    (tmp_path / "blob").write_bytes(data)
    faults.fail(fault, every=2, methods=("PUT",))
    storage.upload(tmp_path / "blob", f"{bucket}/blob")
    assert faults.injected == {"PUT": 1} and len(faults.retries) == 1
    faults.fail(None)
    assert storage.read_bytes(f"{bucket}/blob") == data


@pytest.mark.parametrize("fault", TRANSIENT)
def test_a_multipart_upload_retries_each_part_and_completes(faults, bucket, tmp_path, monkeypatch, fault):
    """One request in two fails: a retry of the whole upload would fail again on a later part every time (three
    parts never pass in a row), so each part is retried on its own."""
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    data = _data(11 << 20, seed=1)  # three parts
    (tmp_path / "big").write_bytes(data)
    faults.fail(fault, every=2, methods=("PUT", "POST"))
    storage.upload(tmp_path / "big", f"{bucket}/big")
    assert faults.injected["PUT"] >= 1 and faults.injected["POST"] >= 1
    assert len(faults.retries) == faults.total
    faults.fail(None)
    assert storage.info(f"{bucket}/big").version.endswith("-3")  # a multipart ETag: three parts
    assert storage.read_bytes(f"{bucket}/big") == data


@pytest.mark.parametrize("fault", TRANSIENT)
def test_reads_in_blocks_in_one_stream_and_whole_are_retried_through_each_fault(faults, bucket, fault):
    data, found = _failing_reads(faults, bucket, fault, seed=2)
    with RemoteReader(found, block_bytes=256 << 10, stream=False) as reader:
        reader.seek(1000)
        assert reader.read(10) == data[1000:1010] and reader.read() == data[1010:]
    assert faults.injected["GET"] >= 12 and len(faults.retries) == faults.total  # twelve blocks, each failed once
    faults.fail(fault, every=2, methods=("GET",))
    with RemoteReader(found, stream=True) as reader:
        reader.seek(300_000)  # past the first block, which the reader above kept
        assert reader.read() == data[300_000:]
    # One GET failed, one more went on from the byte reached: a drop mid-body keeps what arrived (a retry only
    # when the cut falls between two of the stream's chunks).
    assert faults.injected["GET"] == 1 and faults.requests["GET"] == 2
    assert len(faults.retries) == 1 if fault != "drop" else len(faults.retries) <= 1
    faults.fail(fault, every=2, methods=("GET",))
    assert storage.read_bytes(f"{bucket}/blob") == data
    assert faults.injected["GET"] == 1 and len(faults.retries) == faults.total


@pytest.mark.parametrize("fault", TRANSIENT)
def test_a_stream_goes_on_through_each_fault_from_the_byte_reached(faults, bucket, fault):
    data, found = _failing_reads(faults, bucket, fault, seed=4)
    stream = ObjectStream(s3_client(found.path), found.path, 0, found.size, chunk_bytes=256 << 10)
    try:
        assert stream.read(found.size + 1) == data
    finally:
        stream.close()
    assert faults.injected["GET"] == 1 and faults.requests["GET"] == 2


@pytest.mark.parametrize("fault", TRANSIENT)
def test_chunk_cache_reads_are_retried_through_each_fault(faults, bucket, fault):
    tokens = np.random.default_rng(3).integers(0, 50_000, 200_001, dtype=np.uint16)
    storage.write_bytes(f"{bucket}/t.bin", tokens.tobytes())
    found = storage.info(f"{bucket}/t.bin")
    faults.fail(fault, every=2, methods=("GET",))
    remote = chunked.ChunkedArray(found, np.uint16, chunk_bytes=32 << 10)
    assert np.array_equal(np.asarray(remote), tokens)
    assert faults.injected["GET"] >= 2 and len(faults.retries) == faults.total


@pytest.mark.parametrize("fault", TRANSIENT)
def test_a_store_that_keeps_failing_ends_in_one_line_after_the_set_attempts(faults, bucket, tmp_path, fault):
    storage.write_bytes(f"{bucket}/blob", b"x" * 1000)
    faults.fail(fault, every=1, methods=("GET",))
    with pytest.raises(storage.StorageError) as read:
        storage.read_bytes(f"{bucket}/blob")
    assert faults.requests["GET"] == filesystems.ATTEMPTS and len(faults.retries) == filesystems.ATTEMPTS - 1
    (tmp_path / "blob").write_bytes(b"y" * 1000)
    faults.fail(fault, every=1, methods=("PUT",))
    with pytest.raises(storage.StorageError) as upload:
        storage.upload(tmp_path / "blob", f"{bucket}/up")
    assert faults.requests["PUT"] == filesystems.ATTEMPTS
    for failure, action, url in ((read, "read", f"{bucket}/blob"), (upload, "upload", f"{bucket}/up")):
        message = str(failure.value)
        assert message.startswith(f"{url}: the store kept failing to {action} it after retries")
        assert "try again later, or lower the request rate" in message and "\n" not in message


def test_a_part_that_keeps_failing_ends_the_upload_once_and_aborts_it(faults, bucket, tmp_path, monkeypatch, s3):
    """The part's own retries are the only ones: the upload is not started again around them."""
    monkeypatch.setattr(storage.objects, "UPLOAD_PART_BYTES", 5 << 20)
    (tmp_path / "big").write_bytes(b"x" * (11 << 20))
    faults.fail("slowdown", every=1, methods=("PUT",))  # every part; the upload's start and abort pass
    with pytest.raises(storage.StorageError, match="kept failing to upload it after retries"):
        storage.upload(tmp_path / "big", f"{bucket}/big")
    assert faults.requests["PUT"] == filesystems.ATTEMPTS and faults.requests["POST"] == 1
    faults.fail(None)
    assert not storage.exists(f"{bucket}/big")
    assert not s3.client().list_multipart_uploads(Bucket=bucket.split("://")[1]).get("Uploads")


@pytest.mark.parametrize("code", ["NoSuchKey", "404"])
def test_a_missing_object_is_not_found_whatever_code_the_answer_carries(code):
    """A GET's 404 may come without its XML body (the code is then the bare status, as after a retried fault):
    it is still "not there", which callers take as absent, not a failure."""
    from botocore.exceptions import ClientError

    from corpus.storage.errors import ObjectNotFound, translate

    error = ClientError({"Error": {"Code": code, "Message": "Not Found"}, "ResponseMetadata": {"HTTPStatusCode": 404}},
                        "GetObject")
    assert isinstance(translate(error, "s3://bucket/key", "read"), ObjectNotFound)


def test_retries_back_off_exponentially_with_jitter_up_to_a_cap(monkeypatch):
    """The wait before attempt n + 1 is the base doubled n times, capped, times a random factor in [0.5, 1.5)."""
    slept, calls = [], []
    monkeypatch.setattr(filesystems.time, "sleep", slept.append)
    monkeypatch.setattr(filesystems.random, "random", lambda: 0.25)  # the factor 0.75
    monkeypatch.setattr(filesystems, "BACKOFF_S", 1.0)
    monkeypatch.setattr(filesystems, "MAX_BACKOFF_S", 3.0)

    def dropped() -> None:
        calls.append(1)
        raise ConnectionResetError("connection reset by peer")

    with pytest.raises(storage.StorageError):
        filesystems.call("read", "s3://bucket/key", dropped)
    assert len(calls) == filesystems.ATTEMPTS
    assert slept == [min(3.0, 2.0 ** attempt) * 0.75 for attempt in range(filesystems.ATTEMPTS - 1)]
