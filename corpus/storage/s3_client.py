"""S3 through botocore's own client: every operation of the storage layer, without s3fs's start-up.

s3fs is built on aiobotocore and aiohttp: importing it and making its first client takes a command nearly twice as
long as botocore's client (``bench/object_storage.py`` measures both side by side), and a run from S3 pays it before
its first byte, in series with the tokenizer's build (both hold the GIL). So stat, listing, reads, byte ranges,
presigned URLs for :mod:`corpus.storage.object_stream`, uploads (in parts when large), downloads and deletes of
``s3://`` paths go through this client, made from the same storage options (s3fs's keyword arguments, mapped by
:func:`s3_client`). An option it does not know (requester pays, version-aware listings, extra request arguments)
makes :func:`s3_client` None, and s3fs does the work. A client pickles as its options (the chunk cache's arrays
carry theirs into worker processes).
Records use s3fs's key names (``name``, ``size``, ``ETag``, ``VersionId``, ``LastModified``, ``type``), so an
object's identity (:class:`corpus.storage.objects.ObjectInfo`) is the same whichever client read it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading

from corpus.core.optional import installed, missing
from corpus.storage.errors import MissingExtra, ObjectChanged, error_codes
from corpus.storage.filesystems import PACKAGES, call, options_for
from corpus.storage.paths import glob_listing, protocol_of

#: s3fs options this client honours, and those that change nothing here (caching of listings, of s3fs's files).
_HONOURED = {"anon", "key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs", "profile", "use_ssl"}
_NO_EFFECT = {"use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache", "default_block_size",
              "default_fill_cache", "default_cache_type", "cache_regions", "max_concurrency", "fixed_upload_size"}
#: Keys of a listing page.
PAGE = 1000

_clients: dict[tuple, "S3Client"] = {}
_clients_lock = threading.Lock()


def multipart_etag(parts: list[dict]) -> str:
    """The ETag S3 gives an object joined from ``parts`` (their ``ETag`` answers, in order): the md5 of the parts'
    md5s, then ``-`` and their count."""
    digests = b"".join(bytes.fromhex(part["ETag"].strip('"')) for part in parts)
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"


def _split(url: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``."""
    bucket, _, key = url.split("://", 1)[1].partition("/")
    return bucket, key


def _not_found(error: Exception) -> bool:
    """Whether a botocore error says the key is not there (a HEAD's bare 404 included)."""
    return bool(error_codes(error) & {"404", "NoSuchKey", "NotFound"})


class S3Client:
    """The operations on one store, with one botocore client per process (see the module docstring)."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self.verify = options.get("client_kwargs", {}).get("verify", os.environ.get("AWS_CA_BUNDLE") or True)
        self.proxies = "proxies" in options.get("config_kwargs", {})
        self._client = self._make_client()

    def __reduce__(self):
        """Pickled as its options: another process makes its own client (one per process and options)."""
        return _client_for, (self.options,)

    def _make_client(self):
        import botocore.session
        from botocore import UNSIGNED
        from botocore.config import Config

        options = self.options
        config = Config(**copy.deepcopy(options.get("config_kwargs", {})))  # botocore rewrites its retries
        if options.get("anon"):
            config = config.merge(Config(signature_version=UNSIGNED))
        given = {"aws_access_key_id": options.get("key"), "aws_secret_access_key": options.get("secret"),
                 "aws_session_token": options.get("token"), "endpoint_url": options.get("endpoint_url"),
                 "use_ssl": options.get("use_ssl")}
        arguments = {name: value for name, value in given.items() if value is not None}
        session = botocore.session.Session(profile=options.get("profile"))
        return session.create_client("s3", **{**arguments, **options.get("client_kwargs", {}), "config": config})

    def info(self, url: str) -> dict:
        """The record of an object, or of a key prefix (``type: directory``) that holds objects."""
        bucket, key = _split(url)
        if key and not key.endswith("/"):
            try:
                head = self._client.head_object(Bucket=bucket, Key=key)
            except Exception as error:
                if not _not_found(error):
                    raise
            else:
                return {"name": f"{bucket}/{key}", "size": head["ContentLength"], "ETag": head.get("ETag"),
                        "VersionId": head.get("VersionId"), "LastModified": head.get("LastModified"),
                        "type": "file"}
        prefix = key.rstrip("/") + "/" if key else ""
        page = self._client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)  # NoSuchBucket raises here
        if page.get("KeyCount") or not key:
            return {"name": f"{bucket}/{key}".rstrip("/"), "size": 0, "type": "directory"}
        raise FileNotFoundError(url)

    def _objects(self, bucket: str, prefix: str, delimiter: str = ""):
        """The records of the objects under ``prefix`` (only those directly in it with ``delimiter="/"``)."""
        arguments = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": PAGE, "Delimiter": delimiter}
        while True:
            page = self._client.list_objects_v2(**arguments)
            for item in page.get("Contents", []):
                if not item["Key"].endswith("/"):  # a folder's marker object, not a file
                    yield {"name": f"{bucket}/{item['Key']}", "size": item["Size"], "ETag": item.get("ETag"),
                           "LastModified": item.get("LastModified"), "type": "file"}
            if not page.get("IsTruncated"):
                return
            arguments["ContinuationToken"] = page["NextContinuationToken"]

    def find(self, url: str) -> dict[str, dict]:
        """Every object under the key prefix ``url``, at any depth, by name (``bucket/key``)."""
        bucket, key = _split(url)
        return {record["name"]: record for record in self._objects(bucket, key.rstrip("/") + "/" if key else "")}

    def ls(self, url: str) -> list[dict]:
        """The objects directly in the folder ``url``."""
        bucket, key = _split(url)
        return list(self._objects(bucket, key.rstrip("/") + "/" if key else "", delimiter="/"))

    def glob(self, pattern: str) -> dict[str, dict]:
        """The objects whose names match ``pattern`` (see :func:`corpus.storage.paths.glob_listing`)."""
        listing = glob_listing(pattern)
        bucket, key = listing.folder.partition("/")[::2]
        records = self._objects(bucket, key + "/" if key else "", delimiter="/" if listing.one_level else "")
        return {record["name"]: record for record in records if listing.matches(record["name"])}

    def read(self, url: str, start: int | None = None, end: int | None = None, size: int | None = None) -> bytes:
        """An object's bytes, or its bytes ``[start, end)``; :class:`ObjectChanged` when the object is no longer
        ``size`` bytes (as listed)."""
        bucket, key = _split(url)
        ranged = {} if start is None else {"Range": f"bytes={start}-{end - 1}"}
        answer = self._client.get_object(Bucket=bucket, Key=key, **ranged)
        total = answer.get("ContentRange", "").rpartition("/")[2]
        if size is not None and total.isdigit() and int(total) != size:
            raise ObjectChanged(f"it is {total} bytes, not {size} as listed")
        return answer["Body"].read()

    def write(self, url: str, data: bytes) -> None:
        """Put a small object (a PUT is atomic)."""
        bucket, key = _split(url)
        self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def upload(self, local: str, url: str, part_bytes: int) -> None:
        """Copy a local file to ``url``: one PUT below two parts' worth (as s3fs does: for so few parts a
        multipart upload only adds requests and the store's work of joining them), else a multipart upload of
        ``part_bytes`` parts, which the store shows only once complete (and which is aborted here when a part
        fails, leaving nothing). Each part is retried on its own (:func:`call`): retrying the whole upload would
        send every part again, and at a steady failure rate a long upload would rarely get all its parts through
        in one go."""
        bucket, key = _split(url)
        with open(local, "rb") as source:
            if os.fstat(source.fileno()).st_size < 2 * part_bytes:
                self._client.put_object(Bucket=bucket, Key=key, Body=source)
                return
            upload = self._client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            try:
                parts = []
                while data := source.read(part_bytes):
                    number = len(parts) + 1
                    sent = call("upload", url, self._client.upload_part, Bucket=bucket, Key=key, UploadId=upload,
                                PartNumber=number, Body=data)
                    parts.append({"PartNumber": number, "ETag": sent["ETag"]})
                call("upload", url, self._complete, bucket, key, upload, parts)
            except BaseException:
                try:
                    self._client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
                except Exception:  # noqa: BLE001 - the failure that stopped the upload is the one to report
                    pass
                raise

    def _complete(self, bucket: str, key: str, upload: str, parts: list[dict]) -> None:
        """Join the uploaded ``parts`` into the object. Completing is not idempotent: when the store joined them but
        its answer was lost (the connection dropped), the retry is told the upload no longer exists. The object then
        stands with the ETag these parts make (the md5 of their md5s, ``-N``), which tells that retry the work is
        done; any other object under the key (or none) leaves the error standing."""
        try:
            self._client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                                   MultipartUpload={"Parts": parts})
        except Exception as error:
            if "NoSuchUpload" not in error_codes(error) or self._etag(bucket, key) != multipart_etag(parts):
                raise

    def _etag(self, bucket: str, key: str) -> str | None:
        """The object's ETag (unquoted), or None when there is no such object."""
        try:
            return self._client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        except Exception:  # noqa: BLE001 - any failure to read it leaves the caller's error standing
            return None

    def download(self, url: str, local: str) -> None:
        """Copy the object ``url`` to the local file ``local``."""
        bucket, key = _split(url)
        body = self._client.get_object(Bucket=bucket, Key=key)["Body"]
        with open(local, "wb") as target:
            for piece in body.iter_chunks(8 << 20):
                target.write(piece)

    def delete(self, url: str, missing_ok: bool) -> None:
        """Remove an object; ``FileNotFoundError`` when there is none unless ``missing_ok`` (S3 itself answers a
        delete the same either way, so that takes a HEAD first)."""
        bucket, key = _split(url)
        if not missing_ok:
            try:
                self._client.head_object(Bucket=bucket, Key=key)
            except Exception as error:
                if _not_found(error):
                    raise FileNotFoundError(url) from None
                raise
        self._client.delete_object(Bucket=bucket, Key=key)

    def presigned(self, url: str, expires_s: int) -> str:
        """A URL that GETs the object for ``expires_s`` seconds, signed with this client's credentials."""
        bucket, key = _split(url)
        return self._client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                   ExpiresIn=expires_s)


def s3_client(url: str) -> S3Client | None:
    """The client of ``url``'s store with the options in force; None for other schemes, or options only s3fs
    knows. :class:`MissingExtra` names the extra when it is not installed."""
    protocol = protocol_of(url)
    if protocol not in ("s3", "s3a"):
        return None
    if not installed("s3fs") or missing("botocore"):
        wanted = PACKAGES[protocol][1]
        raise MissingExtra(f"{url}: {protocol}:// paths need {wanted}: pip install {wanted}")
    options = options_for(protocol)
    if set(options) - _HONOURED - _NO_EFFECT:
        return None
    return _client_for(options)


def _client_for(options: dict) -> S3Client:
    """This process's client for ``options``."""
    key = (os.getpid(), json.dumps(options, sort_keys=True, default=str))
    with _clients_lock:
        if key not in _clients:
            _clients[key] = S3Client(options)
        return _clients[key]
