"""The storage layer against a real S3 server (moto, on localhost): objects, listings, node-local copies, the
chunk cache, and one-line errors for every way a store says no (retries through faults: ``test_retries.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np
import pytest

from corpus import storage
from corpus.storage import chunked, object_cache
from tests.conftest import REPO, run_cli


def test_urls_stay_whole_and_never_pass_for_local_files():
    assert storage.is_remote("s3://b/k") and storage.is_remote("gs://b/k") and not storage.is_remote("/data/x")
    assert not storage.is_remote("file:///data/x") and storage.as_path("file:///data/x").as_posix() == "/data/x"
    assert storage.join("s3://b/dir", "x.idx") == "s3://b/dir/x.idx"
    assert storage.parent("s3://b/dir/x.idx") == "s3://b/dir" and storage.basename("s3://b/dir/x.idx") == "x.idx"
    assert storage.escape("s3://b/a*b") == "s3://b/a[*]b"
    path = storage.as_path("s3://b/dir/x.idx")
    assert str(path) == "s3://b/dir/x.idx" and path.name == "x.idx" and str(path.with_name("y.bin")) == "s3://b/dir/y.bin"
    with pytest.raises(TypeError):
        open(path, "rb")  # no __fspath__: a URL is never looked up as a local file


def test_objects_round_trip_and_list_with_their_versions(bucket):
    storage.write_bytes(f"{bucket}/data/b.jsonl", b"second")
    storage.write_bytes(f"{bucket}/data/a.jsonl", b"first")
    storage.write_bytes(f"{bucket}/data/deeper/c.jsonl", b"third")
    assert storage.read_bytes(f"{bucket}/data/a.jsonl") == b"first"
    assert storage.isdir(f"{bucket}/data") and not storage.isfile(f"{bucket}/data")
    assert storage.isfile(f"{bucket}/data/a.jsonl") and not storage.exists(f"{bucket}/data/none")
    folder = [o.path for o in storage.list_objects(f"{bucket}/data")]
    assert folder == [f"{bucket}/data/a.jsonl", f"{bucket}/data/b.jsonl", f"{bucket}/data/deeper/c.jsonl"]
    assert [o.path for o in storage.list_objects(f"{bucket}/data/*.jsonl")] == folder[:2]
    before = storage.identities([f"{bucket}/data/a.jsonl", f"{bucket}/data/b.jsonl"])
    storage.write_bytes(f"{bucket}/data/a.jsonl", b"FIRST")
    after = storage.identities([f"{bucket}/data/a.jsonl", f"{bucket}/data/b.jsonl"])
    assert after[1] == before[1] and after[0] != before[0] and after[0][0] == 5


def test_one_filesystem_and_client_serve_a_process(bucket):
    """botocore rewrites the retry options it is given; the next call must still find the same filesystem (a
    second one would build a second client)."""
    from corpus.storage.filesystems import DEFAULTS, filesystem

    defaults = repr(DEFAULTS)
    first = filesystem(bucket)
    storage.write_bytes(f"{bucket}/one", b"1")
    assert storage.list_objects(f"{bucket}/one")[0].size == 1
    assert filesystem(bucket) is first and repr(DEFAULTS) == defaults


def test_local_copies_follow_the_object_version(bucket):
    url = f"{bucket}/x.idx"
    storage.write_bytes(url, b"one")
    first = storage.local_file(url)
    storage.write_bytes(url, b"two!")
    second = storage.local_file(url)
    assert first.read_bytes() == b"one" and second.read_bytes() == b"two!" and first != second
    assert storage.local_file(url) == second  # cached: no second download


def test_missing_objects_and_buckets_are_one_line_naming_them(bucket):
    with pytest.raises(storage.ObjectNotFound, match=f"{bucket}/nothing: no such object") as missing:
        storage.read_bytes(f"{bucket}/nothing")
    with pytest.raises(storage.StorageError, match="bucket 'no-such-bucket-here' does not exist") as no_bucket:
        storage.read_bytes("s3://no-such-bucket-here/x")
    assert "\n" not in str(missing.value) and "\n" not in str(no_bucket.value)


def test_a_missing_extra_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(storage.MissingExtra, match=r"pip install 'blendforge\[s3\]'"):
        storage.info("s3://bucket/key")


def test_access_denied_names_the_credentials_to_check(faults, bucket):
    storage.write_bytes(f"{bucket}/secret", b"x")
    faults.fail("denied", every=1)
    with pytest.raises(storage.StorageError, match="access denied while trying to read it") as denied:
        storage.read_bytes(f"{bucket}/secret")
    assert "AWS_PROFILE" in str(denied.value)


def test_unreachable_endpoint_and_missing_credentials_end_in_one_line(s3, bucket):
    unreachable = run_cli("corpus", "inspect", f"{bucket}/x", "--storage-options",
                          '{"endpoint_url": "http://127.0.0.1:9", "config_kwargs": {"retries": {"max_attempts": 1}}}',
                          check=False)
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert "cannot reach the store's endpoint" in unreachable.stderr and len(unreachable.stderr.splitlines()) == 1
    environment = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    anonymous = subprocess.run([sys.executable, "-m", "cli.corpus", "inspect", f"{bucket}/x"], capture_output=True,
                               text=True, env={**environment, "PYTHONPATH": str(REPO),
                                               "AWS_EC2_METADATA_DISABLED": "true"}, timeout=120)
    assert anonymous.returncode == 1 and "Traceback" not in anonymous.stderr
    assert "no credentials found" in anonymous.stderr and "AWS_ACCESS_KEY_ID" in anonymous.stderr


def _tokens(count: int) -> np.ndarray:
    return np.random.default_rng(1).integers(0, 50_000, count, dtype=np.uint16)


def test_chunked_arrays_read_like_the_local_file_and_serve_warm_reads_from_the_cache(bucket, tmp_path):
    tokens = _tokens(300_001)
    (tmp_path / "t.bin").write_bytes(tokens.tobytes())
    storage.upload(tmp_path / "t.bin", f"{bucket}/t.bin")
    found = storage.info(f"{bucket}/t.bin")
    remote = chunked.ChunkedArray(found, np.uint16, chunk_bytes=64 << 10)
    boundary = (64 << 10) // 2
    assert len(remote) == len(tokens) and remote[7] == tokens[7] and remote[-1] == tokens[-1]
    for start, stop in [(0, 10), (boundary - 3, boundary + 3), (5, 3 * boundary + 7), (len(tokens) - 9, None)]:
        assert np.array_equal(remote[start:stop], tokens[start:stop])
    picks = np.array([0, boundary, boundary - 1, len(tokens) - 1, 12_345])
    assert np.array_equal(remote[picks], tokens[picks]) and np.array_equal(np.asarray(remote), tokens)
    storage.delete(f"{bucket}/t.bin")  # a new reader of the same version needs nothing from the store
    assert np.array_equal(np.asarray(chunked.ChunkedArray(found, np.uint16, chunk_bytes=64 << 10)), tokens)


def test_a_wholly_cached_object_is_one_array_over_its_chunk_files(bucket, tmp_path, monkeypatch):
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64 << 10)
    tokens = _tokens(100_001)  # three whole chunks and a short one
    (tmp_path / "t.bin").write_bytes(tokens.tobytes())
    storage.upload(tmp_path / "t.bin", f"{bucket}/t.bin")
    cold = storage.map_array(f"{bucket}/t.bin", np.uint16)
    assert isinstance(cold, chunked.ChunkedArray) and np.array_equal(np.asarray(cold), tokens)  # fills the cache
    warm = storage.map_array(f"{bucket}/t.bin", np.uint16)
    assert type(warm) is np.ndarray and not warm.flags.writeable and np.array_equal(warm, tokens)
    boundary = (64 << 10) // 2
    assert np.array_equal(warm[boundary - 3 : boundary + 3], tokens[boundary - 3 : boundary + 3])
    shutil.rmtree(object_cache.object_dir(storage.info(f"{bucket}/t.bin")))  # pruned meanwhile: still readable
    assert np.array_equal(warm, tokens)
    assert isinstance(storage.map_array(f"{bucket}/t.bin", np.uint16), chunked.ChunkedArray)


def _read_all(found: storage.ObjectInfo) -> bytes:
    return np.asarray(chunked.ChunkedArray(found, np.uint16, chunk_bytes=32 << 10)).tobytes()


def test_processes_of_a_node_share_the_chunk_cache(bucket, tmp_path):
    tokens = _tokens(200_000)
    (tmp_path / "t.bin").write_bytes(tokens.tobytes())
    storage.upload(tmp_path / "t.bin", f"{bucket}/t.bin")
    found = storage.info(f"{bucket}/t.bin")
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_read_all, [found] * 4))
    assert all(result == tokens.tobytes() for result in results)
    folder = object_cache.object_dir(found)
    names = sorted(p.name for p in folder.iterdir())
    chunks = [name for name in names if name.endswith(".chunk")]
    assert len(chunks) == -(-tokens.nbytes // (32 << 10)) and names == sorted([*chunks, "source"])


def test_the_cache_stays_within_its_budget(bucket, tmp_path, monkeypatch):
    budget = 256 << 10
    monkeypatch.setenv("BLENDFORGE_OBJECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BLENDFORGE_OBJECT_CACHE_GB", str(budget / (1 << 30)))
    monkeypatch.setattr(object_cache, "STALE_S", 0.0)
    tokens = _tokens(500_000)
    (tmp_path / "t.bin").write_bytes(tokens.tobytes())
    storage.upload(tmp_path / "t.bin", f"{bucket}/t.bin")
    remote = chunked.ChunkedArray(storage.info(f"{bucket}/t.bin"), np.uint16, chunk_bytes=16 << 10)
    assert np.array_equal(np.asarray(remote), tokens)
    cached = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.chunk"))
    assert 0 < cached <= budget < tokens.nbytes
