"""What goes wrong with an object store, said in one line that names the object and the fix.

fsspec's filesystems (s3fs, gcsfs, adlfs) raise ``FileNotFoundError``/``PermissionError`` or their client's own
exceptions (botocore's ``NoCredentialsError``, ``EndpointConnectionError``, aiohttp's connection errors); they are
told apart here by type and by the class names along the exception's chain, so nothing imports botocore.
:func:`is_transient` says which failures are worth another try (throttling, dropped connections).
"""

from __future__ import annotations

import errno
import http.client

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


#: Class names (along the exception chain) that mean: no credentials were found.
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                   "ProfileNotFound", "DefaultCredentialsError"}
#: ... that the endpoint cannot be reached.
_UNREACHABLE = {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ConnectionRefusedError",
                "ClientConnectorDNSError", "ServerTimeoutError", "gaierror"}
#: ... that a connection dropped, a read timed out mid-transfer, the server was busy or its answer came garbled
#: (a throttling answer with broken XML fails botocore's parser) (worth another try).
_DROPPED = {"ClientPayloadError", "IncompleteRead", "ServerDisconnectedError", "ConnectionResetError",
            "ReadTimeoutError", "ResponseStreamingError", "ProtocolError", "BrokenPipeError", "ShortRead",
            "ClientOSError", "TimeoutError", "FSTimeoutError", "ServerBusy", "IncompleteReadError",
            "ConnectionClosedError", "ResponseParserError"}
#: Standard-library types of a connection that dropped or stalled (subclasses included: ``http.client``'s
#: ``RemoteDisconnected``, a connection closed before any answer, is a ``ConnectionResetError``).
_DROPPED_TYPES = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, TimeoutError,
                  http.client.IncompleteRead, http.client.BadStatusLine)
#: Words of a throttling or temporary server error (S3's 503 SlowDown, 500 InternalError), or of an upload's body
#: that arrived corrupted (its checksum does not match: sending it again mends it).
_THROTTLED = ("SlowDown", "reduce your request rate", "Service Unavailable", "ServiceUnavailable", "InternalError",
              "(503)", "RequestTimeout", "XAmzContentSHA256Mismatch")


class ShortRead(Exception):
    """A ranged read returned fewer bytes than asked (a connection closed early without an error)."""


class ObjectChanged(Exception):
    """The store's answer does not fit the object as it was listed (another size, a range that is gone)."""


class ServerBusy(Exception):
    """The store answered a request with a 5xx status (throttling, a temporary failure): worth another try."""


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _names(error: BaseException) -> set[str]:
    return {type(e).__name__ for e in _chain(error)}


def _server_status(error: BaseException) -> int:
    """The HTTP status a client error carries (botocore's and aiobotocore's ``response`` record), else 0."""
    response = getattr(error, "response", None)
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") if isinstance(response, dict) else None
    return status if isinstance(status, int) else 0


def is_transient(error: BaseException) -> bool:
    """Throttling, a temporary server error or a dropped connection: the same request may well succeed.

    A :class:`StorageError` is a failure already retried (or one that retrying cannot mend): an operation made of
    retried requests (a multipart upload's parts) is not tried again as a whole because of it."""
    if isinstance(error, (FileNotFoundError, PermissionError, StorageError)):
        return False
    if _names(error) & _DROPPED or any(isinstance(e, _DROPPED_TYPES) for e in _chain(error)):
        return True
    # Any 5xx answer, or 429: botocore reports an answer it could not read (a body cut short) as a bare 500.
    if any(_server_status(e) >= 500 or _server_status(e) == 429 for e in _chain(error)):
        return True
    text = " ".join(str(e) for e in _chain(error))
    return any(word in text for word in _THROTTLED)


def _bucket(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def translate(error: BaseException, url: str, action: str) -> StorageError:
    """The :class:`StorageError` a person reads for ``error`` raised while ``action`` (``read``, ``list``…) ``url``."""
    if isinstance(error, StorageError):
        return error
    names = _names(error)
    detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    if "NoSuchBucket" in names or "bucket does not exist" in detail.lower():
        return StorageError(f"{url}: bucket '{_bucket(url)}' does not exist (check the bucket name, and that "
                            f"{ENDPOINT_HINT} points at the store that holds it)")
    if "ObjectChanged" in names or "InvalidRange" in names or "InvalidRange" in detail:
        return StorageError(f"{url}: {CHANGED} ({detail})")
    if isinstance(error, FileNotFoundError) or "NoSuchKey" in names or any(_server_status(e) == 404
                                                                           for e in _chain(error)):
        return ObjectNotFound(f"{url}: no such object (check the path; `aws s3 ls` or the store's console lists "
                              "what is there)")
    if names & _NO_CREDENTIALS:
        return StorageError(f"{url}: no credentials found for the store ({detail}); set AWS_ACCESS_KEY_ID and "
                            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass --storage-options '{\"anon\": true}' "
                            "for a public bucket")
    if isinstance(error, PermissionError) or "AccessDenied" in detail or "Forbidden" in detail:
        return StorageError(f"{url}: access denied while trying to {action} it ({detail}); check that the "
                            f"credentials in use (AWS_PROFILE, AWS_ACCESS_KEY_ID) may {action} this bucket")
    if names & _UNREACHABLE or (isinstance(error, OSError) and error.errno in (errno.ECONNREFUSED,
                                                                                errno.EHOSTUNREACH)):
        return StorageError(f"{url}: cannot reach the store's endpoint ({detail}); check {ENDPOINT_HINT} and the "
                            "network")
    if is_transient(error):
        return StorageError(f"{url}: the store kept failing to {action} it after retries ({detail}); try again "
                            "later, or lower the request rate (fewer --workers or shards at once)")
    return StorageError(f"{url}: cannot {action} it ({type(error).__name__}: {detail})")
