"""blendforge's cache folders: one table, one folder per kind of content, each named for what it holds.

Every cache lives in ``$XDG_CACHE_HOME/blendforge/<name>`` (``~/.cache/blendforge/<name>``) unless its own
variable names another folder, so that clearing one (or putting one on a shared file system) never touches another:

- ``index_maps`` (``$BLENDFORGE_CACHE_DIR``; a blend's ``cache_dir:`` overrides both): content-addressed index maps;
- ``compiled_kernels`` (``$BLENDFORGE_KERNEL_CACHE_DIR``): the index-map loops compiled for this machine;
- ``tokenizer_checks`` (``$BLENDFORGE_TOKENIZER_CHECKS_DIR``): verdicts of the tokenizer fast-path check;
- ``objects`` (``$BLENDFORGE_OBJECT_CACHE_DIR``): remote objects fetched to this node;
- ``staging`` (``$BLENDFORGE_STAGING_DIR``): outputs bound for an object store, before their upload.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Each cache folder's name and the environment variable that puts it elsewhere.
CACHE_FOLDERS: dict[str, str] = {
    "index_maps": "BLENDFORGE_CACHE_DIR",
    "compiled_kernels": "BLENDFORGE_KERNEL_CACHE_DIR",
    "tokenizer_checks": "BLENDFORGE_TOKENIZER_CHECKS_DIR",
    "objects": "BLENDFORGE_OBJECT_CACHE_DIR",
    "staging": "BLENDFORGE_STAGING_DIR",
}


def user_cache_home() -> Path:
    """``$XDG_CACHE_HOME/blendforge`` (``~/.cache/blendforge`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "blendforge"


def cache_folder(name: str) -> Path:
    """The folder of the cache ``name`` (a key of :data:`CACHE_FOLDERS`): its variable's value when set, else
    ``name`` in :func:`user_cache_home`. Not created here: a cache that is never written leaves no folder."""
    explicit = os.environ.get(CACHE_FOLDERS[name])
    return Path(explicit) if explicit else user_cache_home() / name


def default_cache_dir() -> Path:
    """Where index maps are cached unless a blend names its ``cache_dir``."""
    return cache_folder("index_maps")
