"""Best-fit packing of one source split (``packing: best_fit``): whole documents into samples, the rest padding.

For sequences ``[begin, end)`` of a source and samples of C = S + extra tokens:

- epochs: every document once per epoch, in a fresh order each epoch (``numpy.random.RandomState(seed)``, one
  shuffle per epoch), as many epochs as it takes to hold ``num_samples`` samples (one without a count);
- pieces: a document of at most C tokens is one piece; a longer one is cut from its start into C-token pieces,
  each a sample of its own, and its remainder is a piece like a short document;
- samples: each window of ``packing_window`` documents (in epoch order) is packed by best-fit decreasing —
  pieces by decreasing length, ties in epoch order, each into the open sample with the least free space that
  holds it, else into a new one — and its samples are closed when the window ends (free space is padding);
- shuffle index: Megatron's over the samples (the last epoch apart when it gives fewer than 80% of its samples).

NOTE: the RNG is consumed in that order: each epoch's document shuffle, then the shuffle index. Changing that
order changes every sample, and the cache key's version must change with it.

Maps: ``piece_sequence``/``piece_offset`` (int32; piece p is tokens ``[offset, offset + length)`` of that
sequence, ``length = min(C, sequence length - offset)``), ``sample_index`` (int64 [samples + 1]; sample i is
pieces ``[sample_index[i], sample_index[i + 1])``, in the order they sit in it) and ``shuffle_index``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from corpus.blending import index_maps as maps
from corpus.blending.map_cache import Entry, MapCache, cache_key
from corpus.blending.schema import BlendConfig
from corpus.blending.sources import Source

log = logging.getLogger(__name__)

PACKED_VERSION = 1


def capacity_of(config: BlendConfig) -> int:
    """Tokens per sample row: S + 1 with Megatron's extra label token, else S."""
    return config.seq_length + config.samples.extra_token


def piece_lengths(lengths: np.ndarray, piece_sequence: np.ndarray, piece_offset: np.ndarray,
                  capacity: int) -> np.ndarray:
    """The token count of every piece (int64)."""
    return np.minimum(capacity, lengths[piece_sequence].astype(np.int64) - piece_offset)


def count_pieces(lengths: np.ndarray, capacity: int) -> int:
    """Pieces the documents of ``lengths`` are cut into (an empty one: (0 - 1) // C + 1 = 0 pieces)."""
    return int(np.sum((lengths.astype(np.int64) - 1) // capacity + 1))


def pack_epoch(lengths: np.ndarray, documents: np.ndarray, capacity: int, window: int,
               pieces: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(piece_sequence, piece_offset, sample_start)`` of one epoch whose document order is ``documents``
    (``pieces``: :func:`count_pieces` of those documents)."""
    from corpus.blending.loops import pack_best_fit

    piece_sequence, piece_offset = np.empty(pieces, np.int32), np.empty(pieces, np.int32)
    sample_start = np.empty(pieces + 1, np.int64)
    samples = pack_best_fit(lengths, documents, capacity, window, piece_sequence, piece_offset, sample_start)
    return piece_sequence, piece_offset, sample_start[: samples + 1]


@dataclass(frozen=True)
class PackedMaps:
    """The maps of one packed source split and the samples each epoch gave."""

    piece_sequence: np.ndarray
    piece_offset: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray
    epoch_samples: tuple[int, ...]

    def arrays(self) -> dict[str, np.ndarray]:
        """The maps by file name, as the cache stores them."""
        return {"piece_sequence": self.piece_sequence, "piece_offset": self.piece_offset,
                "sample_index": self.sample_index, "shuffle_index": self.shuffle_index}


def epoch_plan(tokens: int, epoch_samples: tuple[int, ...], num_samples: int | None) -> maps.EpochPlan:
    """Megatron's epoch facts for packed epochs: the last one apart when it gives fewer than 80% of its samples
    to the ``num_samples`` asked."""
    before = sum(epoch_samples[:-1])
    separate = (len(epoch_samples) > 1 and num_samples is not None
                and num_samples - before < int(maps.SEPARATE_EPOCH_THRESHOLD * epoch_samples[-1]))
    return maps.EpochPlan(tokens, len(epoch_samples), separate, before)


def build_packed_maps(lengths: np.ndarray, begin: int, end: int, num_samples: int | None, capacity: int, seed: int,
                      window: int) -> PackedMaps:
    """Pack sequences ``[begin, end)`` of ``lengths`` epoch after epoch until ``num_samples`` samples are held."""
    lengths = np.asarray(lengths, dtype=np.int32)
    tokens = int(np.sum(lengths[begin:end], dtype=np.int64))
    if tokens == 0:
        raise ValueError("a split with no tokens cannot be packed")
    rng = np.random.RandomState(seed)
    pieces = count_pieces(lengths[begin:end], capacity)
    epochs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    held = 0
    while not epochs or (num_samples is not None and held < num_samples):
        documents = np.arange(begin, end, dtype=np.int32)
        rng.shuffle(documents)
        epochs.append(pack_epoch(lengths, documents, capacity, window, pieces))
        held += len(epochs[-1][2]) - 1
    epoch_samples = tuple(len(starts) - 1 for _, _, starts in epochs)
    plan = epoch_plan(tokens, epoch_samples, num_samples)
    first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else held
    shuffle = maps.shuffle_index(first, held, rng)
    if len(epochs) == 1:
        return PackedMaps(*epochs[0], shuffle, epoch_samples)
    starts = [epochs[0][2]] + [starts[1:] + number * pieces for number, (_, _, starts) in enumerate(epochs) if number]
    return PackedMaps(np.concatenate([e[0] for e in epochs]), np.concatenate([e[1] for e in epochs]),
                      np.concatenate(starts), shuffle, epoch_samples)


def min_epochs(tokens: int, num_samples: int | None, capacity: int) -> int:
    """Epochs packing needs at least (a sample holds at most ``capacity`` tokens): checked before packing."""
    return maps.num_epochs(tokens, num_samples, capacity, 0)


def packed_key(config: BlendConfig, source: Source, begin: int, end: int, num_samples: int | None) -> str:
    """The cache key of one packed source split: everything its maps depend on."""
    return cache_key({"kind": "packed", "version": PACKED_VERSION, "source": source.digest, "begin": begin,
                      "end": end, "num_samples": num_samples, "capacity": capacity_of(config), "seed": config.seed,
                      "window": config.packing_window})


def packed_entry(cache: MapCache, config: BlendConfig, source: Source, begin: int, end: int,
                 num_samples: int | None, split: str) -> Entry:
    """The packed maps of sequences ``[begin, end)`` of ``source``, loaded or built (once, under the lock)."""
    def build() -> tuple[dict[str, np.ndarray], dict]:
        log.info("packing %s documents of %s (best fit, window %d): %s samples", split, source.name,
                 config.packing_window, num_samples if num_samples is not None else "one epoch of")
        packed = build_packed_maps(source.lengths, begin, end, num_samples, capacity_of(config), config.seed,
                                   config.packing_window)
        return packed.arrays(), {"epoch_samples": list(packed.epoch_samples)}

    description = {"source": source.name, "spec": source.spec, "split": split, "sequences": [begin, end],
                   "num_samples": num_samples, "packing": "best_fit", "window": config.packing_window}
    return cache.get_or_build("packed", packed_key(config, source, begin, end, num_samples), build, description)


@dataclass(frozen=True)
class PackingStats:
    """What packing did to the samples a split takes from one source."""

    padding: float
    """Share of those samples' tokens that is padding."""
    documents_cut: int
    """Documents split across samples (each longer than a sample)."""
    short_documents_cut: int
    """Documents of at most S + 1 tokens split across samples: 0 by construction, counted from the maps."""


def packing_stats(arrays: dict[str, np.ndarray], lengths: np.ndarray, capacity: int, taken: int) -> PackingStats:
    """:class:`PackingStats` of the first ``taken`` samples (in shuffled order) of a packed source split."""
    sequence, offset, starts = arrays["piece_sequence"], arrays["piece_offset"], arrays["sample_index"]
    filled = np.add.reduceat(piece_lengths(lengths, sequence, offset, capacity), starts[:-1]) if taken else []
    used = int(np.sum(np.asarray(filled)[np.asarray(arrays["shuffle_index"][:taken], dtype=np.int64)]))
    cut = np.unique(sequence[offset > 0])
    return PackingStats(1 - used / (taken * capacity) if taken else 0.0, int(cut.size),
                        int(np.count_nonzero(lengths[cut] <= capacity)))
