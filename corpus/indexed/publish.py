"""Pairs bound for an object store: written in a local staging folder, then uploaded in the one safe order.

Readers find pairs by their ``.idx`` (globs, blends), so: the old ``.idx`` is deleted first (no reader pairs it
with a new ``.bin``), the ``.bin`` is uploaded (multipart when large: the object appears only once complete), then
the sidecar, and the ``.idx`` last. A reader sees the old pair, no pair, or the new complete one; never half.
Uploading again after a crash repeats the same steps with the same files, so it is safe to redo.
"""

from __future__ import annotations

import logging
import os

from corpus import storage
from corpus.indexed.format import bin_path, idx_path
from corpus.indexed.sidecar import path_for

log = logging.getLogger(__name__)


def output_stage(prefix: str) -> str:
    """Where the outputs of ``prefix`` are written: ``prefix`` itself when local, else its staging prefix."""
    return storage.staging_prefix(prefix) if storage.is_remote(prefix) else prefix


def publish_pair(stage: str, prefix: str) -> None:
    """Upload the finished pair at the local ``stage`` prefix (and its sidecar, when there is one) to ``prefix``."""
    storage.delete(idx_path(prefix))
    storage.upload(bin_path(stage), str(bin_path(prefix)))
    if os.path.exists(path_for(stage)):
        storage.upload(path_for(stage), str(path_for(prefix)))
    storage.upload(idx_path(stage), str(idx_path(prefix)))
    log.info("uploaded %s (.bin, .meta.json, .idx)", prefix)


def publish_file(local: str, url: str) -> None:
    """Upload a side file (a skipped-records list) when it exists here, or remove a stale one there."""
    if os.path.exists(local):
        storage.upload(local, url)
    else:
        storage.delete(url)
