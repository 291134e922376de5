"""A real S3 server on localhost for the tests, and a proxy in front of it that injects faults (a pytest plugin).

The server is moto's (its S3 backend and Flask app, from the test extra), one per session, started on first use by the
``s3`` fixture on a free port of 127.0.0.1; the session's environment then points the standard variables at it
(``AWS_ENDPOINT_URL``, dummy ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``), so the
processes tests start reach it exactly as a user's would reach their store. ``bucket`` gives each test a fresh
bucket. ``faults`` is an HTTP proxy in front of the server that fails chosen requests as a store fails them (503
SlowDown, 500 InternalError, 403 AccessDenied, a connection that drops halfway through an upload or a download, or
before any answer), with the client's own retries off so that every fault reaches the project's retry
(:func:`corpus.storage.filesystems.call`).
"""

from __future__ import annotations

import collections
import http.client
import itertools
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_SLOWDOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your "
             b"request rate.</Message></Error>")
_INTERNAL = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered "
             b"an internal error. Please try again.</Message></Error>")
_DENIED = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied"
           b"</Message></Error>")
#: The error answers the proxy can give instead of the server's: status and S3 error document.
_ANSWERS = {"slowdown": (503, _SLOWDOWN), "internal": (500, _INTERNAL), "denied": (403, _DENIED)}
#: Every fault ``FaultProxy.fail`` takes: the answers above, and three ways a connection goes.
FAULTS = (*_ANSWERS, "drop", "reset", "lost")
#: Faults a client should get over by trying again: all but the refusal, and but ``"lost"``, which a client meets
#: as a ``"reset"`` (what differs is that the server acted: tested on the requests for which that matters).
TRANSIENT = ("slowdown", "internal", "drop", "reset")
_HOP_HEADERS = {"transfer-encoding", "connection", "content-length", "keep-alive", "expect"}


@dataclass
class S3Server:
    """The session's S3 server."""

    endpoint: str
    port: int
    _names: itertools.count = field(default_factory=itertools.count)

    def client(self):
        """A boto3 client of the server (for arranging objects, as another tool would)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint)

    def new_bucket(self, stem: str = "test") -> str:
        """A fresh, empty bucket; its ``s3://`` URL."""
        name = f"{stem}-{os.getpid()}-{next(self._names)}"
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> S3Server:
    """Start the S3 server (once) and point this session's environment at it."""
    pytest.importorskip("s3fs", reason="the s3 tests need s3fs: pip install -e '.[test]'")
    server_module = pytest.importorskip("moto.server", reason="the s3 tests need moto: pip install -e '.[test]'")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    cache = tmp_path_factory.mktemp("object_cache")
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("AWS_CONFIG_FILE", str(cache / "no-aws-config"))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(cache / "no-aws-credentials"))
        patch.setenv("BLENDFORGE_OBJECT_CACHE_DIR", str(cache / "objects"))
        patch.setenv("BLENDFORGE_STAGING_DIR", str(cache / "staging"))
        yield S3Server(f"http://{host}:{port}", port)
    server.stop()


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A fresh bucket for one test (``s3://name``); storage options it set are cleared afterwards."""
    from corpus import storage

    yield s3.new_bucket()
    storage.configure({})


class FaultProxy:
    """Forwards HTTP requests to the S3 server and fails the ones its plan picks.

    ``fail(fault, every=n, methods=…)`` makes the first of every n requests of those methods fail (the first
    ``burst``, when given). The faults (:data:`FAULTS`): ``"slowdown"`` (503 SlowDown), ``"internal"`` (500
    InternalError), ``"denied"`` (403 AccessDenied), all answered without the server seeing the request; ``"drop"``:
    the connection closes halfway through the transfer, of the request body for an upload (a request with a body:
    the server never gets it), of the response body otherwise (the server answered); ``"reset"``: the request is
    read whole and the connection closes with no answer (the server never sees it); ``"lost"``: the server gets the
    request and answers, and the connection closes before the answer comes back (what a retry of a request that is
    not idempotent meets). A tuple of faults takes them in turn. ``injected`` counts the faults served by method,
    ``by_fault`` by fault, ``requests`` the requests of each method since ``fail`` (and ``retries``, set by the
    ``faults`` fixture, the project's retries). ``s3fs_faults`` is the same proxy
    with the storage options that send ``s3://`` paths through s3fs instead of the S3 client."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.faults: tuple[str, ...] = ()
        self.every, self.methods, self.burst = 0, (), 1
        self._seen = 0
        self.injected: collections.Counter = collections.Counter()
        self.by_fault: collections.Counter = collections.Counter()
        self.requests: collections.Counter = collections.Counter()
        #: Set by the ``faults`` fixture: the storage options that reach the store through the proxy, and the
        #: project's retries logged meanwhile.
        self.storage_options: dict = {}
        self.retries: list[logging.LogRecord] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _any(self) -> None:
                proxy.forward(self)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail(self, fault: str | tuple[str, ...] | None, every: int = 2,
             methods: tuple[str, ...] = ("GET", "PUT", "POST"), burst: int = 1) -> None:
        """Fail the first ``burst`` of every ``every`` requests of ``methods`` from now on with ``fault`` (in turn,
        when several), or forward everything (None); the counts start again. A burst of two gets past a client that
        sends a request again once by itself (aiohttp, under s3fs, when a connection closes before any answer)."""
        faults = () if fault is None else (fault,) if isinstance(fault, str) else tuple(fault)
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
        if not 1 <= burst <= every:
            raise ValueError(f"burst={burst}: from one request to every={every} of them fail")
        with self._lock:
            self.faults, self.every, self.methods, self.burst, self._seen = faults, every, methods, burst, 0
            for counter in (self.injected, self.by_fault, self.requests):
                counter.clear()
            self.retries.clear()

    @property
    def total(self) -> int:
        """Faults served since ``fail``."""
        return sum(self.injected.values())

    def _pick(self, method: str) -> str | None:
        with self._lock:
            self.requests[method] += 1
            if not self.faults or method not in self.methods:
                return None
            self._seen += 1
            if (self._seen - 1) % self.every >= self.burst:
                return None
            fault = self.faults[self.total % len(self.faults)]
            self.injected[method] += 1
            self.by_fault[fault] += 1
            return fault

    @staticmethod
    def _hang_up(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        fault = self._pick(handler.command)
        length = int(handler.headers.get("Content-Length") or 0)
        if fault == "drop" and length > 1:  # an upload: half its body arrives, then the connection goes
            handler.rfile.read(length // 2)
            return self._hang_up(handler)
        body = handler.rfile.read(length) if length else None
        if fault == "reset":
            return self._hang_up(handler)
        if fault in _ANSWERS:
            status, payload = _ANSWERS[fault]
            handler.send_response(status)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(payload) if handler.command != "HEAD" else 0))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(payload)
            return None
        upstream = http.client.HTTPConnection("127.0.0.1", self.target_port, timeout=60)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
        upstream.request(handler.command, handler.path, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        if fault == "lost":
            return self._hang_up(handler)
        if fault == "drop" and (handler.command == "HEAD" or len(data) < 2):  # no body to cut: no answer at all
            return self._hang_up(handler)
        handler.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_HEADERS:
                handler.send_header(key, value)
        handler.send_header("Content-Length", response.getheader("Content-Length") or str(len(data)))
        handler.end_headers()
        if handler.command == "HEAD":
            return None
        if fault == "drop":
            handler.wfile.write(data[: len(data) // 2])
            return self._hang_up(handler)
        handler.wfile.write(data)
        return None


@pytest.fixture(scope="session")
def fault_proxy(s3: S3Server) -> FaultProxy:
    """The session's fault-injecting proxy in front of the S3 server."""
    proxy = FaultProxy(s3.port)
    yield proxy
    proxy.server.shutdown()


#: Storage options with botocore's own retries off (one attempt): every fault reaches the project's retry.
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1, "mode": "standard"}}}
#: An option the S3 client leaves to s3fs (and which changes nothing on the test server): with it, ``s3://`` paths
#: go through s3fs, the path of options only s3fs knows (requester pays, version-aware listings, …).
S3FS_ONLY = {"version_aware": False}


class _Retries(logging.Handler):
    """Collects the retries :func:`corpus.storage.filesystems.call` logs (one record per failed attempt retried)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.records.append(record)


@pytest.fixture
def faults(fault_proxy: FaultProxy, bucket: str, monkeypatch):
    """The proxy, with this process's storage options pointing at it (``faults.storage_options``, for the commands
    a test starts) and botocore's retries off; forwards everything until told to fail. ``faults.retries`` lists
    the project's retries since the test began. The backoff between retries is cut to a few milliseconds: its
    length is not what these tests check, and a run through many faults would otherwise sleep for seconds."""
    from corpus import storage
    from corpus.storage import filesystems

    monkeypatch.setattr(filesystems, "BACKOFF_S", 0.005)
    retries = _Retries()
    logger = logging.getLogger(filesystems.__name__)
    logger.addHandler(retries)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    fault_proxy.fail(None)
    fault_proxy.storage_options = {"endpoint_url": fault_proxy.endpoint, **NO_CLIENT_RETRIES}
    fault_proxy.retries = retries.records  # cleared by each fail(), as the counts are
    storage.configure(fault_proxy.storage_options)
    yield fault_proxy
    fault_proxy.fail(None)
    storage.configure({})
    logger.removeHandler(retries)
    logger.setLevel(level)


@pytest.fixture
def s3fs_faults(faults):
    """``faults`` with every ``s3://`` path going through s3fs (:data:`S3FS_ONLY` in ``faults.storage_options``)."""
    from corpus import storage
    from corpus.storage.s3_client import s3_client

    faults.storage_options = {**faults.storage_options, **S3FS_ONLY}
    storage.configure(faults.storage_options)
    assert s3_client("s3://any/object") is None, f"{S3FS_ONLY} no longer sends s3:// paths through s3fs"
    return faults


@pytest.fixture(params=["s3-client", "s3fs"])
def faults_each_path(request, faults):
    """``faults`` once with the S3 client serving ``s3://`` paths, once with s3fs (``s3fs_faults``): the commands a
    user runs go through either, depending on the storage options."""
    return request.getfixturevalue("s3fs_faults") if request.param == "s3fs" else faults
