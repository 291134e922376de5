"""The index-map cache: one build for many concurrent processes, corrupt entries rebuilt, keys that
change exactly when the maps do, and a builder killed mid-build blocking nobody."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from corpus.blending import map_cache
from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.map_cache import MapCache, cache_key
from corpus.blending.schema import blend_from_dict
from corpus.core.errors import UserError
from tests.conftest import REPO
from tests.corpus.blending.blend_data import write_random

BLEND = {"seq_length": 32, "seed": 3, "split": "95,5,0", "cache_dir": "cache",
         "sources": [{"name": "web", "prefix": "web", "weight": 0.6}, {"name": "code", "prefix": "code/*",
                                                                       "weight": 0.4}]}

# Waits for the go file so every process asks for the maps at the same moment, then reports what it built.
WORKER = """
import hashlib, json, os, sys, time
from pathlib import Path
from corpus.blending.schema import blend_from_dict
from corpus.blending.datasets import SampleCounts, build_split_datasets
folder = Path(sys.argv[1])
(folder / f"ready-{os.getpid()}").touch()
while not (folder / "go").exists():
    time.sleep(0.005)
data = build_split_datasets(blend_from_dict(json.loads(sys.argv[2]), base_dir=folder), SampleCounts(400_000, 2_000))
digest = hashlib.sha256()
for split in (data.train, data.valid):
    for index in range(0, len(split), 997):
        digest.update(split.tokens_of(index).tobytes())
sources = sum(s.built for _, s in data.resolved.all_sources())
print(json.dumps({"built": sources + data.train.maps_built + data.valid.maps_built, "digest": digest.hexdigest()}))
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_random(tmp_path / "web", 400, seed=1, max_len=200)
    for shard in range(3):
        write_random(tmp_path / "code" / f"shard{shard}", 100, seed=2 + shard, max_len=300)
    return tmp_path


def _datasets(folder: Path, blend: dict = BLEND, counts: SampleCounts = SampleCounts(3000, 100)):
    return build_split_datasets(blend_from_dict(blend, base_dir=folder), counts)


def _all_tokens(data) -> list[np.ndarray]:
    return [split.tokens_of(i) for split in (data.train, data.valid) for i in range(len(split))]


def test_concurrent_processes_build_once_and_agree(folder: Path) -> None:
    workers = 4
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    processes = [subprocess.Popen([sys.executable, "-c", WORKER, str(folder), json.dumps(BLEND)], env=environment,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(workers)]
    deadline = time.monotonic() + 300
    while len(list(folder.glob("ready-*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.05)
    (folder / "go").touch()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    entries = [p for p in (folder / "cache").iterdir() if p.is_dir() and not p.name.startswith(".")]
    # 2 source tables + (2 sources + 1 blend) x 2 splits, each built by exactly one process
    assert len(entries) == 8
    assert sum(r["built"] for r in results) == 8
    assert len({r["digest"] for r in results}) == 1
    assert not [p for p in (folder / "cache").iterdir() if p.name.startswith(".tmp")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-manifest", "bad-manifest", "no-array"])
def test_a_damaged_entry_is_detected_and_rebuilt(folder: Path, damage: str, caplog) -> None:
    expected = _all_tokens(_datasets(folder))
    entry = next(p for p in (folder / "cache").iterdir() if p.name.startswith("gpt-"))
    array = entry / "sample_index.npy"
    if damage == "truncate":
        array.write_bytes(array.read_bytes()[:-9])
    elif damage == "flip":
        raw = bytearray(array.read_bytes())
        raw[len(raw) // 2] ^= 0x5A
        array.write_bytes(bytes(raw))
    elif damage == "no-manifest":
        (entry / "manifest.json").unlink()
    elif damage == "bad-manifest":
        (entry / "manifest.json").write_text('{"files": ')
    else:
        array.unlink()
    again = _datasets(folder)
    assert again.train.maps_built + again.valid.maps_built == 1
    for mine, theirs in zip(_all_tokens(again), expected, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    if damage != "no-manifest":
        assert "corrupt" in caplog.text


def test_keys_follow_what_changes_the_maps(folder: Path) -> None:
    first = _datasets(folder)
    assert first.train.maps_built == 3
    assert _datasets(folder).train.maps_built == 0
    for change in ({"seed": 4}, {"seq_length": 31}, {"samples": {"add_extra_token_to_sequence": False}}):
        assert _datasets(folder, {**BLEND, **change}).train.maps_built == 3, change
    assert _datasets(folder, counts=SampleCounts(3001, 100)).train.maps_built == 3
    # Same .idx bytes under a new mtime: the source table is re-read, the maps are reused.
    idx = folder / "web.idx"
    os.utime(idx, ns=(time.time_ns(), time.time_ns() + 10**9))
    touched = _datasets(folder)
    assert [s.built for _, s in touched.resolved.all_sources()] == [True, False] and touched.train.maps_built == 0
    # New web content: new web maps and a new blend; the code maps stay.
    write_random(folder / "web", 400, seed=99, max_len=200)
    assert _datasets(folder).train.maps_built == 2
    # Megatron hashes neither of these; we must.
    assert cache_key({"extra_token": 1}) != cache_key({"extra_token": 0})


SLOW_BUILDER = """
import sys, time
from pathlib import Path
import numpy as np
from corpus.blending.map_cache import MapCache
def build():
    Path(sys.argv[2]).touch()
    time.sleep(600)
    return {"a": np.zeros(3)}, {}
MapCache(sys.argv[1]).get_or_build("x", "k" * 64, build)
"""


def test_a_builder_killed_mid_build_blocks_nobody(tmp_path: Path) -> None:
    marker = tmp_path / "inside"
    process = subprocess.Popen([sys.executable, "-c", SLOW_BUILDER, str(tmp_path / "cache"), str(marker)],
                               env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    process.send_signal(signal.SIGKILL)
    process.wait()
    entry = MapCache(tmp_path / "cache").get_or_build("x", "k" * 64, lambda: ({"a": np.arange(3)}, {"ok": 1}))
    assert entry.built and entry.meta == {"ok": 1} and entry.arrays["a"].tolist() == [0, 1, 2]
    assert MapCache(tmp_path / "cache").load("x", "k" * 64) is not None


def test_an_unwritable_cache_is_a_clear_error(folder: Path) -> None:
    (folder / "not-a-folder").write_text("")
    with pytest.raises(UserError, match="cannot write the index-map cache .*not-a-folder.*writable folder"):
        _datasets(folder, {**BLEND, "cache_dir": "not-a-folder"})


def test_leftovers_of_a_killed_writer_are_cleared(tmp_path: Path) -> None:
    cache = MapCache(tmp_path)
    stale = tmp_path / f".tmp-{cache.entry_path('x', 'k' * 64).name}-dead"
    stale.mkdir()
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    cache.get_or_build("x", "k" * 64, lambda: ({"a": np.arange(2)}, {}))
    assert not stale.exists()


def test_entries_are_checksummed_across_crc_blocks(tmp_path: Path, monkeypatch) -> None:
    """The crc32 of an array read in 5-byte blocks is the whole array's, and a byte flipped in a later block is
    caught when the entry loads."""
    monkeypatch.setattr(map_cache, "_CRC_BLOCK", 5)
    for size in (0, 1, 4, 5, 6, 40):
        array = np.arange(size, dtype=np.int32)
        assert map_cache._crc32(array) == zlib.crc32(array.tobytes()), size
    cache = MapCache(tmp_path)
    cache.get_or_build("x", "k" * 64, lambda: ({"a": np.arange(40, dtype=np.int32)}, {}))
    assert cache.load("x", "k" * 64) is not None
    stored = cache.entry_path("x", "k" * 64) / "a.npy"
    raw = bytearray(stored.read_bytes())
    raw[-7] ^= 1  # inside the last blocks of the array
    stored.write_bytes(bytes(raw))
    assert cache.load("x", "k" * 64) is None
