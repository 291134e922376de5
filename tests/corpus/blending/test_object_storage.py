"""Blends whose sources (one prefix, a glob of shards) and index-map cache live on a real S3 server: the same samples
as the blend on local copies, the maps shared through the remote ``cache_dir``, and ``corpus blend`` and ``trainer run``
on it, through every fault a store gives, reproducing their runs on the local copies sample for sample and loss for
loss."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from corpus import storage
from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.loader import BlendLoader
from corpus.blending.schema import load_blend
from corpus.storage.object_cache import mirror_dir
from tests.conftest import run_cli
from tests.corpus.blending.blend_data import write_blend, write_random
from tests.s3_server import TRANSIENT

COUNTS = SampleCounts(train=300, valid=20)


def _blends(tmp_path, bucket: str, storage_options: dict) -> tuple:
    """The same blend over local files and over their copies under ``bucket``, read with ``storage_options``."""
    data = tmp_path / "data"
    write_random(data / "web_text_document", 400, seed=1)
    for shard in range(3):
        write_random(data / "code" / f"part-{shard}_text_document", 150, seed=10 + shard)
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        storage.upload(path, f"{bucket}/{path.relative_to(tmp_path).as_posix()}")
    shape = {"seq_length": 16, "seed": 7, "split": "90,10,0"}
    local = write_blend(tmp_path / "local.yaml", {**shape, "cache_dir": str(tmp_path / "maps"), "sources": [
        {"name": "web", "prefix": "data/web_text_document", "weight": 0.6},
        {"name": "code", "prefix": "data/code/*_text_document", "weight": 0.4}]})
    remote = write_blend(tmp_path / "remote.yaml", {
        **shape, "cache_dir": f"{bucket}/maps", "storage_options": storage_options, "sources": [
            {"name": "web", "prefix": f"{bucket}/data/web_text_document", "weight": 0.6},
            {"name": "code", "prefix": f"{bucket}/data/code/*_text_document", "weight": 0.4}]})
    return local, remote


def _all_samples(datasets) -> np.ndarray:
    return np.stack([datasets.train.tokens_of(i) for i in range(len(datasets.train))])


def test_a_remote_blend_gives_the_samples_of_its_local_copies_and_shares_its_maps(tmp_path, bucket, s3):
    local_file, remote_file = _blends(tmp_path, bucket, {"endpoint_url": s3.endpoint})
    local = build_split_datasets(load_blend(local_file), COUNTS)
    remote = build_split_datasets(load_blend(remote_file), COUNTS)
    assert remote.fingerprint == local.fingerprint and remote.train.maps_built > 0
    assert np.array_equal(_all_samples(remote), _all_samples(local))
    assert np.array_equal(remote.valid.tokens_of(3), local.valid.tokens_of(3))
    local_batches = list(BlendLoader(local.train, 4, dp_rank=1, dp_size=2))
    remote_batches = list(BlendLoader(remote.train, 4, dp_rank=1, dp_size=2))
    assert all(np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(local_batches, remote_batches))
    assert storage.glob(f"{bucket}/maps/*/manifest.json")
    shutil.rmtree(mirror_dir(f"{bucket}/maps"))  # another node: nothing local, everything in the shared cache
    again = build_split_datasets(load_blend(remote_file), COUNTS)
    assert again.train.maps_built == 0 and np.array_equal(_all_samples(again), _all_samples(local))


def _show_samples(blend) -> list[dict]:
    shown = run_cli("corpus", "blend", str(blend), "--num-samples", "300", "--show-samples", "0:300", "--ids", "--json")
    return [json.loads(line) for line in shown.stdout.splitlines()]


@pytest.mark.slow  # a command of its own, through faults
def test_corpus_blend_on_a_remote_blend_through_faults_shows_the_local_samples(tmp_path, bucket, faults_each_path):
    faults = faults_each_path
    local_file, remote_file = _blends(tmp_path, bucket, faults.storage_options)
    faults.fail(TRANSIENT, every=2)
    remote = _show_samples(remote_file)
    assert faults.injected["GET"] >= 1 and faults.injected["PUT"] >= 1 and set(faults.by_fault) == set(TRANSIENT)
    assert len(remote) == 300 and remote == _show_samples(local_file)


@pytest.mark.slow  # two trainer processes; the loader test above already compares every sample
def test_trainer_run_on_a_remote_blend_through_faults_reproduces_the_local_run(tmp_path, bucket, faults_each_path):
    faults = faults_each_path
    local_file, remote_file = _blends(tmp_path, bucket, faults.storage_options)
    losses = {}
    for name, blend in (("local", local_file), ("remote", remote_file)):
        faults.fail(TRANSIENT, every=2)
        metrics = tmp_path / f"{name}.jsonl"
        run_cli("trainer", "run", "--blend", str(blend), "--seq-length", "16", "--num-layers", "2", "--hidden-size",
                "32", "--num-attention-heads", "4", "--ffn-hidden-size", "64", "--micro-batch-size", "2",
                "--global-batch-size", "4", "--train-iters", "3", "--eval-iters", "0", "--log-interval", "1",
                "--metrics-jsonl", str(metrics))
        losses[name] = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert faults.injected["GET"] >= 1 and set(faults.by_fault) == set(TRANSIENT)  # the remote run's faults
    assert len(losses["local"]) == 3 and losses["remote"] == losses["local"]
