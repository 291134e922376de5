"""blendforge's cache folder, one convention for every cache (index maps, compiled kernels, tokenizer checks).

``$BLENDFORGE_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/blendforge/index_maps`` (``~/.cache/…``). Index maps
live in it directly; other caches take a subfolder of it (``kernels/``, ``tokenizer_checks/``).
"""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$BLENDFORGE_CACHE_DIR`` or ``$XDG_CACHE_HOME/blendforge/index_maps`` (``~/.cache/…``)."""
    explicit = os.environ.get("BLENDFORGE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "blendforge" / "index_maps"
