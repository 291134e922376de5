"""The streaming GET behind sequential remote client, against the real S3 server: exact bytes in few requests,
one-line errors for a store that says no or an object that changes, and a close that stops receiving."""

from __future__ import annotations

import numpy as np
import pytest

from corpus import storage
from corpus.storage.object_stream import ObjectStream
from corpus.storage.remote_file import RemoteReader
from corpus.storage.s3_client import s3_client


def _blob(bucket: str, size: int, name: str = "blob") -> tuple[bytes, storage.ObjectInfo]:
    data = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8).tobytes()
    storage.write_bytes(f"{bucket}/{name}", data)
    return data, storage.info(f"{bucket}/{name}")


def test_a_stream_gives_the_exact_bytes_from_any_offset_across_chunks(bucket):
    data, found = _blob(bucket, 1_000_003)
    for start, sizes in ((0, [1, 65_535, 10**6]), (77_777, [65_536, 3, 200_000, 10**7])):
        stream = ObjectStream(s3_client(found.path), found.path, start, found.size, chunk_bytes=64 << 10, depth=2)
        got = b"".join(stream.read(size) for size in sizes)
        assert got == data[start:] and stream.position == found.size and stream.read(10) == b""
        stream.close()


def test_a_sequential_read_is_one_get_and_a_look_at_the_start_before_it_costs_none(faults, bucket):
    data, found = _blob(bucket, 3 << 20)
    faults.fail(None)
    with RemoteReader(found) as look:
        assert look.read(1000) == data[:1000]  # the first records, as a run's check of its input reads them
    with RemoteReader(found) as reader:
        pieces = [reader.read(100_000) for _ in range(40)]
    assert b"".join(pieces) == data and faults.requests["GET"] == 1


def test_a_seek_away_from_the_stream_reads_a_small_block_and_reading_on_streams_again(faults, bucket):
    data, found = _blob(bucket, 3 << 20, "seeky")
    faults.fail(None)
    with RemoteReader(found, first_block_bytes=256 << 10) as reader:
        assert reader.read(300_000) == data[:300_000]  # a stream from the start
        reader.seek(-8, 2)
        assert reader.read(8) == data[-8:]  # a footer: one block of 256 KiB, not the 64 MiB of BLOCK_BYTES
        reader.seek(100)
        assert reader.read() == data[100:]  # the first block, then a stream again
    assert faults.requests["GET"] == 4


def test_only_stores_with_an_s3_client_and_no_configured_proxy_stream(bucket):
    storage.write_bytes(f"{bucket}/x", b"x")
    found = storage.info(f"{bucket}/x")
    assert RemoteReader(found)._streams
    storage.configure({"requester_pays": True})  # an option only s3fs knows: s3fs reads, in ranges
    assert s3_client(bucket) is None and not RemoteReader(found)._streams
    storage.configure({"config_kwargs": {"proxies": {"https": "http://proxy:3128"}}})
    assert s3_client(bucket).proxies and not RemoteReader(found)._streams
    storage.configure({})
    assert s3_client("gs://bucket/x") is None


def test_denied_access_when_a_stream_starts_is_one_line_naming_the_object(faults, bucket):
    _, found = _blob(bucket, 2 << 20, "secret")
    faults.fail("denied", every=1)
    with RemoteReader(found) as reader:
        with pytest.raises(storage.StorageError, match="access denied while trying to read it") as denied:
            reader.read(10)
    assert f"{bucket}/secret" in str(denied.value) and "\n" not in str(denied.value)


def test_an_object_replaced_or_deleted_while_read_is_a_clear_error(bucket):
    _, found = _blob(bucket, 2 << 20, "moving")
    storage.write_bytes(f"{bucket}/moving", b"shorter now")
    with pytest.raises(storage.StorageError, match="changed while it was read"):
        ObjectStream(s3_client(found.path), found.path, 256 << 10, found.size).read(10)  # a stream resuming
    with RemoteReader(found) as reader, pytest.raises(storage.StorageError, match="changed while it was read"):
        reader.seek(1 << 20)
        reader.read(10)  # a block after a seek
    storage.delete(f"{bucket}/moving")
    with pytest.raises(storage.ObjectNotFound, match="no such object"):
        ObjectStream(s3_client(found.path), found.path, 0, found.size).read(10)


def test_closing_a_stream_stops_its_thread(bucket):
    _, found = _blob(bucket, 4 << 20)
    stream = ObjectStream(s3_client(found.path), found.path, 0, found.size, chunk_bytes=64 << 10, depth=1)
    assert len(stream.read(1000)) == 1000
    stream.close()
    stream._thread.join(timeout=30)
    assert not stream._thread.is_alive()
