"""A remote ``.bin`` as a token array over the chunk cache, on the real S3 server: every kind of index numpy takes
gives what the local array gives (cold, each read fetching its chunks, and warm, every chunk mapped), out-of-range
indices fail as numpy's do, read-ahead fetches the next chunks (wrapping around) in one ranged read per run, and an
array pickled into another process reads the same."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from corpus import storage
from corpus.storage import chunked, object_cache

CHUNK = 1 << 10  # 512 tokens a chunk
PER = CHUNK // 2
COUNT = 10 * PER + 3  # ten whole chunks and a short one
KEYS = [
    0, 1, PER - 1, PER, PER + 1, COUNT - 1, -1, -COUNT, np.int64(700), np.int32(-5),
    slice(0, 10), slice(PER - 3, PER + 3), slice(5, 3 * PER + 7), slice(0, COUNT), slice(100, 100), slice(PER, PER),
    slice(530, 500), slice(-20, None), slice(None, -3), slice(5000, 99_999), slice(None, None, 7),
    slice(10, 3000, 13), slice(None, None, -1), slice(-1, -20, -3), slice(np.int64(3), np.int64(9)),
    slice(None, None, 2), slice(2 * PER + 5, 2 * PER + 50), slice(PER, 2 * PER), slice(PER + 1, 2 * PER + 1),
    slice(3 * PER, 3 * PER + 1), slice(np.int64(PER - 3), np.int64(PER + 1)),
    np.array([5, 600, 5, -1, 4000]), np.array([[1, 2], [PER, COUNT - 1]]), np.array([], dtype=np.int64),
    [3, PER, 2 * PER - 1],
]


def _key_id(key) -> str:
    return repr(key).replace(" ", "")[:40]


@pytest.fixture
def remote(bucket, tmp_path) -> tuple[np.ndarray, storage.ObjectInfo]:
    tokens = np.random.default_rng(11).integers(0, 50_000, COUNT, dtype=np.uint16)
    (tmp_path / "t.bin").write_bytes(tokens.tobytes())
    storage.upload(tmp_path / "t.bin", f"{bucket}/t.bin")
    return tokens, storage.info(f"{bucket}/t.bin")


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_every_kind_of_index_reads_what_the_local_array_holds(remote, tmp_path, monkeypatch, warm):
    monkeypatch.setattr(chunked, "READ_AHEAD", 0)  # each cold read fetches what it reads, and nothing else
    tokens, found = remote
    warmed = chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK)
    if warm:
        for index in range(-(-COUNT // PER)):
            warmed[index * PER]  # maps every chunk
    for number, key in enumerate(KEYS):
        if not warm:  # a new array over an empty cache
            monkeypatch.setenv("BLENDFORGE_OBJECT_CACHE_DIR", str(tmp_path / f"cache-{number}"))
        array = warmed if warm else chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK)
        got, expected = array[key], tokens[key]
        assert np.asarray(got).dtype == np.uint16 and np.shape(got) == np.shape(expected), _key_id(key)
        assert np.array_equal(got, expected), _key_id(key)


@pytest.mark.parametrize("key", [COUNT, -COUNT - 1, np.array([0, COUNT]), np.array([-COUNT - 1])], ids=_key_id)
def test_an_index_out_of_range_fails_as_numpys_does(remote, key):
    tokens, found = remote
    with pytest.raises(IndexError):
        tokens[key]
    with pytest.raises(IndexError, match=f"{found.path}: index out of range for {COUNT} tokens"):
        chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK)[key]


def test_read_ahead_fetches_the_next_chunks_wrapping_around_in_one_read_per_run(remote, faults, monkeypatch):
    """Chunk 9 read first: chunks 10, 0, 1 and 2 follow it, in two runs ([10], [0, 1, 2]); chunk 3 is left."""
    monkeypatch.setattr(chunked, "READ_AHEAD", 4)
    tokens, found = remote
    faults.fail(None)
    array = chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK)
    assert array[9 * PER + 1] == tokens[9 * PER + 1]
    for future in set(array._pending.values()):
        future.result()
    assert faults.requests["GET"] == 3
    folder = object_cache.object_dir(found)
    data = tokens.tobytes()
    for index in (9, 10, 0, 1, 2):
        assert chunked.chunk_path(folder, index).read_bytes() == data[index * CHUNK : (index + 1) * CHUNK], index
    assert not chunked.chunk_path(folder, 3).exists()
    monkeypatch.setattr(chunked, "READ_AHEAD", 0)
    assert np.array_equal(array[: 3 * PER], tokens[: 3 * PER]) and faults.requests["GET"] == 3  # all cached


def test_the_whole_array_converts_to_the_dtype_asked_for(remote):
    tokens, found = remote
    widened = np.asarray(chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK), dtype=np.int64)
    assert widened.dtype == np.int64 and np.array_equal(widened, tokens)


def test_an_array_pickled_into_another_process_reads_the_same(remote):
    tokens, found = remote
    array = chunked.ChunkedArray(found, np.uint16, chunk_bytes=CHUNK)
    copy = pickle.loads(pickle.dumps(array))
    assert (copy.found, copy.dtype, copy.chunk_bytes) == (found, np.dtype(np.uint16), CHUNK)
    assert np.array_equal(np.asarray(copy), tokens)


def test_a_local_bin_maps_as_a_read_only_array_of_its_whole_tokens(tmp_path):
    tokens = np.arange(1000, dtype=np.int32)
    (tmp_path / "t.bin").write_bytes(tokens.tobytes() + b"\x01\x02")  # a torn last token is not one
    mapped = chunked.map_array(tmp_path / "t.bin", np.int32)
    assert type(mapped) is np.ndarray and mapped.dtype == np.int32 and not mapped.flags.writeable
    assert np.array_equal(mapped, tokens)
    (tmp_path / "empty.bin").write_bytes(b"\x01")
    empty = chunked.map_array(tmp_path / "empty.bin", np.int32)
    assert empty.dtype == np.int32 and empty.shape == (0,)
