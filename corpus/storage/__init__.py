"""One storage layer for every path a user gives: local files, and object stores (``s3://`` with the ``blendforge[s3]``
extra; ``gs://``, ``az://`` and the rest when their fsspec package is installed).

A local path keeps its plain code path (``open``, ``os.stat``, ``np.memmap``); only a URL goes through a client.
Modules: ``paths`` (is it remote, joining; no I/O), ``errors`` (one-line :class:`StorageError` naming the object and
the fix), ``filesystems`` (the storage options, the fsspec filesystem of a URL, retries), ``s3_client`` (S3 through
botocore's own client, which starts in a fraction of s3fs's time), ``objects`` (stat, list, read, write, upload of
local-or-remote paths; :class:`ObjectPath`, the ``pathlib`` look-alike of a URL), ``object_stream`` (one object read
in order through one streaming GET), ``remote_file`` (a seekable reader: that stream, or blocks read ahead),
``object_cache`` (node-local copies and chunks of remote objects, shared by the processes of a node, bounded),
``chunked`` (a remote ``.bin`` as a token array over that cache) and ``staging`` (outputs written locally, then
uploaded).
"""

from corpus.storage.chunked import ChunkedArray, map_array
from corpus.storage.errors import MissingExtra, ObjectNotFound, StorageError
from corpus.storage.filesystems import configure, current_options, parse_options, storage_options_knob
from corpus.storage.object_cache import local_file
from corpus.storage.objects import (
    ObjectInfo,
    ObjectPath,
    as_path,
    delete,
    download,
    exists,
    glob,
    identities,
    info,
    isdir,
    isfile,
    list_objects,
    read_bytes,
    upload,
    write_bytes,
)
from corpus.storage.paths import absolute, basename, escape, has_magic, is_remote, join, parent
from corpus.storage.remote_file import open_binary
from corpus.storage.staging import clear_staging, staging_prefix

__all__ = [
    "ChunkedArray", "MissingExtra", "ObjectInfo", "ObjectNotFound", "ObjectPath", "StorageError", "absolute",
    "as_path", "basename", "clear_staging", "configure", "current_options", "delete", "download", "escape",
    "exists", "glob", "has_magic", "identities", "info", "is_remote", "isdir", "isfile", "join", "list_objects",
    "local_file", "map_array", "open_binary", "parent", "parse_options", "read_bytes", "staging_prefix",
    "storage_options_knob", "upload", "write_bytes",
]
