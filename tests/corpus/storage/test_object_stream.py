"""The streaming GET behind sequential remote client, against the real S3 server: exact bytes in few requests,
one-line errors for a store that says no or an object that changes, and a close that stops receiving. Against a
small local HTTP server standing for a store: each error answer's line, answers that are not the range asked for,
and certificates checked as the client is told."""

from __future__ import annotations

import http.client
import itertools
import os
import queue
import ssl
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Callable

import numpy as np
import pytest

from corpus import storage
from corpus.storage import filesystems, object_stream, remote_file
from corpus.storage.object_stream import ObjectStream, _opener
from corpus.storage.remote_file import RemoteReader
from corpus.storage.s3_client import s3_client
from tests.conftest import REPO


def _blob(bucket: str, size: int, name: str = "blob") -> tuple[bytes, storage.ObjectInfo]:
    data = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8).tobytes()
    storage.write_bytes(f"{bucket}/{name}", data)
    return data, storage.info(f"{bucket}/{name}")


def test_a_stream_gives_the_exact_bytes_from_any_offset_across_chunks(bucket):
    data, found = _blob(bucket, 1_000_003)
    for start, sizes in ((0, [1, 65_535, 10**6]), (77_777, [65_536, 3, 200_000, 10**7])):
        stream = ObjectStream(s3_client(found.path), found.path, start, found.size, chunk_bytes=64 << 10, depth=2)
        pieces = [stream.read(size) for size in sizes]
        assert b"".join(pieces) == data[start:] and stream.position == found.size and stream.read(10) == b""
        assert [len(piece) for piece in pieces[:-1]] == sizes[:-1]  # each read as long as asked, but at the end
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


def test_a_reader_slower_than_the_stream_still_gets_every_byte(bucket, monkeypatch):
    """The receiving thread finds the queue full (the reader is busy elsewhere): it waits and offers the chunk again,
    never drops it."""
    refused = threading.Event()

    class NotingQueue(queue.Queue):
        def put(self, item, block=True, timeout=None) -> None:
            try:
                super().put(item, block, timeout)
            except queue.Full:
                refused.set()
                raise

    monkeypatch.setattr(object_stream, "queue", SimpleNamespace(Queue=NotingQueue, Full=queue.Full))
    data, found = _blob(bucket, 1 << 20, "slow")
    stream = ObjectStream(s3_client(found.path), found.path, 0, found.size, chunk_bytes=64 << 10, depth=1)
    try:
        assert refused.wait(timeout=60)  # the reader has not read yet: the thread waited on a full queue
        assert stream.read(found.size) == data
    finally:
        stream.close()


def test_a_stream_over_part_of_an_object_gives_exactly_that_part(bucket):
    data, found = _blob(bucket, 300_001, "part")
    stream = ObjectStream(s3_client(found.path), found.path, 1000, 200_000, chunk_bytes=64 << 10)
    try:
        assert stream.read(10**6) == data[1000:200_000] and stream.read(1) == b""
    finally:
        stream.close()


def test_a_reader_closed_past_the_kept_start_leaves_no_stream_for_the_next(faults, bucket, monkeypatch):
    """Only a stream read no further than its first block goes back to the start for the next reader; one read
    past it is closed (the next reader must not go on from where it stopped)."""
    monkeypatch.setattr(remote_file, "FIRST_BLOCK_BYTES", 64 << 10)
    data, found = _blob(bucket, 1 << 20, "twice")
    faults.fail(None)
    with RemoteReader(found) as look:  # the first records, in three reads: kept, and rewound
        assert look.read(1000) + look.read(1000) + look.read(1000) == data[:3000]
    with RemoteReader(found) as reader:
        assert reader.read(200 << 10) == data[: 200 << 10]  # past the first block: not kept
    assert faults.requests["GET"] == 1
    with RemoteReader(found) as again:
        assert again.read() == data
    assert faults.requests["GET"] == 2


class _Store(BaseHTTPRequestHandler):
    """A store that answers every GET with the server's ``answer``: (status, headers, body); a header given as None
    is left out (a Content-Length left out: the body ends with the connection)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status, headers, body = self.server.answer(self.headers.get("Range"))
        self.send_response(status)
        headers = {"Content-Length": str(len(body)), **headers}
        for key, value in headers.items():
            if value is not None:
                self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        length = headers["Content-Length"]
        if length is None or len(body) < int(length):  # the client sees the body end with the connection
            self.close_connection = True


@pytest.fixture
def store(monkeypatch):
    """A local HTTP server standing for a store, and a client that presigns every URL to it."""
    monkeypatch.setattr(filesystems, "BACKOFF_S", 0.001)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = SimpleNamespace(verify=True, presigned=lambda url, expires: f"http://127.0.0.1:{server.server_port}/k")
    yield server, client
    server.shutdown()


def _error(code: str, message: str) -> bytes:
    return f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()


URL = "s3://bucket/k"


def first_read_failure(client) -> str:
    """The one line a stream of bytes 0-99 of ``URL`` fails its first read with."""
    stream = ObjectStream(client, URL, 0, 100)
    try:
        with pytest.raises(storage.StorageError) as failure:
            stream.read(10)
    finally:
        stream.close()
    return str(failure.value)


@pytest.mark.parametrize("status, body, expected", [
    (403, _error("AccessDenied", "Access Denied"),
     f"{URL}: access denied while trying to read it (AccessDenied: Access Denied (403)); check that the credentials "
     "in use (AWS_PROFILE, AWS_ACCESS_KEY_ID) may read this bucket"),
    (404, _error("NoSuchKey", "The specified key does not exist."),
     f"{URL}: no such object (check the path; `aws s3 ls` or the store's console lists what is there)"),
    (416, _error("InvalidRange", "The requested range is not satisfiable"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (it is shorter than when it "
     "was listed (416))"),
    (503, _error("SlowDown", "Please reduce your request rate."),
     f"{URL}: the store kept failing to read it after retries (SlowDown: Please reduce your request rate. (503)); "
     "try again later, or lower the request rate (fewer --workers or shards at once)"),
    (500, b"", f"{URL}: the store kept failing to read it after retries (Internal Server Error:  (500)); try again "
     "later, or lower the request rate (fewer --workers or shards at once)"),
    (400, b"", f"{URL}: cannot read it (OSError: Bad Request:  (400))"),
], ids=lambda value: str(value) if isinstance(value, int) else "")
def test_each_error_answer_is_the_line_its_code_and_message_call_for(store, status, body, expected):
    server, client = store
    server.answer = lambda asked: (status, {"Content-Type": "application/xml"}, body)
    assert first_read_failure(client) == expected


def test_a_store_that_ignores_the_range_is_read_from_the_start_and_refused_elsewhere(store):
    """An answer of the whole object (200) serves a stream from byte 0; anywhere else it is not the bytes asked
    for, and neither is a 206 of another length."""
    server, client = store
    data = bytes(range(100))
    server.answer = lambda asked: (200, {}, data)
    stream = ObjectStream(client, URL, 0, 100)
    assert stream.read(1000) == data
    stream.close()
    for answer, said in (((200, {}, data), "the store answered 200 with 100 bytes"),
                         ((206, {"Content-Range": "bytes 5-98/100"}, data[5:99]),
                          "the store answered 206 with 94 bytes"),
                         ((206, {"Content-Range": "bytes 5-99/100", "Content-Length": None}, data[5:]),
                          "the store answered 206 with no Content-Length")):
        server.answer = lambda asked, answer=answer: answer
        stream = ObjectStream(client, URL, 5, 100)
        with pytest.raises(storage.StorageError, match="changed while it was read") as failure:
            stream.read(10)
        stream.close()
        assert f"(asked for bytes 5-99, {said})" in str(failure.value)


@pytest.mark.parametrize("delivered", [[40], [40, 1], [0, 40]], ids=["once", "twice", "nothing-then-some"])
def test_a_connection_dropped_part_way_is_taken_up_where_it_ended(store, delivered):
    """Each answer promises the rest of the object; the first ones deliver only ``delivered`` bytes of it: what
    came is kept, the next request asks from where it ended, and a connection that delivered nothing is retried."""
    server, client = store
    data = bytes(range(100))
    asked = []

    def answer(range_header: str) -> tuple[int, dict, bytes]:
        first = int(range_header.removeprefix("bytes=").split("-")[0])
        asked.append(first)
        promised = {"Content-Length": str(len(data) - first), "Content-Range": f"bytes {first}-99/100"}
        cut = delivered[len(asked) - 1] if len(asked) <= len(delivered) else None
        return 206, promised, data[first:][:cut]

    server.answer = answer
    stream = ObjectStream(client, URL, 0, 100)
    try:
        assert stream.read(1000) == data
    finally:
        stream.close()
    assert asked == [0, *itertools.accumulate(delivered)]


def test_bytes_that_arrive_a_few_at_a_time_fill_each_chunk_in_order(store, monkeypatch):
    """A socket gives what has arrived: a chunk is filled by many reads, each going on from where the last ended."""
    server, client = store
    data = bytes(range(100))
    server.answer = lambda asked: (206, {"Content-Range": "bytes 0-99/100"}, data)
    readinto = http.client.HTTPResponse.readinto
    monkeypatch.setattr(http.client.HTTPResponse, "readinto", lambda self, buffer: readinto(self, buffer[:7]))
    stream = ObjectStream(client, URL, 0, 100)
    try:
        assert stream.read(1000) == data
    finally:
        stream.close()


def test_a_store_that_keeps_dropping_the_connection_is_one_line_naming_where(store):
    server, client = store
    server.answer = lambda asked: (206, {"Content-Length": "100", "Content-Range": "bytes 0-99/100"}, b"")
    assert first_read_failure(client) == (f"{URL}: the store kept failing to read it after retries (the connection "
                                          "closed at byte 0 of 100); try again later, or lower the request rate "
                                          "(fewer --workers or shards at once)")


def answer_once(released: threading.Event, most_s: float) -> Callable[[str], tuple[int, dict, bytes]]:
    """A store's answer of the whole object that comes only once ``released`` is set (or after ``most_s``)."""

    def answer(asked: str) -> tuple[int, dict, bytes]:
        released.wait(most_s)
        return 206, {"Content-Range": "bytes 0-99/100"}, b"x" * 100

    return answer


def test_a_store_that_takes_the_request_and_stalls_is_given_up_after_the_timeout(store, monkeypatch):
    """No answer ever comes: each attempt ends at the connection's timeout, and the retries end in one line, rather
    than a read waiting for ever."""
    server, client = store
    monkeypatch.setattr(object_stream, "TIMEOUT_S", 0.2)
    released = threading.Event()
    server.answer = answer_once(released, 10)
    try:
        message = first_read_failure(client)
    finally:
        released.set()
    assert message == (f"{URL}: the store kept failing to read it after retries (timed out); try again later, or "
                       "lower the request rate (fewer --workers or shards at once)")


#: A process that opens a stream of a store that never answers, then ends without closing it.
_LEFT_OPEN = """
import sys
from types import SimpleNamespace
from typing import Callable
from corpus.storage.object_stream import ObjectStream
client = SimpleNamespace(verify=True, presigned=lambda url, expires: sys.argv[1])
ObjectStream(client, "s3://bucket/k", 0, 100)
"""


def test_a_stream_left_open_never_holds_its_process_at_exit(store):
    """The receiving thread is a daemon: a process that ends with a stream still waiting on the store ends at once,
    not when the store answers (here: never, until the test lets it)."""
    server, _ = store
    released = threading.Event()
    server.answer = answer_once(released, 60)
    try:
        subprocess.run([sys.executable, "-c", _LEFT_OPEN, f"http://127.0.0.1:{server.server_port}/k"], check=True,
                       timeout=30, env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        released.set()


@pytest.mark.parametrize("verify, mode", [(True, ssl.CERT_REQUIRED), (False, ssl.CERT_NONE)])
def test_the_stream_checks_certificates_as_the_client_is_told_to(store, verify, mode):
    server, client = store
    server.answer = lambda asked: (206, {}, b"x" * 100)
    client.verify = verify
    stream = ObjectStream(client, URL, 0, 100)
    stream.close()
    https = next(handler for handler in stream._opener.handlers if isinstance(handler, urllib.request.HTTPSHandler))
    assert https._context.verify_mode == mode and https._context.check_hostname == verify


def test_a_ca_bundle_the_client_names_is_the_one_the_stream_trusts(tmp_path):
    with pytest.raises(FileNotFoundError):
        _opener(str(tmp_path / "no-such-bundle.pem"))
