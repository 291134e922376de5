"""gigatoken's batch results as two numpy arrays, without importing awkward.

gigatoken's Rust encoder ends every batch call by handing its flat ids and per-text counts, two numpy arrays, to
``awkward.unflatten``; before encoding it checks ``isinstance(inputs, awkward.Array)``. The pipeline unwraps that
awkward array into the same two arrays at once, and importing awkward costs 0.3-0.45 s of CPU in every tokenize
process (a fifth of a 60 MB run on two cores). So while the backend encodes, and only when nothing in the process
has imported awkward, the name ``awkward`` resolves to :data:`STAND_IN`: its ``unflatten`` keeps the two arrays
(:class:`FlatRows`) and its ``Array`` is a class no input is an instance of. A process that has imported awkward
keeps it, and gets real awkward arrays; :func:`flat_and_counts` takes either, so a gigatoken that builds its
results some other way costs the import again, never a wrong id.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np


class FlatRows(NamedTuple):
    """A batch result: every text's ids one after the other, and each text's count of them."""

    flat: np.ndarray
    counts: np.ndarray


class _NoAwkwardArray:
    """Stands for ``awkward.Array`` in gigatoken's input check: the pipeline passes lists, never awkward arrays."""


def _unflatten(flat: np.ndarray, counts: np.ndarray) -> FlatRows:
    """``awkward.unflatten(flat, counts)`` as gigatoken calls it, keeping the two arrays."""
    return FlatRows(flat, counts)


STAND_IN = types.ModuleType("awkward", "blendforge's stand-in for awkward while gigatoken encodes")
STAND_IN.Array = _NoAwkwardArray
STAND_IN.unflatten = _unflatten

_lock = threading.Lock()
_users = 0


@contextmanager
def without_awkward() -> Iterator[None]:
    """``awkward`` resolves to :data:`STAND_IN` inside (unless the real one is imported already).

    Counted, so encoder calls from several threads may overlap: the stand-in leaves ``sys.modules`` when the
    last one ends, and an import of awkward after that gets the real package."""
    global _users
    with _lock:
        if _users == 0 and "awkward" in sys.modules:  # the real awkward is imported: gigatoken uses it
            real = True
        else:
            real = False
            _users += 1
            sys.modules["awkward"] = STAND_IN
    try:
        yield
    finally:
        if not real:
            with _lock:
                _users -= 1
                if _users == 0 and sys.modules.get("awkward") is STAND_IN:
                    del sys.modules["awkward"]


def flat_and_counts(result: Any) -> FlatRows:
    """The flat ids (uint32) and per-text counts (int64) of a gigatoken batch result, stand-in or awkward."""
    if isinstance(result, FlatRows):
        return FlatRows(result.flat, result.counts.astype(np.int64, copy=False))
    import awkward

    return FlatRows(awkward.to_numpy(awkward.flatten(result)), awkward.to_numpy(awkward.num(result)).astype(np.int64))
