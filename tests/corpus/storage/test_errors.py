"""What a store's failure means, told apart on the exceptions the clients really raise (botocore's, aiohttp's, the
standard library's): which ones are worth another try, wherever along the exception's chain the telling part sits,
and the one line a person reads for each kind, naming the object and the fix."""

from __future__ import annotations

import errno

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.parsers import ResponseParserError

from corpus.storage.errors import ObjectNotFound, StorageError, is_transient, translate

URL = "s3://corpora/tokens/web/part-0.bin"


def _answer(code: str, status: int, message: str = "") -> ClientError:
    """A store's error answer as botocore raises it."""
    return ClientError({"Error": {"Code": code, "Message": message or code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def _named(name: str, text: str = "") -> Exception:
    """An exception of a client's class ``name`` (told apart by name: the project imports no client)."""
    return type(name, (Exception,), {})(text)


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
    _named("ServerDisconnectedError"),
    ResponseParserError(),
    OSError(errno.EBUSY, "Please reduce your request rate."),  # s3fs's translation of a SlowDown
    _answer("XAmzContentSHA256Mismatch", 400, "The provided 'x-amz-content-sha256' header does not match"),
    _caused(RuntimeError("read failed"), ConnectionResetError()),
    _during(RuntimeError("read failed"), _named("ClientPayloadError")),
    _caused(RuntimeError("list failed"), OSError("We encountered an internal error (InternalError)")),
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


_NOT_FOUND = (f"{URL}: no such object (check the path; `aws s3 ls` or the store's console lists what is there)")


@pytest.mark.parametrize("error, message", [
    (_named("NoSuchBucket", "no bucket"),
     f"{URL}: bucket 'corpora' does not exist (check the bucket name, and that AWS_ENDPOINT_URL or --storage-options "
     "'{\"endpoint_url\": …}' (storage_options in a blend) points at the store that holds it)"),
    (OSError("The specified bucket does not exist"),
     f"{URL}: bucket 'corpora' does not exist (check the bucket name, and that AWS_ENDPOINT_URL or --storage-options "
     "'{\"endpoint_url\": …}' (storage_options in a blend) points at the store that holds it)"),
    (_named("ObjectChanged", "it is 10 bytes, not 12 as listed"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (it is 10 bytes, not 12 as "
     "listed)"),
    (_named("InvalidRange", "out of range"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (out of range)"),
    (OSError("An error occurred (InvalidRange) when calling GetObject"),
     f"{URL}: the object changed while it was read: run again once nothing writes it (An error occurred "
     "(InvalidRange) when calling GetObject)"),
    (FileNotFoundError(URL), _NOT_FOUND),
    (_named("NoSuchKey", "gone"), _NOT_FOUND),
    (_answer("404", 404, "Not Found"), _NOT_FOUND),
    (NoCredentialsError(),
     f"{URL}: no credentials found for the store (Unable to locate credentials); set AWS_ACCESS_KEY_ID and "
     "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass --storage-options '{\"anon\": true}' for a public bucket"),
    (PermissionError("nope"),
     f"{URL}: access denied while trying to read it (nope); check that the credentials in use (AWS_PROFILE, "
     "AWS_ACCESS_KEY_ID) may read this bucket"),
    (OSError("403 Forbidden"),
     f"{URL}: access denied while trying to read it (403 Forbidden); check that the credentials in use "
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
