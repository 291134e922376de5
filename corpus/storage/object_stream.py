"""Bytes of an S3 object from an offset to its end through one streaming GET, received by a background thread.

A sequential reader (JSONL, a compressed stream, ``corpus merge``) wants the store's bandwidth at the least CPU.
Ranged GETs cost a request each, and on servers that copy the object for every request (moto does) the server pays
once per range. Here one GET of ``bytes=start-`` on a presigned URL, signed by the store's S3 client
(:mod:`corpus.storage.s3_client`: the storage options' credentials, endpoint and region), is read with ``readinto``
into chunks by a thread that runs at most ``DEPTH`` chunks ahead of the reader; socket reads release the GIL, so
receiving overlaps the reader's own work. A dropped connection or a short body resumes with a new GET from the byte
reached, retried with backoff like every remote call (:func:`corpus.storage.filesystems.call`); HTTP errors become
the exceptions :mod:`corpus.storage.errors` tells apart.

Objects of stores without such a client (other schemes, options only s3fs knows) and clients with proxies in
their config (this GET uses the environment's, as botocore does without them) keep ranged reads.
"""

from __future__ import annotations

import queue
import re
import ssl
import threading
import urllib.error
import urllib.request

from corpus.storage.errors import ObjectChanged, ServerBusy, ShortRead, store_answer
from corpus.storage.filesystems import call
from corpus.storage.s3_client import S3Client

#: Bytes received per chunk: large next to the per-read overhead, small next to the object.
CHUNK_BYTES = 8 << 20
#: The first chunk's size; each next one is as large as all before it, up to CHUNK_BYTES: a reader that looks at
#: the first records gets them before a whole chunk has arrived.
FIRST_CHUNK_BYTES = 1 << 20
#: Chunks received ahead of the reader (memory: ``(DEPTH + 2) * CHUNK_BYTES`` at most per stream).
DEPTH = 4
#: How long a presigned URL stays valid; each (re)connection signs a new one.
EXPIRES_S = 3600
#: Seconds a connect or a socket read may wait before the connection counts as dropped.
TIMEOUT_S = 60


class _Closed(Exception):
    """The stream was closed while receiving. Private: it ends the receiving thread without a retry, and is never
    seen outside it."""


def _opener(verify: bool | str) -> urllib.request.OpenerDirector:
    """An opener that verifies certificates as the S3 client does (``verify``: False, a CA bundle's path, or
    True for the system's) and uses the proxies of the environment, as botocore does."""
    if verify is False:
        context = ssl._create_unverified_context()  # the user turned verification off for this store
    else:
        context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))


def _failure(error: urllib.error.HTTPError) -> Exception:
    """The exception a store's error answer stands for, carrying its S3 error code and message."""
    body = error.read(8192).decode("utf-8", "replace") if error.fp else ""
    code = re.search(r"<Code>([^<]*)</Code>", body)
    message = re.search(r"<Message>([^<]*)</Message>", body)
    text = f"{code.group(1) if code else error.reason}: {message.group(1) if message else ''} ({error.code})"
    if error.code == 404:
        failure: Exception = FileNotFoundError(text)
    elif error.code == 403:
        failure = PermissionError(text)
    elif error.code >= 500:
        failure = ServerBusy(text)
    elif error.code == 416:
        failure = ObjectChanged(f"it is shorter than when it was listed ({error.code})")
    else:
        failure = OSError(text)
    return store_answer(failure, code.group(1) if code else "", error.code)


class ObjectStream:
    """Bytes ``[start, end)`` of one object, read in order (see the module docstring)."""

    def __init__(self, client: S3Client, url: str, start: int, end: int, chunk_bytes: int = CHUNK_BYTES,
                 depth: int = DEPTH, keep_bytes: int = 0) -> None:
        """``keep_bytes``: keep what is read while it is no more than this, so that :meth:`rewind` can go back
        to ``start`` (a look at an object's first records, then a run over all of it: one GET)."""
        self.url, self.start, self.position, self._end = url, start, start, end
        self._kept: list[bytes] | None = [] if keep_bytes else None
        self._keep_bytes = keep_bytes
        self._client, self._opener = client, _opener(client.verify)
        self._chunk_bytes = chunk_bytes
        self._chunks: queue.Queue = queue.Queue(depth)
        self._chunk = memoryview(b"")
        self._finished: BaseException | bool = False  # True at the end; the failure that ended it otherwise
        self._response = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, args=(start,), daemon=True,
                                        name="blendforge-stream")
        self._thread.start()

    def _connect(self, position: int):
        """A response streaming ``[position, end)``, checked to be that range of the object as listed."""
        request = urllib.request.Request(self._client.presigned(self.url, EXPIRES_S),
                                         headers={"Range": f"bytes={position}-{self._end - 1}"})
        try:
            response = self._opener.open(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as error:
            raise _failure(error) from None
        declared = response.headers.get("Content-Length")
        whole = response.status == 200 and position == 0
        if (response.status != 206 and not whole) or declared is None or int(declared) != self._end - position:
            response.close()
            said = f"{declared} bytes" if declared is not None else "no Content-Length"
            raise ObjectChanged(f"asked for bytes {position}-{self._end - 1}, the store answered "
                                f"{response.status} with {said}")
        return response

    def _next_chunk(self, position: int) -> bytearray:
        """Up to ``chunk_bytes`` from ``position``, from the open response or a new one. A connection that
        fails part-way gives what it delivered (the next call reconnects from there); one that delivers
        nothing raises, for :func:`call` to retry."""
        if self._stop.is_set():
            raise _Closed()
        if self._response is None:
            self._response = self._connect(position)
        ramp = max(FIRST_CHUNK_BYTES, position - self.start)
        chunk = bytearray(min(self._chunk_bytes, ramp, self._end - position))
        view, filled = memoryview(chunk), 0
        try:
            while filled < len(chunk):
                received = self._response.readinto(view[filled:])
                if not received:
                    raise ShortRead(f"the connection closed at byte {position + filled} of {self._end}")
                filled += received
        except Exception:
            self._disconnect()
            if not filled:
                raise
        view.release()
        del chunk[filled:]
        return chunk

    def _disconnect(self) -> None:
        if self._response is not None:
            self._response.close()
            self._response = None

    def _receive(self, position: int) -> None:
        """The receiving thread: chunks into the queue, then True, or the failure that stopped it."""
        try:
            while position < self._end:
                chunk = call("read", self.url, self._next_chunk, position)
                self._put(chunk)
                position += len(chunk)
            self._put(True)
        except BaseException as error:  # noqa: BLE001 - handed to the reader, which raises it
            self._put(error)
        finally:
            self._disconnect()

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._chunks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def read(self, size: int) -> bytes:
        """Up to ``size`` next bytes (fewer only at the end); raises what stopped the receiving thread."""
        pieces, wanted = [], size
        while wanted > 0:
            if not self._chunk:
                if self._finished is True:
                    break
                if self._finished:
                    raise self._finished
                item = self._chunks.get()
                if not isinstance(item, bytearray):
                    self._finished = item
                    continue
                self._chunk = memoryview(item)
            piece = self._chunk[:wanted]
            pieces.append(piece)
            self._chunk, wanted = self._chunk[len(piece):], wanted - len(piece)
        data = b"".join(pieces)
        self.position += len(data)
        if self._kept is not None and self.position - self.start <= self._keep_bytes:
            self._kept.append(data)
        else:
            self._kept = None
        return data

    def rewind(self) -> bool:
        """Go back to ``start`` if all that was read is kept (else False, and nothing changes)."""
        if self._kept is None or self._finished not in (False, True):
            return False
        self._chunk = memoryview(b"".join(self._kept) + self._chunk)
        self.position, self._kept = self.start, []
        return True

    def close(self) -> None:
        """Stop receiving; the thread ends after the read it is in (a daemon: it never holds the process)."""
        self._stop.set()
        self._chunk = memoryview(b"")
        while not self._chunks.empty():
            self._chunks.get_nowait()
