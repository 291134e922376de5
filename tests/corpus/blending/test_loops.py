"""The C index-map loops equal the numba ones (both ports of megatron-core's helpers.cpp, whose
conformance test_blend_conformance checks end to end), and a machine without a compiler falls back."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from corpus.blending import loops, loops_numba
from tests.cache_keys import assert_each_field_changes_the_key
from tests.conftest import REPO


@pytest.mark.parametrize("extra_token", [0, 1])
@pytest.mark.parametrize("seq_length", [7, 128, 1024])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sample_index_equals_numba(extra_token: int, seq_length: int, dtype: type) -> None:
    rng = np.random.default_rng(seq_length + extra_token)
    lengths = rng.integers(1, 500, size=3000).astype(np.int32)
    documents = np.tile(np.arange(3000, dtype=np.int32), 3)
    rng.shuffle(documents)
    num_samples = (int(lengths.sum()) * 3 - extra_token) // seq_length
    ours, reference = (np.full((num_samples + 1, 2), -7, dtype=dtype) for _ in range(2))
    loops.fill_sample_index(lengths, documents, seq_length, extra_token, ours)
    loops_numba.fill_sample_index(lengths, documents, seq_length, extra_token, reference)
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("size", [1, 2, 10, 100_003])
def test_blending_indices_equal_numba(size: int) -> None:
    weights = np.array([0.3, 0.2, 0.5, 1e-3])
    weights /= weights.sum()
    results = []
    for module in (loops, loops_numba):
        index, sample = np.full(size, -1, dtype=np.int16), np.full(size, -1, dtype=np.int64)
        counts = module.fill_blending_indices(weights, index, sample)
        results.append((index, sample, counts))
    for ours, reference in zip(*results):
        np.testing.assert_array_equal(ours, reference)


def test_scheduled_blending_indices_equal_numba() -> None:
    """Three phases (a step, a ramp, a ramp to a mix with a zero weight) of uneven lengths."""
    end = np.array([[0.3, 0.2, 0.5, 1e-3], [0.1, 0.1, 0.1, 0.7], [0.0, 0.5, 0.25, 0.25]])
    end /= end.sum(axis=1, keepdims=True)
    start = np.array([end[0], end[0], end[1]])
    bounds = np.array([0, 7, 50_001, 100_003], dtype=np.int64)
    results = []
    for module in (loops, loops_numba):
        index, sample = np.full(bounds[-1], -1, dtype=np.int16), np.full(bounds[-1], -1, dtype=np.int64)
        counts = module.fill_scheduled_blending_indices(start, end, bounds, index, sample)
        results.append((index, sample, counts))
    for ours, reference in zip(*results):
        np.testing.assert_array_equal(ours, reference)


def test_exhaustive_blending_indices_equal_numba() -> None:
    sizes = np.array([5, 0, 17, 3000, 1], dtype=np.int64)
    results = []
    for module in (loops, loops_numba):
        index, sample = np.full(sizes.sum(), -1, dtype=np.int16), np.full(sizes.sum(), -1, dtype=np.int64)
        module.fill_exhaustive_blending_indices(sizes, index, sample)
        results.append((index, sample))
    for ours, reference in zip(*results):
        np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("capacity, window", [(2, 1), (9, 3), (257, 50), (4097, 20_000), (70_000, 1000)])
def test_best_fit_packing_equals_numba(capacity: int, window: int) -> None:
    rng = np.random.default_rng(capacity)
    lengths = rng.integers(0, 3 * capacity, size=4000).astype(np.int32)
    documents = rng.permutation(4000).astype(np.int32)
    pieces = int(np.sum((lengths.astype(np.int64) - 1) // capacity + 1))
    results = []
    for module in (loops, loops_numba):
        sequence, offset = np.full(pieces, -1, np.int32), np.full(pieces, -1, np.int32)
        starts = np.full(pieces + 1, -1, np.int64)
        samples = module.pack_best_fit(lengths, documents, capacity, window, sequence, offset, starts)
        results.append((sequence, offset, starts[: samples + 1]))
    for ours, reference in zip(*results):
        np.testing.assert_array_equal(ours, reference)
    assert results[0][2][-1] == pieces


def test_wrong_dtype_is_refused() -> None:
    with pytest.raises(TypeError, match="C-contiguous int16"):
        loops.fill_blending_indices(np.array([1.0]), np.zeros(3, dtype=np.int32), np.zeros(3, dtype=np.int64))


def test_no_compiler_falls_back_to_numba(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("BLENDFORGE_KERNEL_CACHE_DIR", str(tmp_path / "compiled_kernels"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with caplog.at_level("INFO", logger="corpus.blending.loops"):
        kernels = loops._select()
    assert kernels.fill_sample_index is loops_numba.fill_sample_index
    assert "using numba" in caplog.text
    assert not list((tmp_path / "compiled_kernels").glob("*.so"))


_FIRST_MAP = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
import numpy as np
import corpus.blending, corpus.blending.index_maps, corpus.blending.loops
folder = Path(sys.argv[1])
print("after import:", sorted(p.name for p in folder.iterdir()) if folder.exists() else "no folder")
corpus.blending.index_maps.sample_index(np.ones(4, np.int32), np.arange(4, dtype=np.int32), 2, 4, 1)
print("after a map:", sorted(p.name for p in folder.iterdir()))
"""


def test_importing_compiles_nothing_and_the_first_map_builds_the_kernels_once_in_their_own_folder(tmp_path):
    folders = {name: tmp_path / name for name in ("compiled_kernels", "index_maps")}
    environment = {**os.environ, "PYTHONPATH": str(REPO), "BLENDFORGE_CACHE_DIR": str(folders["index_maps"]),
                   "BLENDFORGE_KERNEL_CACHE_DIR": str(folders["compiled_kernels"])}
    runs = [subprocess.run([sys.executable, "-c", _FIRST_MAP, str(folders["compiled_kernels"])], env=environment,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)]
    library = loops.library_path().name
    assert "after import: no folder" in runs[0] and f"after import: ['{library}']" in runs[1]
    assert f"after a map: ['{library}']" in runs[0]
    compiled = [line for line in runs[0].splitlines() if "compiled with" in line]
    assert len(compiled) == 1 and str(folders["compiled_kernels"] / library) in compiled[0], runs[0]
    assert "compiled with" not in runs[1]  # built once per machine, loaded since
    assert not folders["index_maps"].exists()  # nothing of the kernels lands among the maps


def test_the_librarys_name_changes_with_its_source_compiler_and_each_flag() -> None:
    base = {"source": loops._C_SOURCE, "compiler": "/usr/bin/cc", "flags": loops.COMPILE_FLAGS}
    assert_each_field_changes_the_key(loops.library_name, base, {
        "source": loops._C_SOURCE.replace("ties", "ties "), "compiler": "/usr/bin/clang",
        "flags": loops.COMPILE_FLAGS[1:]})
    for index in range(len(loops.COMPILE_FLAGS)):
        dropped = loops.COMPILE_FLAGS[:index] + loops.COMPILE_FLAGS[index + 1:]
        assert loops.library_name(loops._C_SOURCE, "/usr/bin/cc", dropped) != loops.library_name(**base)


def test_an_edited_kernel_compiles_a_library_of_its_own(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BLENDFORGE_KERNEL_CACHE_DIR", str(tmp_path))
    loops._load_c()
    monkeypatch.setattr(loops, "_C_SOURCE", loops._C_SOURCE + "\nint edited(void) { return 7; }\n")
    assert loops._load_c().edited() == 7  # a library built from the old source has no such function
    assert len(list(tmp_path.glob("index-kernels-*.so"))) == 2
