"""Index maps with megatron-core's GPTDataset / BlendedDataset semantics (0.16.1), bit for bit.

For one source split (a contiguous range of sequence ids of one low-level dataset):

- ``num_epochs``: the smallest E with ``E * T >= num_samples * S + extra`` (T tokens per epoch);
- the last epoch is shuffled separately when it supplies fewer than 80% of an epoch's samples;
- document index: the sequence ids tiled E times (int32), shuffled with
  ``numpy.random.RandomState(seed)``;
- sample index: [num_samples + 1, 2] rows of (document position, token offset), samples of
  ``S + extra`` tokens overlapping by ``extra`` (int32 unless the values need int64);
- shuffle index: a permutation of the samples (uint32 unless there are ~2**32 samples).

NOTE: the RNG is consumed in Megatron's order: document index (first E-1 epochs, then the
separate last one), then the shuffle index (first part, then the separate last part). Changing
that order changes every sample; the conformance tests catch it.

Blending: per-source sample counts ``ceil(ceil(n * w) * (1 + surplus))`` and Megatron's greedy
interleave. Only numpy is imported here; the compiled loops (``corpus.blending.loops``: a small C library,
numba without a compiler) are loaded when a map is actually built.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

#: megatron-core's ``mid_level_dataset_surplus`` default: each source builds 0.5% more samples
#: than the blend takes from it.
SURPLUS = 0.005
#: megatron-core separates the last epoch's shuffle below this share of an epoch.
SEPARATE_EPOCH_THRESHOLD = 0.80
SPLIT_NAMES = ("train", "valid", "test")


def normalize(weights: list[float]) -> list[float]:
    """Weights divided by their sum, in float64 (Megatron's ``utils.normalize``)."""
    array = np.array(weights, dtype=np.float64)
    return (array / np.sum(array)).tolist()


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """``"99,1,0"`` -> ``[(0, .99), (.99, 1.0), None]``: Megatron's parsing (any separator, missing
    shares are 0, shares normalised) and book-ends (None for a split with no share)."""
    shares = [float(x) for x in re.findall(r"[.0-9]+", split)]
    shares += [0.0] * (len(SPLIT_NAMES) - len(shares))
    shares = normalize(shares)
    ends = functools.reduce(lambda acc, share: acc + [acc[-1] + share], shares, [0])
    return [(lo, hi) if hi > lo else None for lo, hi in zip(ends[:-1], ends[1:])]


def split_range(bookend: tuple[float, float], num_sequences: int) -> tuple[int, int]:
    """The sequence ids ``[begin, end)`` of a split book-end (Python's round, half to even)."""
    return int(round(bookend[0] * float(num_sequences))), int(round(bookend[1] * float(num_sequences)))


def num_epochs(tokens_per_epoch: int, num_samples: int | None, seq_length: int, extra_token: int) -> int:
    """The smallest E >= 1 with ``E * T >= num_samples * S + extra`` (1 when num_samples is None)."""
    if num_samples is None:
        return 1
    if tokens_per_epoch <= 0:
        raise ValueError("a split with no tokens has no epochs")
    return max(1, -(-(num_samples * seq_length + extra_token) // tokens_per_epoch))


def samples_in(tokens: int, seq_length: int, extra_token: int) -> int:
    """Complete samples in a stream of ``tokens`` tokens (the last partial one dropped)."""
    return (tokens - extra_token) // seq_length


@dataclass(frozen=True)
class EpochPlan:
    """How a source split covers its requested samples."""

    tokens_per_epoch: int
    num_epochs: int
    separate_final_epoch: bool
    num_samples_sans_final_epoch: int  # meaningful only when separate_final_epoch


def plan_epochs(tokens_per_epoch: int, num_samples: int | None, seq_length: int, extra_token: int) -> EpochPlan:
    """Epoch count and whether the last epoch is shuffled on its own (Megatron's 80% rule)."""
    epochs = num_epochs(tokens_per_epoch, num_samples, seq_length, extra_token)
    if epochs == 1:
        return EpochPlan(tokens_per_epoch, 1, False, 0)
    sans_final = samples_in((epochs - 1) * tokens_per_epoch, seq_length, extra_token)
    from_final = num_samples - sans_final
    per_epoch = samples_in(tokens_per_epoch, seq_length, extra_token)
    separate = from_final < int(SEPARATE_EPOCH_THRESHOLD * per_epoch)
    return EpochPlan(tokens_per_epoch, epochs, separate, sans_final)


def document_index(sequence_ids: np.ndarray, epochs: int, rng: np.random.RandomState,
                   separate_final: bool) -> np.ndarray:
    """Sequence ids tiled ``epochs`` times and shuffled (the last epoch apart when separate)."""
    if not separate_final or epochs == 1:
        tiled = np.tile(sequence_ids.astype(np.int32, copy=False), epochs)
        rng.shuffle(tiled)
        return tiled
    first = document_index(sequence_ids, epochs - 1, rng, False)
    last = document_index(sequence_ids, 1, rng, False)
    return np.concatenate((first, last))


def sample_index(lengths: np.ndarray, doc_index: np.ndarray, seq_length: int, total_tokens: int,
                 extra_token: int) -> np.ndarray:
    """[num_samples + 1, 2] sample starts over the document index (compiled loop)."""
    from corpus.blending.loops import fill_sample_index

    num_samples = samples_in(total_tokens, seq_length, extra_token)
    largest = max(doc_index.shape[0], int(lengths.max()) if len(lengths) else 0)
    dtype = np.int32 if largest <= np.iinfo(np.int32).max else np.int64
    out = np.empty((num_samples + 1, 2), dtype=dtype)
    fill_sample_index(lengths, doc_index, seq_length, extra_token, out)
    return out


def shuffle_index(num_first: int, total: int, rng: np.random.RandomState) -> np.ndarray:
    """A permutation of ``[0, total)`` that keeps ``[0, num_first)`` and the rest apart."""
    dtype = np.uint32 if total < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(num_first, dtype=dtype)
    rng.shuffle(first)
    if num_first == total:
        return first
    last = np.arange(num_first, total, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))


def gpt_map_bytes(sequences: int, epochs: int, samples: int, largest_length: int) -> int:
    """Bytes of the maps :func:`build_gpt_maps` writes for ``sequences`` sequences read ``epochs`` times into
    ``samples`` samples (with the dtypes :func:`sample_index` and :func:`shuffle_index` pick): what the cache's disk
    must hold before they are built."""
    document = 4 * sequences * epochs
    sample_item = 4 if max(sequences * epochs, largest_length) <= np.iinfo(np.int32).max else 8
    shuffle_item = 4 if samples < np.iinfo(np.uint32).max - 1 else 8
    return document + 2 * sample_item * (samples + 1) + shuffle_item * samples


#: Bytes per blended sample of the blend maps (an int16 source and an int64 sample within it).
BLEND_BYTES_PER_SAMPLE = 2 + 8


@dataclass(frozen=True)
class GptMaps:
    """The three maps of one source split."""

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        """The maps by file name, as the cache stores them."""
        return {"document_index": self.document_index, "sample_index": self.sample_index,
                "shuffle_index": self.shuffle_index}


def build_gpt_maps(lengths: np.ndarray, begin: int, end: int, num_samples: int | None, seq_length: int, seed: int,
                   extra_token: int) -> GptMaps:
    """The maps Megatron's GPTDataset builds for sequences ``[begin, end)`` of ``lengths``."""
    sequence_ids = np.arange(begin, end, dtype=np.int32)
    tokens = int(np.sum(lengths[begin:end], dtype=np.int64))
    epochs = plan_epochs(tokens, num_samples, seq_length, extra_token)
    rng = np.random.RandomState(seed)
    doc_index = document_index(sequence_ids, epochs.num_epochs, rng, epochs.separate_final_epoch)
    lengths_in_memory = np.asarray(lengths, dtype=np.int32)
    samples = sample_index(lengths_in_memory, doc_index, seq_length, epochs.num_epochs * tokens, extra_token)
    total = samples.shape[0] - 1
    first = epochs.num_samples_sans_final_epoch if epochs.separate_final_epoch else total
    return GptMaps(doc_index, samples, shuffle_index(first, total, rng))


def blend_counts(weights: list[float], num_samples: int, surplus: float = 0.0) -> list[int]:
    """Samples per source for normalised ``weights``: ``ceil(ceil(n * w) * (1 + surplus))``."""
    return [int(math.ceil(math.ceil(num_samples * weight) * (1 + surplus))) for weight in weights]


class Blending(NamedTuple):
    """A blended split: the source of each sample [int16], its sample number within that source
    [int64], and how many samples each source gives."""

    dataset_index: np.ndarray
    dataset_sample_index: np.ndarray
    counts: np.ndarray


def blending_indices(weights: list[float], size: int) -> Blending:
    """Megatron's greedy interleave of ``size`` samples in proportion to ``weights``."""
    from corpus.blending.loops import fill_blending_indices

    dataset_index = np.zeros(size, dtype=np.int16)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    counts = fill_blending_indices(np.asarray(weights, dtype=np.float64), dataset_index, dataset_sample_index)
    return Blending(dataset_index, dataset_sample_index, counts)


def scheduled_blending_indices(start: np.ndarray, end: np.ndarray, bounds: tuple[int, ...]) -> Blending:
    """A weight schedule's blend (:mod:`corpus.blending.schedule`): phase ``p`` covers samples ``[bounds[p],
    bounds[p + 1])`` and its weights move from ``start[p]`` to ``end[p]``; Megatron's greedy rule in each phase."""
    from corpus.blending.loops import fill_scheduled_blending_indices

    dataset_index = np.zeros(bounds[-1], dtype=np.int16)
    dataset_sample_index = np.zeros(bounds[-1], dtype=np.int64)
    counts = fill_scheduled_blending_indices(np.ascontiguousarray(start, np.float64),
                                             np.ascontiguousarray(end, np.float64),
                                             np.asarray(bounds, dtype=np.int64), dataset_index, dataset_sample_index)
    return Blending(dataset_index, dataset_sample_index, counts)


def exhaustive_blending_indices(sizes: list[int]) -> Blending:
    """Exactly ``sizes[d]`` samples of each source, interleaved in proportion to the sizes."""
    from corpus.blending.loops import fill_exhaustive_blending_indices

    total = int(sum(sizes))
    dataset_index = np.zeros(total, dtype=np.int16)
    dataset_sample_index = np.zeros(total, dtype=np.int64)
    fill_exhaustive_blending_indices(np.asarray(sizes, dtype=np.int64), dataset_index, dataset_sample_index)
    return Blending(dataset_index, dataset_sample_index, np.asarray(sizes, dtype=np.int64))


def prepare_kernels() -> None:
    """Load the compiled loops in a background thread (once per process) while numpy shuffles: their
    first compile on a machine (~0.2 s, or numba's import and cache load without a C compiler) then
    overlaps the work that precedes their first use. Call it only when a map is about to be built;
    warm cache lookups never load them."""
    global _kernel_thread
    with _kernel_lock:
        if _kernel_thread is None:
            _kernel_thread = threading.Thread(target=_warm_kernels, name="kernel-warmup", daemon=True)
            _kernel_thread.start()


def _warm_kernels() -> None:
    sample_index(np.ones(4, np.int32), np.arange(4, dtype=np.int32), 2, 4, 1)
    blending_indices([0.5, 0.5], 2)
    scheduled_blending_indices(np.full((1, 2), 0.5), np.full((1, 2), 0.5), (0, 2))
    exhaustive_blending_indices([1, 1])


_kernel_lock = threading.Lock()
_kernel_thread: threading.Thread | None = None
