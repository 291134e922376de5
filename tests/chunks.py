"""Chunked scans made to cross chunk boundaries on small test files.

The format, the checker and the statistics walk their arrays ``_CHUNK``/``DOCUMENT_CHUNK``/``TOKEN_CHUNK`` values
at a time (a million or more), and the ``.bin`` checksum tree hashes ``BLOCK_BYTES`` blocks (64 MiB): a test file
fits in one chunk, so the carry from one chunk to the next (running offsets, indices shifted by the chunk's
start, a block finished mid-write) would go untested without shrinking them.
"""

from __future__ import annotations

import sys

#: Module-level names of the chunk sizes of the scans over token files.
CHUNK_NAMES = ("_CHUNK", "DOCUMENT_CHUNK", "TOKEN_CHUNK")


def shrink_chunks(monkeypatch, values: int) -> list[str]:
    """Set every chunk size of :data:`CHUNK_NAMES` to ``values`` in each loaded ``corpus`` module that holds one
    (an imported copy included), for the rest of the test; returns ``module.name`` of each one set."""
    changed = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("corpus.") or module is None:
            continue
        for attribute in CHUNK_NAMES:
            if isinstance(getattr(module, attribute, None), int):
                monkeypatch.setattr(module, attribute, values)
                changed.append(f"{name}.{attribute}")
    return changed
