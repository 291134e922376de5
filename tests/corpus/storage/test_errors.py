"""Store failures are told apart by their types and the S3 error codes their answers carry, never by class names or
message text: a look-alike class of the same name is not taken for a client's error, and an answer read without
botocore (the streaming reader's) is told apart by the same code as one read with it."""

from __future__ import annotations

import io
import urllib.error

import aiohttp
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from corpus.storage.errors import ObjectNotFound, is_transient, translate
from corpus.storage.object_stream import _failure

URL = "s3://bucket/key"


def _answer(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "words that say nothing"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def test_a_dropped_connection_is_known_by_its_type_not_its_name():
    look_alike = type("ServerDisconnectedError", (Exception,), {})
    assert is_transient(aiohttp.ServerDisconnectedError())
    assert not is_transient(look_alike("Server disconnected"))
    try:
        raise OSError("while reading the body") from aiohttp.ClientPayloadError("cut short")
    except OSError as wrapped:  # s3fs raises its own error from the client's: the chain is followed
        assert is_transient(wrapped)


@pytest.mark.parametrize("code, status", [("SlowDown", 503), ("InternalError", 500), ("RequestTimeout", 400)])
def test_throttling_and_temporary_failures_are_known_by_code_or_status(code, status):
    assert is_transient(_answer(code, status))
    message = str(translate(_answer(code, status), URL, "read"))
    assert message.startswith(f"{URL}: the store kept failing to read it after retries")


def test_a_refusal_is_not_retried_and_names_the_fix():
    assert not is_transient(_answer("AccessDenied", 403))
    assert "access denied while trying to read it" in str(translate(_answer("AccessDenied", 403), URL, "read"))
    assert "bucket 'bucket' does not exist" in str(translate(_answer("NoSuchBucket", 404), URL, "list"))
    assert isinstance(translate(_answer("NoSuchKey", 404), URL, "read"), ObjectNotFound)


def test_client_exception_types_name_credentials_and_endpoint():
    assert "no credentials found" in str(translate(NoCredentialsError(), URL, "read"))
    unreachable = translate(EndpointConnectionError(endpoint_url="http://localhost:1"), URL, "read")
    assert "cannot reach the store's endpoint" in str(unreachable)


@pytest.mark.parametrize("status, code, says", [
    (404, "NoSuchBucket", "bucket 'bucket' does not exist"),
    (404, "NoSuchKey", "no such object"),
    (403, "AccessDenied", "access denied"),
    (503, "SlowDown", "kept failing to read it after retries"),
    (416, "InvalidRange", "the object changed while it was read"),
])
def test_an_answer_read_without_botocore_is_told_apart_the_same_way(status, code, says):
    body = f"<Error><Code>{code}</Code><Message>whatever the store says</Message></Error>".encode()
    answer = urllib.error.HTTPError(URL, status, "reason", {}, io.BytesIO(body))
    assert says in str(translate(_failure(answer), URL, "read"))
