"""Where outputs bound for an object store are written first: a local folder per output prefix.

A remote output is written exactly as a local one (temporary names, checkpoints, ``--resume``) in a staging
folder on this machine, and uploaded when complete. The folder depends only on the output URL, so a run killed
with ``kill -9`` finds its partial files again when resumed on the same machine.

Location: ``$BLENDFORGE_STAGING_DIR``, else ``$XDG_CACHE_HOME/blendforge/staging`` (``~/.cache/…``): choose a
disk with room for one shard's outputs.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from corpus.core.cache import cache_folder
from corpus.storage.paths import basename


def staging_root() -> Path:
    """The folder holding every staging folder."""
    return cache_folder("staging")


def staging_prefix(url: str) -> str:
    """The local prefix where the outputs of the remote prefix ``url`` are written before upload."""
    folder = staging_root() / hashlib.sha256(url.encode()).hexdigest()[:16]
    return str(folder / basename(url))


def clear_staging(url: str) -> None:
    """Remove the staging folder of ``url`` (its outputs are uploaded, or a new run starts afresh)."""
    shutil.rmtree(Path(staging_prefix(url)).parent, ignore_errors=True)
