"""What a store's failure means, told apart by the types of the exceptions the clients really raise (botocore's,
aiohttp's, the standard library's) and the S3 error codes their answers carry, never by class names: which ones are
worth another try, wherever along the exception's chain the telling part sits; a look-alike class of the same name
is not taken for a client's error; an answer read without botocore (the streaming reader's) is told apart by the same
code as one read with it; and the one line a person reads for each kind names the object and the fix."""

from __future__ import annotations

import errno
import io
import urllib.error

import aiohttp
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.parsers import ResponseParserError

from corpus.storage.errors import ObjectChanged, ObjectNotFound, StorageError, is_transient, translate
from corpus.storage.object_stream import _failure

URL = "s3://corpora/tokens/web/part-0.bin"


def _answer(code: str, status: int, message: str = "words that say nothing") -> ClientError:
    """A store's error answer as botocore raises it."""
    return ClientError({"Error": {"Code": code, "Message": message},
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
    assert "bucket 'corpora' does not exist" in str(translate(_answer("NoSuchBucket", 404), URL, "list"))
    assert isinstance(translate(_answer("NoSuchKey", 404), URL, "read"), ObjectNotFound)


def test_client_exception_types_name_credentials_and_endpoint():
    assert "no credentials found" in str(translate(NoCredentialsError(), URL, "read"))
    unreachable = translate(EndpointConnectionError(endpoint_url="http://localhost:1"), URL, "read")
    assert "cannot reach the store's endpoint" in str(unreachable)


@pytest.mark.parametrize("status, code, says", [
    (404, "NoSuchBucket", "bucket 'corpora' does not exist"),
    (404, "NoSuchKey", "no such object"),
    (403, "AccessDenied", "access denied"),
    (503, "SlowDown", "kept failing to read it after retries"),
    (416, "InvalidRange", "the object changed while it was read"),
])
def test_an_answer_read_without_botocore_is_told_apart_the_same_way(status, code, says):
    body = f"<Error><Code>{code}</Code><Message>whatever the store says</Message></Error>".encode()
    answer = urllib.error.HTTPError(URL, status, "reason", {}, io.BytesIO(body))
    assert says in str(translate(_failure(answer), URL, "read"))


def _caused(outer: Exception, cause: BaseException) -> Exception:
    """``outer`` raised ``from cause``."""
    outer.__cause__ = cause
    return outer


def _during(outer: Exception, context: BaseException) -> Exception:
    """``outer`` raised while ``context`` was handled (no ``from``)."""
    outer.__context__ = context
    return outer


@pytest.mark.parametrize("error", [
    _answer("SlowDown", 503, "Please reduce your request rate."),
    _answer("InternalError", 500),
    _answer("TooManyRequests", 429),
    ConnectionResetError(),
    aiohttp.ServerDisconnectedError(),
    ResponseParserError(),
    OSError(errno.EBUSY, "Please reduce your request rate."),  # s3fs's translation of a SlowDown
    _answer("XAmzContentSHA256Mismatch", 400, "The provided 'x-amz-content-sha256' header does not match"),
    _caused(RuntimeError("read failed"), ConnectionResetError()),
    _during(RuntimeError("read failed"), aiohttp.ClientPayloadError("payload cut")),
    OSError(errno.EREMOTEIO, "Internal Server Error"),  # s3fs's translation of a 500 to a HEAD, without its cause
    _caused(RuntimeError("get failed"), _answer("ServiceUnavailable", 503)),
], ids=lambda error: f"{type(error).__name__}:{error}"[:60])
def test_throttling_server_errors_and_dropped_connections_are_worth_another_try(error):
    assert is_transient(error)


@pytest.mark.parametrize("error", [
    ValueError("bad"),
    _answer("InvalidArgument", 400),
    _answer("NoSuchKey", 404),
    _answer("AccessDenied", 403),
    ClientError({"Error": {"Code": "Odd"}}, "GetObject"),  # an answer without its metadata
    FileNotFoundError(URL),
    PermissionError(URL),
    StorageError(f"{URL}: the store kept failing"),  # already retried
    _caused(StorageError("already retried"), ConnectionResetError()),
], ids=lambda error: f"{type(error).__name__}:{error}"[:60])
def test_what_another_try_cannot_mend_is_not_retried(error):
    assert not is_transient(error)


_NO_BUCKET = (f"{URL}: bucket 'corpora' does not exist (check the bucket name, and that AWS_ENDPOINT_URL or "
              "--storage-options '{\"endpoint_url\": …}' (storage_options in a blend) points at the store that "
              "holds it)")
_NOT_FOUND = (f"{URL}: no such object (check the path; `aws s3 ls` or the store's console lists what is there)")


@pytest.mark.parametrize("error, message", [
    (_answer("NoSuchBucket", 404, "no bucket"), _NO_BUCKET),
    (_caused(FileNotFoundError(errno.ENOENT, "The specified bucket does not exist"),  # as s3fs raises it
             _answer("NoSuchBucket", 404, "The specified bucket does not exist")), _NO_BUCKET),
    (ObjectChanged("it is 10 bytes, not 12 as listed"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (it is 10 bytes, not 12 as "
     "listed)"),
    (_answer("InvalidRange", 416, "out of range"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (An error occurred "
     "(InvalidRange) when calling the GetObject operation: out of range)"),
    (_caused(OSError(errno.EINVAL, "An error occurred (InvalidRange) when calling GetObject"),  # as s3fs raises it
             _answer("InvalidRange", 416, "The requested range is not satisfiable")),
     f"{URL}: the object changed while it was read: run again once nothing writes it ([Errno 22] An error "
     "occurred (InvalidRange) when calling GetObject)"),
    (FileNotFoundError(URL), _NOT_FOUND),
    (_answer("NoSuchKey", 404, "gone"), _NOT_FOUND),
    (_answer("404", 404, "Not Found"), _NOT_FOUND),
    (NoCredentialsError(),
     f"{URL}: no credentials found for the store (Unable to locate credentials); set AWS_ACCESS_KEY_ID and "
     "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass --storage-options '{\"anon\": true}' for a public bucket"),
    (PermissionError("nope"),
     f"{URL}: access denied while trying to read it (nope); check that the credentials in use (AWS_PROFILE, "
     "AWS_ACCESS_KEY_ID) may read this bucket"),
    (_caused(PermissionError(errno.EACCES, "403 Forbidden"), _answer("403", 403, "Forbidden")),  # as s3fs raises it
     f"{URL}: access denied while trying to read it ([Errno 13] 403 Forbidden); check that the credentials in use "
     "(AWS_PROFILE, AWS_ACCESS_KEY_ID) may read this bucket"),
    (EndpointConnectionError(endpoint_url="http://minio:9000"),
     f"{URL}: cannot reach the store's endpoint (Could not connect to the endpoint URL: \"http://minio:9000\"); "
     "check AWS_ENDPOINT_URL or --storage-options '{\"endpoint_url\": …}' (storage_options in a blend) and the "
     "network"),
    (OSError(errno.ECONNREFUSED, "Connection refused"),
     f"{URL}: cannot reach the store's endpoint ([Errno {errno.ECONNREFUSED}] Connection refused); check "
     "AWS_ENDPOINT_URL or --storage-options '{\"endpoint_url\": …}' (storage_options in a blend) and the network"),
    (ConnectionResetError(),
     f"{URL}: the store kept failing to read it after retries (ConnectionResetError); try again later, or lower "
     "the request rate (fewer --workers or shards at once)"),
    (OSError(errno.EIO, "disk trouble"), f"{URL}: cannot read it (OSError: [Errno {errno.EIO}] disk trouble)"),
    (ValueError("first line\nsecond line"), f"{URL}: cannot read it (ValueError: first line)"),
], ids=lambda value: f"{type(value).__name__}:{value}"[:50] if isinstance(value, BaseException) else "")
def test_each_failure_is_one_line_naming_the_object_and_the_fix(error, message):
    translated = translate(error, URL, "read")
    assert str(translated) == message
    assert isinstance(translated, ObjectNotFound) == (message == _NOT_FOUND)


def test_a_long_detail_is_cut_to_its_first_200_characters():
    translated = str(translate(ValueError("x" * 300), URL, "read"))
    assert translated == f"{URL}: cannot read it (ValueError: {'x' * 200})"


def test_a_storage_error_passes_through_unchanged():
    error = StorageError("s3://other/object: already said")
    assert translate(error, URL, "read") is error
