"""Operations on a path that may be local or remote: stat, list, read, write, upload, delete, open.

A local path goes straight to ``os``/``glob``/``open`` (the same calls the project made before it knew of object
stores); an ``s3://`` URL goes through the S3 client (:mod:`corpus.storage.s3_client`), any other URL, or an
``s3://`` one with options only s3fs knows, through its fsspec filesystem; every call is retried and its failure
made one line (:func:`corpus.storage.filesystems.call`). :class:`ObjectPath` lets code written against ``pathlib.Path``
(``.stat().st_size``, ``.is_file()``, ``.read_text()``) take a URL unchanged; :func:`as_path` picks the one
that fits.
"""

from __future__ import annotations

import glob as _glob
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from corpus.core.atomic_write import write_atomically
from corpus.storage.errors import ObjectNotFound
from corpus.storage.filesystems import call, filesystem
from corpus.storage.paths import basename, glob_listing, has_magic, is_remote, local_form, parent, protocol_of
from corpus.storage.s3_client import s3_client

#: Part size of multipart uploads (S3 needs >= 5 MiB; 10,000 parts of 64 MiB cover 640 GB).
UPLOAD_PART_BYTES = 64 << 20
#: Schemes whose ``put_file`` takes a part size.
_CHUNKED_UPLOADS = ("s3", "s3a", "gs", "gcs")


@dataclass(frozen=True)
class ObjectInfo:
    """What identifies one version of a file or object: a rewrite changes ``version`` (an object's ETag or
    version id; a local file's modification time and inode)."""

    path: str
    size: int
    mtime_ns: int
    version: str
    kind: str = "file"


def _url(protocol: str, fs_path: str) -> str:
    return fs_path if "://" in fs_path else f"{protocol}://{fs_path}"


def _record_info(url: str, record: dict) -> ObjectInfo:
    modified = record.get("LastModified") or record.get("mtime") or record.get("updated") or record.get("last_modified")
    mtime_ns = int(modified.timestamp() * 1e9) if hasattr(modified, "timestamp") else 0
    version = next((str(record[key]) for key in ("VersionId", "ETag", "etag", "generation", "md5Hash")
                    if record.get(key)), str(modified))
    kind = "directory" if record.get("type") == "directory" else "file"
    return ObjectInfo(url, int(record.get("size") or 0), mtime_ns, version.strip('"'), kind)


def info(path: str | os.PathLike) -> ObjectInfo:
    """Size and version of a file or object (:class:`ObjectNotFound` when there is none)."""
    text = str(path)
    if not is_remote(text):
        try:
            stat = os.stat(local_form(text))
        except FileNotFoundError:
            raise ObjectNotFound(f"{text}: no such file") from None
        kind = "directory" if os.path.isdir(local_form(text)) else "file"
        return ObjectInfo(text, stat.st_size, stat.st_mtime_ns, f"{stat.st_mtime_ns}-{stat.st_ino}", kind)
    client = s3_client(text)
    if client is not None:
        return _record_info(text, call("stat", text, client.info, text))
    fs = filesystem(text)
    return _record_info(text, call("stat", text, fs.info, fs._strip_protocol(text)))


def exists(path: str | os.PathLike) -> bool:
    """Whether a file, folder, object or prefix is there."""
    text = str(path)
    if not is_remote(text):
        return os.path.exists(local_form(text))
    try:
        info(text)
    except ObjectNotFound:
        return False
    return True


def isfile(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file or an object (not a folder or key prefix)."""
    text = str(path)
    if not is_remote(text):
        return os.path.isfile(local_form(text))
    try:
        return info(text).kind == "file"
    except ObjectNotFound:
        return False


def isdir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder, or a key prefix that holds objects."""
    text = str(path)
    if not is_remote(text):
        return os.path.isdir(local_form(text))
    try:
        return info(text.rstrip("/")).kind == "directory"
    except ObjectNotFound:
        return False


def glob(pattern: str, recursive: bool = False) -> list[str]:
    """Paths matching ``pattern`` (``glob.glob`` locally; the store's listing for a URL), unsorted."""
    if not is_remote(pattern):
        return _glob.glob(pattern, recursive=recursive)
    return [found.path for found in _matches(pattern)]


def _matches(pattern: str) -> list[ObjectInfo]:
    """The objects a remote glob matches, from the listing."""
    protocol, client = protocol_of(pattern), s3_client(pattern)
    if client is not None:
        found = call("list", pattern, client.glob, pattern)
    else:
        found = call("list", pattern, _fsspec_glob, filesystem(pattern), pattern)
    return [_record_info(_url(protocol, name), record) for name, record in found.items()
            if record.get("type") != "directory"]


def _fsspec_glob(fs, pattern: str) -> dict[str, dict]:
    """The records of the objects ``pattern`` matches, from one listing of its folder (or one recursive listing
    below it) matched here, as the S3 client's glob does.

    NOTE: not ``fs.glob``: fsspec's walk leaves out a folder whose listing failed (throttled, a dropped
    connection) instead of raising, so a glob through faults would silently match fewer objects."""
    listing = glob_listing(pattern)
    try:
        if listing.one_level:
            records = {record["name"]: record for record in fs.ls(listing.folder, detail=True)}
        else:
            records = fs.find(listing.folder, detail=True)
    except FileNotFoundError:  # no such folder: nothing matches, as for a local glob
        return {}
    return {name: record for name, record in records.items() if listing.matches(name)}


def list_objects(spec: str) -> list[ObjectInfo]:
    """The objects a remote ``spec`` names, sorted by URL, with their sizes and versions from the listing (one
    request per 1,000 objects, not one per object): a glob (``**`` spans folders), every object under a key
    prefix at any depth, or one object. :class:`ObjectNotFound` when it names nothing."""
    if has_magic(spec):
        return sorted(_matches(spec), key=lambda found: found.path)
    named = info(spec.rstrip("/"))  # one request tells an object from a key prefix
    if named.kind != "directory":
        return [named]
    protocol, client, folder = protocol_of(spec), s3_client(spec), spec.rstrip("/")
    if client is not None:
        found = call("list", spec, client.find, folder)
    else:
        fs = filesystem(spec)
        found = call("list", spec, fs.find, fs._strip_protocol(folder), detail=True)
    return sorted((_record_info(_url(protocol, name), record) for name, record in found.items()
                   if record.get("type") != "directory"), key=lambda found: found.path)


def identities(paths: list[str]) -> list[list]:
    """For each path, what changes when it is rewritten: ``[size, mtime_ns, inode]`` of a local file, ``[size,
    version]`` of an object. Objects are listed one folder at a time (one request per 1,000 objects instead of one
    per object: a blend of 100,000 shards starts in seconds)."""
    rows: dict[str, list] = {}
    remote: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        if is_remote(path):
            remote[parent(path)].append(path)
        else:
            stat = os.stat(local_form(path))
            rows[path] = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
    for folder, members in remote.items():
        protocol, client = protocol_of(folder), s3_client(folder)
        if client is not None:
            listing = call("list", folder, client.ls, folder)
        else:
            fs = filesystem(folder)
            listing = call("list", folder, fs.ls, fs._strip_protocol(folder), detail=True)
        known = {_url(protocol, record["name"]): _record_info(folder, record) for record in listing}
        for path in members:
            found = known.get(path) or info(path)
            rows[path] = [found.size, found.version]
    return [rows[path] for path in paths]


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole content of a (small) file or object."""
    text = str(path)
    if not is_remote(text):
        return Path(local_form(text)).read_bytes()
    client = s3_client(text)
    if client is not None:
        return call("read", text, client.read, text)
    fs = filesystem(text)
    return call("read", text, fs.cat_file, fs._strip_protocol(text))


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a small file (through a temporary name) or object (a PUT is atomic)."""
    text = str(path)
    if not is_remote(text):
        write_atomically(local_form(text), data)
        return
    client = s3_client(text)
    if client is not None:
        call("write", text, client.write, text, data)
        return
    fs = filesystem(text)
    call("write", text, fs.pipe_file, fs._strip_protocol(text), data)


def upload(local: str | os.PathLike, url: str) -> None:
    """Copy a local file to ``url`` in one atomic step (a multipart upload for a large one: the object appears only
    once every part is in)."""
    client = s3_client(url)
    if client is not None:
        call("upload", url, client.upload, str(local), url, UPLOAD_PART_BYTES)
        return
    fs = filesystem(url)
    options = {"chunksize": UPLOAD_PART_BYTES} if protocol_of(url) in _CHUNKED_UPLOADS else {}
    call("upload", url, fs.put_file, str(local), fs._strip_protocol(url), **options)


def download(url: str, local: str | os.PathLike) -> None:
    """Copy the object ``url`` to the local file ``local``."""
    client = s3_client(url)
    if client is not None:
        call("download", url, client.download, url, str(local))
        return
    fs = filesystem(url)
    call("download", url, fs.get_file, fs._strip_protocol(url), str(local))


def delete(path: str | os.PathLike, missing_ok: bool = True) -> None:
    """Remove a file or object."""
    text = str(path)
    if not is_remote(text):
        Path(local_form(text)).unlink(missing_ok=missing_ok)
        return
    client = s3_client(text)
    try:
        if client is not None:
            call("delete", text, client.delete, text, missing_ok)
        else:
            fs = filesystem(text)
            call("delete", text, fs.rm_file, fs._strip_protocol(text))
    except ObjectNotFound:
        if not missing_ok:
            raise


class ObjectPath:
    """The part of ``pathlib.Path`` the project uses, for a URL: ``str()``, ``name``, ``parent``, ``with_name``,
    ``stat()``, ``is_file()``, ``exists()``, ``read_text()``, ``read_bytes()``, ``write_text()``, ``unlink()``.

    NOTE: no ``__fspath__``: ``open()`` or numpy given a URL fails at once instead of looking for a local file
    named ``s3:``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"ObjectPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def name(self) -> str:
        return basename(self.url)

    @property
    def parent(self) -> "ObjectPath":
        return ObjectPath(parent(self.url))

    def with_name(self, name: str) -> "ObjectPath":
        return ObjectPath(f"{parent(self.url)}/{name}")

    def stat(self) -> SimpleNamespace:
        found = info(self.url)
        return SimpleNamespace(st_size=found.size, st_mtime_ns=found.mtime_ns)

    def is_file(self) -> bool:
        return isfile(self.url)

    def exists(self) -> bool:
        return exists(self.url)

    def read_bytes(self) -> bytes:
        return read_bytes(self.url)

    def read_text(self) -> str:
        return read_bytes(self.url).decode()

    def write_bytes(self, data: bytes) -> None:
        write_bytes(self.url, data)

    def write_text(self, text: str) -> None:
        write_bytes(self.url, text.encode())

    def unlink(self, missing_ok: bool = False) -> None:
        delete(self.url, missing_ok)


def as_path(path: str | os.PathLike) -> Path | ObjectPath:
    """``Path`` for a local path, :class:`ObjectPath` for a URL."""
    if isinstance(path, (Path, ObjectPath)):
        return path
    text = str(path)
    return ObjectPath(text) if is_remote(text) else Path(local_form(text))
