"""What goes wrong with an object store, said in one line that names the object and the fix.

fsspec's filesystems (s3fs, gcsfs, adlfs) raise ``FileNotFoundError``/``PermissionError`` or their client's own
exceptions (botocore's ``NoCredentialsError``, ``EndpointConnectionError``, aiohttp's connection errors); they are
told apart here by their types and by the S3 error codes their answers carry, along the exception's chain; nothing
here imports botocore.
:func:`is_transient` says which failures are worth another try (throttling, dropped connections).
"""

from __future__ import annotations

import errno
import http.client
import sys

from corpus.core.errors import UserError

#: What an answer that does not fit the object as listed means, and what to do.
CHANGED = "the object changed while it was read: run again once nothing writes it"
ENDPOINT_HINT = "AWS_ENDPOINT_URL or --storage-options '{\"endpoint_url\": …}' (storage_options in a blend)"


class StorageError(UserError):
    """An object store refused or failed an operation; the message names the object and what to do."""


class ObjectNotFound(StorageError, FileNotFoundError):
    """No object (or prefix) under that URL; a ``FileNotFoundError`` so callers that treat absence as an answer
    (a missing sidecar) keep doing so."""


class MissingExtra(StorageError):
    """The fsspec package for a URL's scheme is not installed."""


#: Client exception types, named by the module that defines them (``builtins`` for Python's own). They are looked up
#: only among modules already imported: an exception of a client that was never imported cannot occur, so telling
#: failures apart imports no client. Matched by exact type, not subclass: aiohttp's ``ClientConnectorError`` (the
#: endpoint is unreachable) is a ``ClientOSError`` (a dropped connection).
ClientTypes = dict[str, tuple[str, ...]]
#: No credentials were found.
_NO_CREDENTIALS: ClientTypes = {
    "botocore.exceptions": ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                            "ProfileNotFound"),
    "google.auth.exceptions": ("DefaultCredentialsError",),
}
#: The endpoint cannot be reached.
_UNREACHABLE: ClientTypes = {
    "botocore.exceptions": ("EndpointConnectionError", "ConnectTimeoutError"),
    "urllib3.exceptions": ("ConnectTimeoutError",),
    "aiohttp": ("ClientConnectorError", "ClientConnectorDNSError", "ServerTimeoutError"),
    "builtins": ("ConnectionRefusedError",),
    "socket": ("gaierror",),
}
#: A connection dropped, a read timed out mid-transfer, the server was busy or its answer came garbled (a throttling
#: answer with broken XML fails botocore's parser): worth another try.
_DROPPED: ClientTypes = {
    "botocore.exceptions": ("ReadTimeoutError", "ResponseStreamingError", "IncompleteReadError",
                            "ConnectionClosedError"),
    "botocore.parsers": ("ResponseParserError",),
    "urllib3.exceptions": ("IncompleteRead", "ProtocolError", "ReadTimeoutError"),
    "aiohttp": ("ClientPayloadError", "ServerDisconnectedError", "ClientOSError"),
    "fsspec.exceptions": ("FSTimeoutError",),
    "asyncio": ("IncompleteReadError",),
}
#: Standard-library types of a connection that dropped or stalled, subclasses included (``http.client``'s
#: ``RemoteDisconnected``, a connection closed before any answer, is a ``ConnectionResetError``).
_DROPPED_TYPES = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, TimeoutError,
                  http.client.IncompleteRead, http.client.BadStatusLine)
#: The ``errno`` s3fs gives the ``OSError`` it raises for a throttling or temporary answer (``EBUSY``: 503, SlowDown,
#: ServiceUnavailable; ``EREMOTEIO``: 500), where its HEAD requests leave the answer out of the exception's chain.
_BUSY_ERRNOS = {errno.EBUSY, errno.EREMOTEIO}
#: S3 error codes of throttling or a temporary failure (a 503 SlowDown, a 500 InternalError, a 400 RequestTimeout), or
#: of an upload's body that arrived corrupted (its checksum does not match: sending it again mends it).
_THROTTLED = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException",
              "XAmzContentSHA256Mismatch"}


class Transient(Exception):
    """A request failed in a way the same request may mend. Internal to this package: retried, and what outlives
    the retries becomes a :class:`StorageError`."""


class ShortRead(Transient):
    """A ranged read returned fewer bytes than asked (a connection closed early without an error)."""


class ServerBusy(Transient):
    """The store answered a request with a 5xx status (throttling, a temporary failure)."""


class ObjectChanged(Exception):
    """The store's answer does not fit the object as it was listed (another size, a range that is gone). Internal to
    this package: :func:`translate` says what it means and what to do."""


def store_answer(failure: Exception, code: str, status: int) -> Exception:
    """``failure`` carrying a store's error answer in botocore's shape (``response``), so that an answer read
    without botocore is told apart by the same code and status as one read with it."""
    failure.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return failure


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _types(table: ClientTypes) -> set[type]:
    """The classes of ``table`` whose modules are imported."""
    found = set()
    for module_name, names in table.items():
        module = sys.modules.get(module_name)
        found.update(getattr(module, name) for name in names if isinstance(getattr(module, name, None), type))
    return found


def _any_of(error: BaseException, table: ClientTypes) -> bool:
    """Whether an exception along ``error``'s chain is exactly one of ``table``'s types."""
    types = _types(table)
    return any(type(e) in types for e in _chain(error))


def _response(error: BaseException) -> dict:
    response = getattr(error, "response", None)
    return response if isinstance(response, dict) else {}


def _server_status(error: BaseException) -> int:
    """The HTTP status a client error carries (botocore's and aiobotocore's ``response`` record), else 0."""
    status = _response(error).get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else 0


def error_codes(error: BaseException) -> set[str]:
    """The S3 error codes (``NoSuchKey``, ``SlowDown``…) the answers along ``error``'s chain carry."""
    return {code for e in _chain(error) if isinstance(code := _response(e).get("Error", {}).get("Code"), str)}


def is_transient(error: BaseException) -> bool:
    """Throttling, a temporary server error or a dropped connection: the same request may well succeed.

    A :class:`StorageError` is a failure already retried (or one that retrying cannot mend): an operation made of
    retried requests (a multipart upload's parts) is not tried again as a whole because of it."""
    if isinstance(error, (FileNotFoundError, PermissionError, StorageError)):
        return False
    chain = _chain(error)
    if any(isinstance(e, (Transient, *_DROPPED_TYPES)) for e in chain) or _any_of(error, _DROPPED):
        return True
    if any(type(e) is OSError and e.errno in _BUSY_ERRNOS for e in chain):
        return True
    # Any 5xx answer, or 429: botocore reports an answer it could not read (a body cut short) as a bare 500.
    return (any(_server_status(e) >= 500 or _server_status(e) == 429 for e in chain)
            or bool(error_codes(error) & _THROTTLED))


def _bucket(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def translate(error: BaseException, url: str, action: str) -> StorageError:
    """The :class:`StorageError` a person reads for ``error`` raised while ``action`` (``read``, ``list``…) ``url``."""
    if isinstance(error, StorageError):
        return error
    codes = error_codes(error)
    detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    if "NoSuchBucket" in codes:
        return StorageError(f"{url}: bucket '{_bucket(url)}' does not exist (check the bucket name, and that "
                            f"{ENDPOINT_HINT} points at the store that holds it)")
    if "NoSuchUpload" in codes:  # a 404, but of the upload, not of the object
        return StorageError(f"{url}: the store no longer knows the multipart upload under way (aborted meanwhile, "
                            "by a bucket lifecycle rule or another client?); run the command again")
    if any(isinstance(e, ObjectChanged) for e in _chain(error)) or "InvalidRange" in codes:
        return StorageError(f"{url}: {CHANGED} ({detail})")
    if isinstance(error, FileNotFoundError) or "NoSuchKey" in codes or any(_server_status(e) == 404
                                                                           for e in _chain(error)):
        return ObjectNotFound(f"{url}: no such object (check the path; `aws s3 ls` or the store's console lists "
                              "what is there)")
    if _any_of(error, _NO_CREDENTIALS):
        return StorageError(f"{url}: no credentials found for the store ({detail}); set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass --storage-options '{\"anon\": true}' "
                            "for a public bucket")
    if isinstance(error, PermissionError) or "AccessDenied" in codes or any(_server_status(e) == 403
                                                                            for e in _chain(error)):
        return StorageError(f"{url}: access denied while trying to {action} it ({detail}); check that the "
                            f"credentials in use (AWS_PROFILE, AWS_ACCESS_KEY_ID) may {action} this bucket")
    if _any_of(error, _UNREACHABLE) or (isinstance(error, OSError) and error.errno in (errno.ECONNREFUSED,
                                                                                       errno.EHOSTUNREACH)):
        return StorageError(f"{url}: cannot reach the store's endpoint ({detail}); check {ENDPOINT_HINT} and the "
                            "network")
    if is_transient(error):
        return StorageError(f"{url}: the store kept failing to {action} it after retries ({detail}); try again "
                            "later, or lower the request rate (fewer --workers or shards at once)")
    return StorageError(f"{url}: cannot {action} it ({type(error).__name__}: {detail})")
