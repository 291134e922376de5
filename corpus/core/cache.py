"""blendforge's cache folders, one convention for every cache (index maps, compiled kernels, tokenizer checks,
objects fetched from a store).

``$BLENDFORGE_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/blendforge/index_maps`` (``~/.cache/…``). Index maps
live in it directly; other caches take a subfolder of it (``kernels/``, ``tokenizer_checks/``). Objects fetched from
a store live beside it (:func:`user_cache_home`), so that clearing the map cache keeps them.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_home() -> Path:
    """``$XDG_CACHE_HOME/blendforge`` (``~/.cache/blendforge`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "blendforge"


def default_cache_dir() -> Path:
    """``$BLENDFORGE_CACHE_DIR`` or ``$XDG_CACHE_HOME/blendforge/index_maps`` (``~/.cache/…``)."""
    explicit = os.environ.get("BLENDFORGE_CACHE_DIR")
    return Path(explicit) if explicit else user_cache_home() / "index_maps"
