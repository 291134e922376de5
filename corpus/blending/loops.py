"""The sequential loops of the index maps, as a small C library compiled once per machine.

Line-for-line ports of megatron-core 0.16.1's ``helpers.cpp`` (``build_sample_idx``,
``build_blending_indices``, ``build_exhaustive_blending_indices``): the same integer arithmetic and
double-precision error terms evaluated in the same order, ties to the lower index; and best-fit
packing (``pack_best_fit``, ours: ``packing: best_fit``). Compiled with
``-ffp-contract=off`` so ``w * x - c`` never becomes an FMA (that would change which source wins a tie).

Why C and not numba alone: numba costs ~0.2–0.4 s to import and ~0.3–0.45 s at the first call of a
cached kernel in every new process, more than a cold 1,000-shard build itself. Importing this module compiles
and loads nothing: the loops are looked up on first use (:func:`kernels`), which happens where a map is first
built (``corpus.blending.index_maps.prepare_kernels``). The first use on a machine builds the library with the
system C compiler (``$CC``, else ``cc``; ~0.2 s, one log line) into the ``compiled_kernels`` cache folder
(:mod:`corpus.core.cache`), under a name that hashes the source, the compiler and its flags, written atomically so
concurrent processes never load a half-written file; later uses load it. ctypes releases the GIL during the calls,
so sources still build in parallel threads. Without a working compiler the numba versions (``loops_numba``) are
used and one line says so.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from corpus.core.atomic_write import atomic_path
from corpus.core.cache import cache_folder

log = logging.getLogger(__name__)

_C_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <math.h>

#define FILL_SAMPLE_INDEX(NAME, OUT_T)                                                              \
void NAME(const int32_t *lengths, const int32_t *doc_index, int64_t doc_index_size,                \
          int64_t seq_length, int64_t extra_token, OUT_T *out, int64_t num_samples) {               \
    int64_t last_position = doc_index_size - 1, position = 0, offset = 0;                           \
    out[0] = 0; out[1] = 0;                                                                         \
    for (int64_t row = 1; row <= num_samples; ++row) {                                              \
        int64_t remaining = seq_length + extra_token;                                               \
        while (remaining != 0) {                                                                    \
            int64_t document_length = (int64_t)lengths[doc_index[position]] - offset;               \
            remaining -= document_length;                                                           \
            if (remaining <= 0) {                                                                   \
                offset += remaining + document_length - extra_token;                                \
                remaining = 0;                                                                      \
            } else {                                                                                \
                if (position == last_position) {                                                    \
                    offset = (int64_t)lengths[doc_index[position]] - extra_token;                   \
                    break;                                                                          \
                }                                                                                   \
                position += 1;                                                                      \
                offset = 0;                                                                         \
            }                                                                                       \
        }                                                                                           \
        out[2 * row] = (OUT_T)position;                                                             \
        out[2 * row + 1] = (OUT_T)offset;                                                           \
    }                                                                                               \
}

FILL_SAMPLE_INDEX(fill_sample_index_i32, int32_t)
FILL_SAMPLE_INDEX(fill_sample_index_i64, int64_t)

void fill_blending_indices(const double *weights, int64_t num_datasets, int16_t *dataset_index,
                           int64_t *dataset_sample_index, int64_t size, int64_t *counts) {
    for (int64_t d = 0; d < num_datasets; ++d) counts[d] = 0;
    for (int64_t sample = 0; sample < size; ++sample) {
        double scale = (double)sample > 1.0 ? (double)sample : 1.0;
        int64_t best = 0;
        double best_error = weights[0] * scale - (double)counts[0];
        for (int64_t d = 1; d < num_datasets; ++d) {
            double error = weights[d] * scale - (double)counts[d];
            if (error > best_error) { best_error = error; best = d; }
        }
        dataset_index[sample] = (int16_t)best;
        dataset_sample_index[sample] = counts[best];
        counts[best] += 1;
    }
}

/* A weight schedule's blend (corpus/blending/schedule.py): in each phase, the greedy rule against the phase's
   expected draws C_d(s) = a_d*s + (b_d - a_d)*s*s/(2L), counts restarting per phase. A step phase (a == b) takes
   Megatron's scale max(taken, 1), so its error is Megatron's bit for bit; a ramp takes the draws expected once this
   one is made (taken + 1), so a source ramping up from 0 is not drawn before its time. A source weighted 0 at both
   ends of a phase is never drawn in it. */
void fill_scheduled_blending_indices(const double *start, const double *end, const int64_t *bounds,
                                     int64_t num_phases, int64_t num_datasets, int16_t *dataset_index,
                                     int64_t *dataset_sample_index, int64_t *counts, int64_t *phase_counts) {
    for (int64_t d = 0; d < num_datasets; ++d) counts[d] = 0;
    for (int64_t p = 0; p < num_phases; ++p) {
        const double *a = start + p * num_datasets, *b = end + p * num_datasets;
        int64_t first = bounds[p], length = bounds[p + 1] - bounds[p];
        double span = 2.0 * (double)length;
        int ramp = 0;
        for (int64_t d = 0; d < num_datasets; ++d) {
            phase_counts[d] = 0;
            if (a[d] != b[d]) ramp = 1;
        }
        for (int64_t taken = 0; taken < length; ++taken) {
            double scale = ramp ? (double)taken + 1.0 : ((double)taken > 1.0 ? (double)taken : 1.0);
            int64_t best = -1;
            double best_error = 0.0;
            for (int64_t d = 0; d < num_datasets; ++d) {
                if (a[d] == 0.0 && b[d] == 0.0) continue;
                double error = a[d] * scale + (b[d] - a[d]) * scale * scale / span - (double)phase_counts[d];
                if (best < 0 || error > best_error) { best_error = error; best = d; }
            }
            dataset_index[first + taken] = (int16_t)best;
            dataset_sample_index[first + taken] = counts[best];
            counts[best] += 1;
            phase_counts[best] += 1;
        }
    }
}

int fill_exhaustive_blending_indices(const int64_t *sizes, int64_t num_datasets, int16_t *dataset_index,
                                     int64_t *dataset_sample_index) {
    double *weights = malloc(sizeof(double) * num_datasets);
    int64_t *counts = calloc(num_datasets, sizeof(int64_t));
    if (!weights || !counts) { free(weights); free(counts); return -1; }
    int64_t total = 0;
    for (int64_t d = 0; d < num_datasets; ++d) total += sizes[d];
    for (int64_t d = 0; d < num_datasets; ++d) weights[d] = (double)sizes[d] / (double)total;
    for (int64_t sample = 0; sample < total; ++sample) {
        double scale = (double)sample > 1.0 ? (double)sample : 1.0;
        int64_t best = -1;
        double best_error = -INFINITY;
        for (int64_t d = 0; d < num_datasets; ++d) {
            if (counts[d] < sizes[d]) {
                double error = weights[d] * scale - (double)counts[d];
                if (best < 0 || error > best_error) { best_error = error; best = d; }
            }
        }
        dataset_index[sample] = (int16_t)best;
        dataset_sample_index[sample] = counts[best];
        counts[best] += 1;
    }
    free(weights);
    free(counts);
    return 0;
}

/* Best-fit decreasing packing (see corpus/blending/packing.py). Open bins are kept in one LIFO stack per free
   space; a two-level bitmap over free spaces (a bit per space: that stack is not empty) finds the smallest free
   space that fits a piece with a few bit scans (loops_numba walks a segment tree to the same answer). */
static int64_t first_open(const uint64_t *bits, const uint64_t *summary, int64_t groups, int64_t need) {
    int64_t word = need >> 6;
    uint64_t here = bits[word] & (~0ULL << (need & 63));
    if (here) return (word << 6) | __builtin_ctzll(here);
    int64_t next = word + 1, group = next >> 6;
    if (group >= groups) return -1;
    uint64_t above = summary[group] & (~0ULL << (next & 63));
    while (!above) {
        if (++group >= groups) return -1;
        above = summary[group];
    }
    word = (group << 6) | __builtin_ctzll(above);
    return (word << 6) | __builtin_ctzll(bits[word]);
}

static void mark_open(uint64_t *bits, uint64_t *summary, int64_t space, int open) {
    int64_t word = space >> 6;
    if (open) {
        bits[word] |= 1ULL << (space & 63);
        summary[word >> 6] |= 1ULL << (word & 63);
    } else {
        bits[word] &= ~(1ULL << (space & 63));
        if (!bits[word]) summary[word >> 6] &= ~(1ULL << (word & 63));
    }
}

/* order[] = items by decreasing length, ties in window order (a stable LSD radix sort on capacity - length). */
static void sort_decreasing(const int64_t *length, int64_t count, int64_t capacity, int64_t *order,
                            int64_t *scratch) {
    for (int64_t i = 0; i < count; ++i) order[i] = i;
    for (int64_t shift = 0; (capacity >> shift) > 0; shift += 8) {
        int64_t buckets[257] = {0};
        for (int64_t i = 0; i < count; ++i) buckets[((capacity - length[order[i]]) >> shift & 255) + 1] += 1;
        for (int64_t b = 0; b < 256; ++b) buckets[b + 1] += buckets[b];
        for (int64_t i = 0; i < count; ++i) scratch[buckets[(capacity - length[order[i]]) >> shift & 255]++] = order[i];
        for (int64_t i = 0; i < count; ++i) order[i] = scratch[i];
    }
}

int64_t pack_best_fit(const int32_t *lengths, const int32_t *documents, int64_t num_documents, int64_t capacity,
                      int64_t window, int32_t *piece_sequence, int32_t *piece_offset, int64_t *sample_start) {
    int64_t words = (capacity >> 6) + 1, groups = (words >> 6) + 1;
    if (window > num_documents) window = num_documents > 0 ? num_documents : 1;
    uint64_t *bits = calloc(words + groups, sizeof(uint64_t)), *summary = bits + words;
    int64_t *stack_top = malloc(sizeof(int64_t) * (capacity + 1));
    int64_t *scratch = malloc(sizeof(int64_t) * 8 * window);
    int32_t *item_sequence = malloc(sizeof(int32_t) * window), *item_offset = malloc(sizeof(int32_t) * window);
    if (!bits || !stack_top || !scratch || !item_sequence || !item_offset) {
        free(bits); free(stack_top); free(scratch); free(item_sequence); free(item_offset);
        return -1;
    }
    int64_t *item_length = scratch, *item_bin = scratch + window, *order = scratch + 2 * window;
    int64_t *sort_scratch = scratch + 3 * window, *bin_below = scratch + 4 * window;
    int64_t *bin_space = scratch + 5 * window, *bin_pieces = scratch + 6 * window, *cursor = scratch + 7 * window;
    for (int64_t s = 0; s <= capacity; ++s) stack_top[s] = -1;
    int64_t pieces = 0, samples = 0;
    sample_start[0] = 0;
    for (int64_t first = 0; first < num_documents; first += window) {
        int64_t last = first + window < num_documents ? first + window : num_documents, items = 0;
        for (int64_t d = first; d < last; ++d) {
            int32_t sequence = documents[d];
            int64_t length = lengths[sequence];
            if (length == 0) continue;
            int64_t full = (length - 1) / capacity;
            for (int64_t k = 0; k < full; ++k) {
                piece_sequence[pieces] = sequence;
                piece_offset[pieces] = (int32_t)(k * capacity);
                sample_start[++samples] = ++pieces;
            }
            item_sequence[items] = sequence;
            item_offset[items] = (int32_t)(full * capacity);
            item_length[items++] = length - full * capacity;
        }
        sort_decreasing(item_length, items, capacity, order, sort_scratch);
        int64_t bins = 0;
        for (int64_t j = 0; j < items; ++j) {
            int64_t item = order[j], need = item_length[item], bin;
            int64_t space = first_open(bits, summary, groups, need);
            if (space < 0) {
                bin = bins++;
                bin_pieces[bin] = 0;
                space = capacity;
            } else {
                bin = stack_top[space];
                stack_top[space] = bin_below[bin];
                if (stack_top[space] < 0) mark_open(bits, summary, space, 0);
            }
            item_bin[item] = bin;
            bin_pieces[bin] += 1;
            space -= need;
            bin_space[bin] = space;
            if (space > 0) {
                bin_below[bin] = stack_top[space];
                if (stack_top[space] < 0) mark_open(bits, summary, space, 1);
                stack_top[space] = bin;
            }
        }
        for (int64_t b = 0; b < bins; ++b) {
            if (bin_space[b] > 0 && stack_top[bin_space[b]] >= 0) {
                stack_top[bin_space[b]] = -1;
                mark_open(bits, summary, bin_space[b], 0);
            }
            cursor[b] = pieces;
            pieces += bin_pieces[b];
            sample_start[++samples] = pieces;
        }
        for (int64_t j = 0; j < items; ++j) {
            int64_t item = order[j], at = cursor[item_bin[item]]++;
            piece_sequence[at] = item_sequence[item];
            piece_offset[at] = item_offset[item];
        }
    }
    free(bits); free(stack_top); free(scratch); free(item_sequence); free(item_offset);
    return samples;
}
"""

_P = ctypes.c_void_p
_I64 = ctypes.c_int64


#: How the library is compiled (``-ffp-contract=off``: see the module's docstring).
COMPILE_FLAGS = ("-O2", "-std=c99", "-ffp-contract=off", "-shared", "-fPIC")


def _compiler() -> str:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler (cc/gcc) on PATH")
    return compiler


def library_name(source: str, compiler: str, flags: tuple[str, ...]) -> str:
    """The cached library's file name: a digest of everything that changes the machine code (the source, the
    compiler and its flags), so a changed kernel or flag never loads a library built from the old one."""
    digest = hashlib.sha256("\0".join((source, compiler, *flags)).encode()).hexdigest()[:16]
    return f"index-kernels-{digest}.so"


def library_path() -> Path:
    """Where the compiled library of this source, compiler and flags lives (an edit of any of them builds anew)."""
    return cache_folder("compiled_kernels") / library_name(_C_SOURCE, _compiler(), COMPILE_FLAGS)


def _compile(target: Path, compiler: str) -> None:
    """Build the library into ``target`` atomically, and say so in one line."""
    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch, atomic_path(target) as built:
        source = Path(scratch) / "kernels.c"
        source.write_text(_C_SOURCE)
        subprocess.run([compiler, *COMPILE_FLAGS, "-o", str(built), str(source), "-lm"], check=True,
                       capture_output=True, timeout=120)
    log.info("index-map loops: compiled with %s into %s in %.1f s (once per machine)", compiler, target,
             time.perf_counter() - started)


def _load_c() -> ctypes.CDLL:
    target = library_path()
    if not target.exists():
        _compile(target, _compiler())
    library = ctypes.CDLL(str(target))
    for name in ("fill_sample_index_i32", "fill_sample_index_i64"):
        getattr(library, name).argtypes = [_P, _P, _I64, _I64, _I64, _P, _I64]
        getattr(library, name).restype = None
    library.fill_blending_indices.argtypes = [_P, _I64, _P, _P, _I64, _P]
    library.fill_blending_indices.restype = None
    library.fill_scheduled_blending_indices.argtypes = [_P, _P, _P, _I64, _I64, _P, _P, _P, _P]
    library.fill_scheduled_blending_indices.restype = None
    library.fill_exhaustive_blending_indices.argtypes = [_P, _I64, _P, _P]
    library.fill_exhaustive_blending_indices.restype = ctypes.c_int
    library.pack_best_fit.argtypes = [_P, _P, _I64, _I64, _I64, _P, _P, _P]
    library.pack_best_fit.restype = _I64
    return library


def _pointer(array: np.ndarray, dtype: type) -> int:
    if array.dtype != np.dtype(dtype) or not array.flags.c_contiguous:
        raise TypeError(f"kernel argument must be a C-contiguous {np.dtype(dtype)} array, not {array.dtype}")
    return array.ctypes.data


def _c_kernels(library: ctypes.CDLL) -> SimpleNamespace:
    def fill_sample_index(lengths, document_index, seq_length, extra_token, out):
        function = library.fill_sample_index_i32 if out.dtype == np.int32 else library.fill_sample_index_i64
        function(_pointer(lengths, np.int32), _pointer(document_index, np.int32), len(document_index),
                 seq_length, extra_token, _pointer(out, out.dtype.type), out.shape[0] - 1)

    def fill_blending_indices(weights, dataset_index, dataset_sample_index):
        counts = np.zeros(len(weights), dtype=np.int64)
        library.fill_blending_indices(_pointer(weights, np.float64), len(weights), _pointer(dataset_index, np.int16),
                                      _pointer(dataset_sample_index, np.int64), len(dataset_index), counts.ctypes.data)
        return counts

    def fill_scheduled_blending_indices(start, end, bounds, dataset_index, dataset_sample_index):
        counts = np.zeros(start.shape[1], dtype=np.int64)
        scratch = np.zeros(start.shape[1], dtype=np.int64)
        library.fill_scheduled_blending_indices(_pointer(start, np.float64), _pointer(end, np.float64),
                                                _pointer(bounds, np.int64), start.shape[0], start.shape[1],
                                                _pointer(dataset_index, np.int16),
                                                _pointer(dataset_sample_index, np.int64), counts.ctypes.data,
                                                scratch.ctypes.data)
        return counts

    def fill_exhaustive_blending_indices(sizes, dataset_index, dataset_sample_index):
        if library.fill_exhaustive_blending_indices(_pointer(sizes, np.int64), len(sizes), _pointer(dataset_index,
                                                                                                    np.int16),
                                                    _pointer(dataset_sample_index, np.int64)):
            raise MemoryError("exhaustive blending: out of memory for the per-source scratch arrays")

    def pack_best_fit(lengths, documents, capacity, window, piece_sequence, piece_offset, sample_start):
        samples = library.pack_best_fit(_pointer(lengths, np.int32), _pointer(documents, np.int32), len(documents),
                                        capacity, window, _pointer(piece_sequence, np.int32),
                                        _pointer(piece_offset, np.int32), _pointer(sample_start, np.int64))
        if samples < 0:
            raise MemoryError("best-fit packing: out of memory for the window's scratch arrays")
        return samples

    return SimpleNamespace(fill_sample_index=fill_sample_index, fill_blending_indices=fill_blending_indices,
                           fill_scheduled_blending_indices=fill_scheduled_blending_indices,
                           fill_exhaustive_blending_indices=fill_exhaustive_blending_indices,
                           pack_best_fit=pack_best_fit)


def _select() -> SimpleNamespace:
    try:
        return _c_kernels(_load_c())
    except (OSError, subprocess.SubprocessError) as error:
        log.info("index-map loops: C kernels unavailable (%s); using numba", str(error).splitlines()[0][:200])
        from corpus.blending import loops_numba

        return SimpleNamespace(fill_sample_index=loops_numba.fill_sample_index,
                               fill_blending_indices=loops_numba.fill_blending_indices,
                               fill_scheduled_blending_indices=loops_numba.fill_scheduled_blending_indices,
                               fill_exhaustive_blending_indices=loops_numba.fill_exhaustive_blending_indices,
                               pack_best_fit=loops_numba.pack_best_fit)


_kernels: SimpleNamespace | None = None
_kernels_lock = threading.Lock()
#: The loops this module offers (attributes resolved by :func:`__getattr__`).
LOOPS = ("fill_sample_index", "fill_blending_indices", "fill_scheduled_blending_indices",
         "fill_exhaustive_blending_indices", "pack_best_fit")


def kernels() -> SimpleNamespace:
    """The loops, chosen (and the C library built or loaded) at the first call in this process."""
    global _kernels
    with _kernels_lock:
        if _kernels is None:
            _kernels = _select()
    return _kernels


def __getattr__(name: str):
    """``loops.fill_sample_index`` and the other :data:`LOOPS`, from :func:`kernels` on first access, so that
    importing this module builds nothing."""
    if name in LOOPS:
        return getattr(kernels(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
