"""The sequential loops of the index maps compiled with numba: the fallback of ``corpus.blending.loops``
when no C compiler is available.

They are line-for-line ports of megatron-core 0.16.1's ``helpers.cpp`` (``build_sample_idx``,
``build_blending_indices``, ``build_exhaustive_blending_indices``): the same integer arithmetic,
the same double-precision error terms evaluated in the same order, ties to the lower index. No
``fastmath``: contracting ``w * x - c`` into an FMA would change which source wins a tie.

``nogil=True`` lets several sources build in parallel threads. ``cache=True`` keeps the machine
code on disk (``__pycache__`` next to this file, or numba's fallback user cache when that is
read-only), so only the first process ever pays the 1-3 s compile. Import this module lazily: importing numba costs ~0.2
s, which a warm cache lookup
(``corpus blend --show-samples``) never needs.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def fill_sample_index(lengths, document_index, seq_length, extra_token, out):  # pragma: no cover - compiled
    """Fill ``out`` [num_samples + 1, 2] with (document position, token offset) sample starts.

    Each sample spans ``seq_length + extra_token`` tokens; consecutive samples overlap by
    ``extra_token``. When the documents run out before the last row (only possible when the
    partial last sequence is kept), the last row points at the end of the last document.
    """
    num_samples = out.shape[0] - 1
    last_position = document_index.shape[0] - 1
    position = 0
    offset = 0
    out[0, 0] = 0
    out[0, 1] = 0
    for row in range(1, num_samples + 1):
        remaining = seq_length + extra_token
        while remaining != 0:
            document_length = lengths[document_index[position]] - offset
            remaining -= document_length
            if remaining <= 0:
                offset += remaining + document_length - extra_token
                remaining = 0
            else:
                if position == last_position:
                    offset = lengths[document_index[position]] - extra_token
                    break
                position += 1
                offset = 0
        out[row, 0] = position
        out[row, 1] = offset


@numba.njit(cache=True, nogil=True)
def fill_blending_indices(weights, dataset_index, dataset_sample_index):  # pragma: no cover - compiled
    """Megatron's greedy blend: sample i goes to ``argmax_d(w_d * max(i, 1) - count_d)``.
    Returns the number of samples taken from each dataset."""
    num_datasets = weights.shape[0]
    counts = np.zeros(num_datasets, dtype=np.int64)
    for sample in range(dataset_index.shape[0]):
        scale = max(float(sample), 1.0)
        best = 0
        best_error = weights[0] * scale - float(counts[0])
        for dataset in range(1, num_datasets):
            error = weights[dataset] * scale - float(counts[dataset])
            if error > best_error:
                best_error = error
                best = dataset
        dataset_index[sample] = best
        dataset_sample_index[sample] = counts[best]
        counts[best] += 1
    return counts


@numba.njit(cache=True, nogil=True)
def fill_exhaustive_blending_indices(sizes, dataset_index, dataset_sample_index):  # pragma: no cover - compiled
    """Megatron's exhaustive blend: exactly ``sizes[d]`` samples of each dataset, interleaved by
    the same greedy rule among the datasets not yet spent (visited in ascending order)."""
    num_datasets = sizes.shape[0]
    total = 0
    for dataset in range(num_datasets):
        total += sizes[dataset]
    weights = np.empty(num_datasets, dtype=np.float64)
    for dataset in range(num_datasets):
        weights[dataset] = sizes[dataset] / float(total)
    counts = np.zeros(num_datasets, dtype=np.int64)
    unspent = sizes > 0
    for sample in range(total):
        scale = max(float(sample), 1.0)
        best = -1
        best_error = -np.inf
        for dataset in range(num_datasets):
            if unspent[dataset]:
                error = weights[dataset] * scale - float(counts[dataset])
                if best < 0 or error > best_error:
                    best_error = error
                    best = dataset
        dataset_index[sample] = best
        dataset_sample_index[sample] = counts[best]
        counts[best] += 1
        if counts[best] == sizes[best]:
            unspent[best] = False
