"""A real S3 server on localhost for the tests, and a proxy in front of it that injects faults (a pytest plugin).

The server is moto's (its S3 backend and Flask app, from the test extra), one per session, started on first use by the
``s3`` fixture on a free port of 127.0.0.1; the session's environment then points the standard variables at it
(``AWS_ENDPOINT_URL``, dummy ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``), so the
processes tests start reach it exactly as a user's would reach their store. ``bucket`` gives each test a fresh
bucket. ``faults`` is an HTTP proxy in front of the server that answers chosen requests with ``503 SlowDown`` or
``403 AccessDenied``, or closes the connection halfway through a response body.
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
_DENIED = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied"
           b"</Message></Error>")
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

    ``fail(fault, every=n)`` makes the first of every n requests (of the given methods) fail with ``fault``:
    ``"slowdown"`` (503 SlowDown), ``"denied"`` (403 AccessDenied) or ``"drop"`` (half the response body, then the
    connection closes). ``injected`` counts the faults served, ``requests`` the requests of each method since then."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.fault, self.every, self.methods = None, 0, ()
        self.injected, self._seen = 0, 0
        self.requests: collections.Counter = collections.Counter()
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

    def fail(self, fault: str | None, every: int = 2, methods: tuple[str, ...] = ("GET", "PUT", "POST")) -> None:
        """Fail the first of every ``every`` requests of ``methods`` from now on (None: forward everything)."""
        with self._lock:
            self.fault, self.every, self.methods, self._seen, self.injected = fault, every, methods, 0, 0
            self.requests.clear()

    def _pick(self, method: str) -> str | None:
        with self._lock:
            self.requests[method] += 1
            if self.fault is None or method not in self.methods:
                return None
            self._seen += 1
            if (self._seen - 1) % self.every:
                return None
            self.injected += 1
            return self.fault

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        fault = self._pick(handler.command)
        if fault in ("slowdown", "denied"):
            status, payload = (503, _SLOWDOWN) if fault == "slowdown" else (403, _DENIED)
            handler.send_response(status)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(payload) if handler.command != "HEAD" else 0))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(payload)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.target_port, timeout=60)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
        upstream.request(handler.command, handler.path, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        handler.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_HEADERS:
                handler.send_header(key, value)
        handler.send_header("Content-Length", response.getheader("Content-Length") or str(len(data)))
        handler.end_headers()
        if handler.command == "HEAD":
            return
        if fault == "drop" and len(data) > 1:
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        handler.wfile.write(data)


@pytest.fixture(scope="session")
def fault_proxy(s3: S3Server) -> FaultProxy:
    """The session's fault-injecting proxy in front of the S3 server."""
    proxy = FaultProxy(s3.port)
    yield proxy
    proxy.server.shutdown()


@pytest.fixture
def faults(fault_proxy: FaultProxy, bucket: str):
    """The proxy, with this process's storage options pointing at it; forwards everything until told to fail.
    botocore's own retries are kept to two attempts so that the project's retries are the ones tested."""
    from corpus import storage

    fault_proxy.fail(None)
    storage.configure({"endpoint_url": fault_proxy.endpoint,
                       "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}}})
    yield fault_proxy
    fault_proxy.fail(None)
    storage.configure({})
