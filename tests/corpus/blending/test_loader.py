"""The torch loader: DP sharding in Megatron's order, exact resume (also after kill -9), and the
blend fingerprint guarding resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from corpus.blending.datasets import SampleCounts, megatron_sample_counts
from corpus.blending.loader import BlendLoader, TorchSplitDataset, build_datasets
from corpus.blending.schema import blend_from_dict
from corpus.core.errors import UserError
from tests.conftest import REPO
from tests.corpus.blending.blend_data import EOD, web_and_code, weighted_blend

BLEND = weighted_blend(0.7, 0.3, seq_length=24, seed=5, split="95,5,0",
                       samples={"eod_mask_loss": True, "reset_position_ids": True, "reset_attention_mask": True})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return web_and_code(tmp_path, 120)


@pytest.fixture
def datasets(folder: Path):
    return build_datasets(blend_from_dict(BLEND, base_dir=folder), SampleCounts(240, 24))


def _batches(loader: BlendLoader) -> list[dict[str, torch.Tensor]]:
    return list(loader)


def _assert_same(first: list[dict], second: list[dict]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), name


def test_batches_hold_the_samples_in_megatron_order(datasets) -> None:
    train, _, _, info = datasets
    loader = BlendLoader(train, micro_batch_size=4, blend_fingerprint=info.fingerprint)
    assert len(loader) == len(train) // 4
    batch = next(iter(loader))
    assert batch["tokens"].shape == (4, 24) and batch["tokens"].dtype == torch.int64
    assert batch["loss_mask"].dtype == torch.float32 and batch["position_ids"].dtype == torch.int64
    for row in range(4):
        sample = train[row]
        for name in ("tokens", "labels", "loss_mask", "position_ids"):
            assert torch.equal(batch[name][row], sample[name]), name
        raw = info.train.tokens_of(row)
        assert torch.equal(batch["labels"][row], torch.from_numpy(raw[1:]))
    cu = batch["cu_seqlens"]
    assert cu[0] == 0 and cu[-1] == 4 * 24 and set(range(0, 96, 24)) <= set(cu.tolist())
    eods = (batch["tokens"].reshape(-1) == EOD).nonzero().flatten() + 1
    assert set(eods[eods % 24 != 0].tolist()) <= set(cu.tolist())


def test_data_parallel_ranks_partition_each_step(datasets) -> None:
    train, _, _, info = datasets
    whole = _batches(BlendLoader(train, micro_batch_size=6))
    ranks = [_batches(BlendLoader(train, micro_batch_size=2, dp_rank=r, dp_size=3)) for r in range(3)]
    assert len(ranks[0]) == len(whole)
    for step, batch in enumerate(whole):
        stacked = torch.cat([ranks[r][step]["tokens"] for r in range(3)])
        assert torch.equal(stacked, batch["tokens"])


def test_resume_equals_uninterrupted_iteration(datasets) -> None:
    train, _, _, info = datasets
    uninterrupted = _batches(BlendLoader(train, 2, 1, 2, blend_fingerprint=info.fingerprint))
    loader = BlendLoader(train, 2, 1, 2, blend_fingerprint=info.fingerprint)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(7)]
    state = loader.state_dict()
    assert state["consumed_samples"] == 7 * 4
    resumed = BlendLoader(train, 2, 1, 2, blend_fingerprint=info.fingerprint)
    resumed.load_state_dict(state)
    _assert_same(head + _batches(resumed), uninterrupted)
    direct = BlendLoader(train, 2, 1, 2, consumed_samples=28, blend_fingerprint=info.fingerprint)
    _assert_same(_batches(direct), uninterrupted[7:])
    # A new DP layout resumes at the same global position.
    single = BlendLoader(train, 4, 0, 1, consumed_samples=28)
    whole = _batches(BlendLoader(train, 4, 0, 1))
    _assert_same(_batches(single), whole[7:])


def test_resume_refuses_another_blend_unless_allowed(folder: Path, datasets, caplog) -> None:
    train, _, _, info = datasets
    other = build_datasets(blend_from_dict({**BLEND, "seed": 6}, base_dir=folder), SampleCounts(240))[3]
    assert other.fingerprint != info.fingerprint
    state = BlendLoader(train, 2, blend_fingerprint=other.fingerprint).state_dict()
    loader = BlendLoader(train, 2, blend_fingerprint=info.fingerprint)
    with pytest.raises(UserError, match="another blend"):
        loader.load_state_dict(state)
    loader.load_state_dict(state, allow_blend_change=True)
    assert "continuing as asked" in caplog.text
    with pytest.raises(UserError, match="not a multiple"):
        BlendLoader(train, 2, 0, 2, consumed_samples=6)


def test_torch_dataloader_takes_the_dataset(datasets) -> None:
    train = datasets[0]
    assert isinstance(train, torch.utils.data.Dataset)
    plain = BlendLoader(train.samples, 3)  # the numpy dataset works too
    batch = next(iter(torch.utils.data.DataLoader(TorchSplitDataset(train.samples), batch_size=3,
                                                  collate_fn=lambda items: items)))
    assert torch.equal(torch.stack([item["tokens"] for item in batch]), next(iter(plain))["tokens"])


def test_a_plain_dataloader_loop_gets_each_samples_source(folder: Path) -> None:
    """What a training loop of one's own sees: ``source_ids`` collated per batch, indexing ``source_names``."""
    blend = blend_from_dict({**BLEND, "samples": {"eod_mask_loss": True}}, base_dir=folder)
    train, _, _, info = build_datasets(blend, SampleCounts(240))
    assert train.source_names == ("web", "code")
    seen = []
    for batch in torch.utils.data.DataLoader(train, batch_size=8, drop_last=True):
        assert batch["source_ids"].shape == (8,) and batch["source_ids"].dtype == torch.int64
        seen += [train.source_names[i] for i in batch["source_ids"].tolist()]
    assert seen == [info.train.source_name(i) for i in range(len(seen))] and set(seen) == {"web", "code"}
    loader = BlendLoader(train, 4, dp_rank=1, dp_size=2)
    assert loader.source_names == ("web", "code")
    assert [train.source_names[i] for i in next(iter(loader))["source_ids"]] == seen[4:8]


def test_megatron_sample_counts() -> None:
    assert megatron_sample_counts(1000, 32, 100, 10) == SampleCounts(32_000, 11 * 10 * 32, 10 * 32)


# Iterates the train loader, saving {state, digests} atomically after every batch (a checkpoint).
RUNNER = """
import hashlib, json, os, sys, time
from pathlib import Path
from corpus.blending.schema import blend_from_dict
from corpus.blending.datasets import SampleCounts
from corpus.blending.loader import BlendLoader, build_datasets
folder, blend, pause = Path(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
train, _, _, info = build_datasets(blend_from_dict(blend, base_dir=folder), SampleCounts(240, 24))
loader = BlendLoader(train, 2, blend_fingerprint=info.fingerprint)
saved = folder / "checkpoint.json"
digests = []
if saved.exists():
    checkpoint = json.loads(saved.read_text())
    loader.load_state_dict(checkpoint["state"])
    digests = checkpoint["digests"]
for batch in loader:
    digests.append(hashlib.sha256(b"".join(t.numpy().tobytes() for t in batch.values())).hexdigest())
    (folder / "checkpoint.partial").write_text(json.dumps({"state": loader.state_dict(), "digests": digests}))
    os.replace(folder / "checkpoint.partial", saved)
    time.sleep(pause)
"""


@pytest.mark.slow  # a killed loader process and two more runs
def test_resume_after_kill_equals_an_uninterrupted_run(folder: Path, tmp_path_factory) -> None:
    def run(where: Path, pause: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", RUNNER, str(where), json.dumps(BLEND), str(pause)],
                                env={**os.environ, "PYTHONPATH": str(REPO)})

    reference = tmp_path_factory.mktemp("reference")
    for name in ("web", "code"):
        for suffix in (".bin", ".idx", ".meta.json"):
            (reference / f"{name}{suffix}").write_bytes((folder / f"{name}{suffix}").read_bytes())
    assert run(reference, 0).wait(timeout=300) == 0
    process = run(folder, 0.05)
    checkpoint = folder / "checkpoint.json"
    deadline = time.monotonic() + 300
    while ((not checkpoint.exists() or len(json.loads(checkpoint.read_text())["digests"]) < 10)
           and time.monotonic() < deadline):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    interrupted_at = len(json.loads(checkpoint.read_text())["digests"])
    assert 10 <= interrupted_at < 120
    assert run(folder, 0).wait(timeout=300) == 0
    reference_digests = json.loads((reference / "checkpoint.json").read_text())["digests"]
    assert json.loads(checkpoint.read_text())["digests"] == reference_digests
