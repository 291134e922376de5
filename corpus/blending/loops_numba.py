"""The sequential loops of the index maps compiled with numba: the fallback of ``corpus.blending.loops``
when no C compiler is available.

They are line-for-line ports of megatron-core 0.16.1's ``helpers.cpp`` (``build_sample_idx``,
``build_blending_indices``, ``build_exhaustive_blending_indices``): the same integer arithmetic,
the same double-precision error terms evaluated in the same order, ties to the lower index; and the
C library's best-fit packing (``pack_best_fit``). No
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
def fill_scheduled_blending_indices(start, end, bounds, dataset_index, dataset_sample_index):  # pragma: no cover
    """A weight schedule's blend: the greedy rule in each phase against the phase's expected draws
    ``a*s + (b - a)*s*s/(2L)`` (see ``corpus.blending.schedule``), the same operations as the C library's: Megatron's
    scale in a step phase, the draws expected after this one in a ramp, sources weighted 0 throughout skipped."""
    num_phases, num_datasets = start.shape
    counts = np.zeros(num_datasets, dtype=np.int64)
    phase_counts = np.zeros(num_datasets, dtype=np.int64)
    for phase in range(num_phases):
        first, length = bounds[phase], bounds[phase + 1] - bounds[phase]
        span = 2.0 * float(length)
        phase_counts[:] = 0
        ramp = False
        for dataset in range(num_datasets):
            if start[phase, dataset] != end[phase, dataset]:
                ramp = True
        for taken in range(length):
            scale = float(taken) + 1.0 if ramp else max(float(taken), 1.0)
            best = -1
            best_error = 0.0
            for dataset in range(num_datasets):
                a, b = start[phase, dataset], end[phase, dataset]
                if a == 0.0 and b == 0.0:
                    continue
                error = a * scale + (b - a) * scale * scale / span - float(phase_counts[dataset])
                if best < 0 or error > best_error:
                    best_error = error
                    best = dataset
            dataset_index[first + taken] = best
            dataset_sample_index[first + taken] = counts[best]
            counts[best] += 1
            phase_counts[best] += 1
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


@numba.njit(cache=True, nogil=True)
def _first_open(tree, leaves, need):  # pragma: no cover - compiled
    """The smallest free space >= ``need`` whose stack of open bins is not empty (-1: none)."""
    node = leaves + need
    if tree[node]:
        return need
    while node > 1:
        if node % 2 == 0 and tree[node + 1]:
            node += 1
            while node < leaves:
                node = 2 * node if tree[2 * node] else 2 * node + 1
            return node - leaves
        node //= 2
    return -1


@numba.njit(cache=True, nogil=True)
def _mark_open(tree, leaves, space, is_open):  # pragma: no cover - compiled
    node = leaves + space
    tree[node] = is_open
    node //= 2
    while node >= 1:
        any_open = tree[2 * node] | tree[2 * node + 1]
        if tree[node] == any_open:
            break
        tree[node] = any_open
        node //= 2


@numba.njit(cache=True, nogil=True)
def _sort_decreasing(length, count, capacity, order, scratch):  # pragma: no cover - compiled
    """``order[:count]``: items by decreasing length, ties in window order (stable LSD radix sort)."""
    for i in range(count):
        order[i] = i
    shift = 0
    while (capacity >> shift) > 0:
        buckets = np.zeros(257, dtype=np.int64)
        for i in range(count):
            buckets[((capacity - length[order[i]]) >> shift & 255) + 1] += 1
        for b in range(256):
            buckets[b + 1] += buckets[b]
        for i in range(count):
            digit = (capacity - length[order[i]]) >> shift & 255
            scratch[buckets[digit]] = order[i]
            buckets[digit] += 1
        for i in range(count):
            order[i] = scratch[i]
        shift += 8


@numba.njit(cache=True, nogil=True)
def pack_best_fit(lengths, documents, capacity, window, piece_sequence, piece_offset,
                  sample_start):  # pragma: no cover - compiled
    """Best-fit decreasing over windows of ``documents`` into samples of ``capacity`` tokens: the C loop's port
    (see ``corpus.blending.packing``), a segment tree standing in for its bitmap (same answers). Fills the
    pieces (sequence, offset) sample by sample and ``sample_start`` [samples + 1]; returns the number of
    samples."""
    num_documents = documents.shape[0]
    leaves = 1
    while leaves <= capacity:
        leaves <<= 1
    if window > num_documents:
        window = num_documents if num_documents > 0 else 1
    tree = np.zeros(2 * leaves, dtype=np.uint8)
    stack_top = np.full(capacity + 1, -1, dtype=np.int64)
    item_sequence, item_offset = np.empty(window, np.int32), np.empty(window, np.int32)
    scratch = np.empty((8, window), dtype=np.int64)
    item_length, item_bin, order, sort_scratch = scratch[0], scratch[1], scratch[2], scratch[3]
    bin_below, bin_space, bin_pieces, cursor = scratch[4], scratch[5], scratch[6], scratch[7]
    pieces = 0
    samples = 0
    sample_start[0] = 0
    for first in range(0, num_documents, window):
        last = min(first + window, num_documents)
        items = 0
        for d in range(first, last):
            sequence = documents[d]
            length = np.int64(lengths[sequence])
            if length == 0:
                continue
            full = (length - 1) // capacity
            for k in range(full):
                piece_sequence[pieces] = sequence
                piece_offset[pieces] = k * capacity
                pieces += 1
                samples += 1
                sample_start[samples] = pieces
            item_sequence[items] = sequence
            item_offset[items] = full * capacity
            item_length[items] = length - full * capacity
            items += 1
        _sort_decreasing(item_length, items, capacity, order, sort_scratch)
        bins = 0
        for j in range(items):
            item = order[j]
            need = item_length[item]
            space = _first_open(tree, leaves, need)
            if space < 0:
                bin = bins
                bins += 1
                bin_pieces[bin] = 0
                space = capacity
            else:
                bin = stack_top[space]
                stack_top[space] = bin_below[bin]
                if stack_top[space] < 0:
                    _mark_open(tree, leaves, space, 0)
            item_bin[item] = bin
            bin_pieces[bin] += 1
            space -= need
            bin_space[bin] = space
            if space > 0:
                bin_below[bin] = stack_top[space]
                if stack_top[space] < 0:
                    _mark_open(tree, leaves, space, 1)
                stack_top[space] = bin
        for b in range(bins):
            if bin_space[b] > 0 and stack_top[bin_space[b]] >= 0:
                stack_top[bin_space[b]] = -1
                _mark_open(tree, leaves, bin_space[b], 0)
            cursor[b] = pieces
            pieces += bin_pieces[b]
            samples += 1
            sample_start[samples] = pieces
        for j in range(items):
            item = order[j]
            at = cursor[item_bin[item]]
            cursor[item_bin[item]] += 1
            piece_sequence[at] = item_sequence[item]
            piece_offset[at] = item_offset[item]
    return samples
