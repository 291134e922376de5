"""Checkpoints written at one TP × PP × DP layout load at another: TP2×PP2×DP2 (sequence parallel,
ZeRO-1, overlapped reduction, 8 CPU ranks) saved at step 10 and resumed at TP1×PP2×DP4, TP1×PP1×DP8 with
ZeRO-1 (8 ranks each; the save/resume pair of issue #9's eight-GPU run) and TP1×PP1×DP1 (one process) continue the loss
curve of an uninterrupted one-process run; a vocabulary
padded for another TP size loads the rows both layouts have."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import read_metrics
from tests.trainer.parallelize.support import assert_same_curve, curve, layout_overrides, run_ranks
from trainer.checkpoint import store as checkpoint
from trainer.config.loading import load_config, merge
from trainer.run.build import build_run
from trainer.run.loop import train

TP2_PP2_DP2 = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "sequence_parallel": True,
               "use_distributed_optimizer": True, "overlap_grad_reduce": True, "overlap_param_gather": True,
               "ddp_bucket_size": 2000}


#: Clipping at every step: under ZeRO-1 at DP 8 some ranks own no gradient bucket and still clip.
ALWAYS_CLIPPED = {"optim": {"clip_grad": 0.01}}


def _in_one_thread(overrides: dict) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(load_config(None, overrides))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def resharded(tmp_path_factory, one_process_layout_run) -> Path:
    """The reference (one process, 20 steps: the session's), TP2×PP2×DP2 saving at step 10, and the three
    resumes."""
    root = tmp_path_factory.mktemp("reshard")
    save = str(root / "checkpoints")
    (root / "one_process").symlink_to(one_process_layout_run)
    _in_one_thread(merge(layout_overrides(root / "one_process_clipped", steps=4), ALWAYS_CLIPPED))
    saved_at_10 = str(Path(save) / "iter_0000010")
    run_ranks(8, [merge(layout_overrides(root / "tp2_pp2_dp2", **TP2_PP2_DP2),
                        {"checkpoint": {"save": save, "save_interval": 10}}),
                  merge(layout_overrides(root / "tp1_pp2_dp4", pipeline_model_parallel_size=2),
                        {"checkpoint": {"load": saved_at_10}}),
                  merge(layout_overrides(root / "tp1_pp1_dp8", use_distributed_optimizer=True),
                        {"checkpoint": {"load": saved_at_10}}),
                  merge(layout_overrides(root / "dp8_clipped", steps=4, use_distributed_optimizer=True,
                                         ddp_bucket_size=10**9), ALWAYS_CLIPPED)])  # one bucket, 7 ranks own none
    _in_one_thread(merge(layout_overrides(root / "tp1_pp1_dp1"), {"checkpoint": {"load": saved_at_10}}))
    return root


@pytest.mark.slow  # eight ranks on 2 cores (the resharded fixture)
def test_tp2_pp2_dp2_matches_one_process(resharded):
    assert_same_curve(curve(resharded / "tp2_pp2_dp2" / "metrics.jsonl"),
                      curve(resharded / "one_process" / "metrics.jsonl"))
    files = sorted(path.name for path in (resharded / "checkpoints" / "iter_0000010").glob("*.distcp"))
    assert files == [f"__{rank}_0.distcp" for rank in range(8)]


@pytest.mark.slow  # eight ranks on 2 cores (the resharded fixture)
@pytest.mark.parametrize("layout", ["tp1_pp2_dp4", "tp1_pp1_dp8", "tp1_pp1_dp1"])
def test_resume_at_another_layout_continues_the_curve(resharded, layout):
    resumed = curve(resharded / layout / "metrics.jsonl")
    assert resumed[0][0] == 11
    reference = [record for record in curve(resharded / "one_process" / "metrics.jsonl") if record[0] > 10]
    assert_same_curve(resumed, reference)


@pytest.mark.slow  # eight ranks on 2 cores (the resharded fixture)
@pytest.mark.parametrize("layout", ["tp1_pp2_dp4", "tp1_pp1_dp8", "tp1_pp1_dp1"])
def test_resume_at_another_layout_continues_the_per_source_token_counts(resharded, layout):
    def counts(path: Path) -> list[tuple[int, int]]:
        return [(r["step"], r["sources"]["mock"]["tokens_total"]) for r in read_metrics(path) if "loss" in r]

    reference = [count for count in counts(resharded / "one_process" / "metrics.jsonl") if count[0] > 10]
    assert counts(resharded / layout / "metrics.jsonl") == reference
    assert reference[0] == (11, 11 * 8 * 16)  # every token of 11 global batches of 8 samples of 16 tokens


def test_vocabulary_padded_for_another_tp_size_loads_its_real_rows(tmp_path, caplog):
    save = tmp_path / "checkpoints"
    padded_128 = merge(layout_overrides(tmp_path / "a", steps=3), {"model": {"make_vocab_size_divisible_by": 128},
                                                                   "checkpoint": {"save": str(save)}})
    train(load_config(None, padded_128))
    saved = {"model": {"embedding.weight": torch.empty(128, 32), "output.weight": torch.empty(128, 32)},
             "optimizer": {"state": {"output.weight": {"exp_avg": torch.empty(128, 32)}}}}
    checkpoint.load(checkpoint.find(save), saved)
    padded_32 = merge(layout_overrides(tmp_path / "b", steps=5), {"model": {"make_vocab_size_divisible_by": 32},
                                                                  "checkpoint": {"load": str(save)}})
    with caplog.at_level(logging.WARNING):
        run = build_run(load_config(None, padded_32))
    assert run.model.embedding.weight.shape == (96, 32) and run.iteration == 3
    assert torch.equal(run.model.embedding.weight, saved["model"]["embedding.weight"][:96])
    assert torch.equal(run.model.output.weight, saved["model"]["output.weight"][:96])
    assert torch.equal(run.optimizer.state[run.model.output.weight]["exp_avg"],
                       saved["optimizer"]["state"]["output.weight"]["exp_avg"][:96])
    assert "padded vocabulary of 128, this layout pads it to 96" in caplog.text
    assert train(load_config(None, padded_32)).iteration == 5


@pytest.mark.slow  # eight ranks on 2 cores (the resharded fixture)
def test_dp8_zero1_clips_on_ranks_that_own_no_bucket(resharded):
    """Eight DP ranks share one bucket: clipping must skip the ranks with nothing to scale."""
    clipped = curve(resharded / "dp8_clipped" / "metrics.jsonl")
    assert all(record[2] > 0.01 for record in clipped if len(record) == 3 and isinstance(record[1], float))
    assert_same_curve(clipped, curve(resharded / "one_process_clipped" / "metrics.jsonl"))
