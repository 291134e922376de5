"""Tensor, sequence, pipeline (1F1B and interleaved) and data parallelism (plain and ZeRO-1) on 2 CPU
ranks (gloo): 20 steps of each layout give the losses, gradient norms and evaluation losses of one
process, within :data:`~tests.trainer.parallelize.support.RELATIVE_TOLERANCE` (bf16 weights under ZeRO-1:
within :data:`BF16_NOISE`). One spawn of 2 ranks runs
every layout in turn (see ``two_rank_runs``), and the fused loss with full recompute under the
interleaved pipeline. On the shipped two-source blend, each source's loss and tokens under DP 2, TP 2 with
sequence parallelism (the vocabulary-parallel loss) and PP 2 with the fused loss equal one process's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.trainer.conftest import read_metrics
from tests.trainer.parallelize.support import (
    RELATIVE_TOLERANCE,
    assert_same_curve,
    curve,
    layout_overrides,
    run_ranks,
)
from trainer.checkpoint import store as checkpoint
from trainer.checkpoint.state_dict import named_parameters
from trainer.config.loading import load_config, merge
from trainer.config.schema import ModelConfig
from trainer.optim.optimizer import clipped_step
from trainer.run.build import build_run, model_vocab_size
from trainer.run.loop import train, train_step

#: Every case here waits for ``two_rank_runs`` (all layouts on 2 ranks, about a minute and a half on 2 cores) or
#: compiles FP8 blocks: the suite's second step (``pytest -m slow``) runs them.
pytestmark = pytest.mark.slow

LAYOUTS = {
    "tp2": {"tensor_model_parallel_size": 2},
    "tp2_sequence_parallel": {"tensor_model_parallel_size": 2, "sequence_parallel": True},
    "pp2_1f1b": {"pipeline_model_parallel_size": 2},
    "pp2_interleaved": {"pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": 1},
    "dp2": {},
    "dp2_zero1_overlapped": {"use_distributed_optimizer": True, "overlap_grad_reduce": True,
                             "overlap_param_gather": True, "ddp_bucket_size": 3000},
}
CL100K = {"model": {"vocab_size": 100_277, "make_vocab_size_divisible_by": 128}}  # cl100k_base's id count
#: bf16 weights and moments (no fp32 copy): gradients accumulate and reduce in bf16, rounding is stochastic.
BF16_WEIGHTS = {"optim": {"main_params_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
                "training": {"precision": "bf16"}}
#: ... with gradients accumulated over micro-batches and reduced over DP in fp32 buffers (``main_grad``).
FP32_GRADS = merge(BF16_WEIGHTS, {"parallel": {"accumulate_allreduce_grads_in_fp32": True}})
#: The single-GPU levers on the last pipeline stage and in every chunk: the fused chunked loss and full recompute.
FUSED_RECOMPUTE = {"model": {"cross_entropy_loss_fusion": True, "recompute_granularity": "full"}}
#: How far two bf16 runs of the same model may drift apart over these 20 steps (seen: 0.7% at most).
BF16_NOISE = 0.02
#: The per-source runs on the shipped blend, by name: their layouts (the fused loss under the pipeline).
BLEND_LAYOUTS = {"blend_dp2": {}, "blend_tp2_sequence_parallel": LAYOUTS["tp2_sequence_parallel"],
                 "blend_pp2_fused_loss": LAYOUTS["pp2_1f1b"]}


def blend_layout(folder: Path, blend: Path, **parallel) -> dict:
    """:func:`layout_overrides` for 10 steps on the shipped blend (web and code, 8192 token ids: no padding at
    TP 2), 16 fixed validation samples per source."""
    fused = bool(parallel.get("pipeline_model_parallel_size"))
    return merge(layout_overrides(folder, steps=10, **parallel), {
        "data": {"mock_data": False, "blend": str(blend), "seq_length": 32, "data_cache_path": str(folder / "maps")},
        "model": {"vocab_size": 8192, "cross_entropy_loss_fusion": fused}, "logging": {"eval_samples_per_source": 16}})


def zero_probe(overrides: dict, out: str) -> None:
    """On each rank: which parameters have optimizer state, whether the gradient buckets were launched
    during the backward pass, and a checksum of the weights after two steps."""
    run = build_run(load_config(None, overrides))
    engine = run.engine
    train_step(run)
    batches = [next(run.batches("train")) for _ in range(run.accumulation)]
    engine.reducer.start_step()
    engine._run(batches, engine.global_tokens(batches), backward=True)
    launched_in_backward = [bucket.launched for bucket in engine.reducer.buckets]
    engine.reducer.finish()
    clipped_step(run.optimizer, engine.reducer.global_norm(), 1.0, torch.tensor(True))
    engine.reducer.gather_weights()
    engine.reducer.wait_weights()
    state = [name for name, _, param in named_parameters(engine.chunks) if run.optimizer.state.get(param)]
    checksum = sum(float(param.double().sum()) for param in run.model.parameters())
    Path(out, f"{dist.get_rank()}.json").write_text(json.dumps(
        {"state": state, "launched": launched_in_backward, "checksum": checksum,
         "params": [name for name, _, _ in named_parameters(engine.chunks)]}))


def stop_probe(overrides: dict, out: str) -> None:
    """Rank 1 alone reaches --exit-duration-in-mins 0 after step 1 (time-based stops differ between ranks);
    each rank records where it stopped."""
    if dist.get_rank() == 1:
        overrides = merge(overrides, {"training": {"exit_duration_in_mins": 0.0}})
    result = train(load_config(None, overrides))
    Path(out, f"{dist.get_rank()}.json").write_text(json.dumps([result.iteration, result.stopped_by]))


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory, sample_blend, one_process_layout_run) -> Path:
    """Every layout of :data:`LAYOUTS` (and cl100k at TP 2, :data:`BLEND_LAYOUTS`, and the ZeRO-1 probe) on 2
    ranks, plus the one-process references (``one_process``: the session's, shared with the checkpoint layout
    tests)."""
    root = tmp_path_factory.mktemp("layouts")
    (root / "one_process").symlink_to(one_process_layout_run)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(load_config(None, merge(layout_overrides(root / "one_process_cl100k", steps=3), CL100K)))
        train(load_config(None, merge(layout_overrides(root / "one_process_bf16_weights"), BF16_WEIGHTS)))
        train(load_config(None, merge(layout_overrides(root / "one_process_fp32_grads"), FP32_GRADS)))
        train(load_config(None, blend_layout(root / "one_process_blend", sample_blend)))
    finally:
        torch.set_num_threads(threads)
    (root / "zero_probe").mkdir()
    jobs = [layout_overrides(root / name, **layout) for name, layout in LAYOUTS.items()]
    jobs.append(merge(layout_overrides(root / "tp2_cl100k", steps=3, tensor_model_parallel_size=2), CL100K))
    jobs += [blend_layout(root / name, sample_blend, **layout) for name, layout in BLEND_LAYOUTS.items()]
    jobs.append(merge(layout_overrides(root / "pp2_interleaved_fused_recompute", **LAYOUTS["pp2_interleaved"]),
                      FUSED_RECOMPUTE))
    jobs.append(merge(layout_overrides(root / "dp2_zero1_bf16_weights", **LAYOUTS["dp2_zero1_overlapped"]),
                      BF16_WEIGHTS))
    jobs.append(merge(layout_overrides(root / "dp2_zero1_fp32_grads", **LAYOUTS["dp2_zero1_overlapped"]), FP32_GRADS))
    jobs.append((zero_probe, {"overrides": layout_overrides(root / "probe", **LAYOUTS["dp2_zero1_overlapped"]),
                              "out": str(root / "zero_probe")}))
    (root / "stop_probe").mkdir()
    jobs.append((stop_probe, {"overrides": merge(layout_overrides(root / "stop", pipeline_model_parallel_size=2),
                                                 {"checkpoint": {"save": str(root / "stop_checkpoints")}}),
                              "out": str(root / "stop_probe")}))
    run_ranks(2, jobs)
    return root


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_matches_one_process(two_rank_runs, name):
    reference = curve(two_rank_runs / "one_process" / "metrics.jsonl")
    assert len(reference) == 20 + 3  # 20 steps, valid at 10 and 20, test at 20
    assert_same_curve(curve(two_rank_runs / name / "metrics.jsonl"), reference)


@pytest.mark.parametrize("name", BLEND_LAYOUTS)
def test_per_source_losses_and_tokens_match_one_process(two_rank_runs, name):
    reference = read_metrics(two_rank_runs / "one_process_blend" / "metrics.jsonl")
    actual = read_metrics(two_rank_runs / name / "metrics.jsonl")
    assert [(r["step"], "loss" in r) for r in actual] == [(r["step"], "loss" in r) for r in reference]
    assert len(reference) == 10 + 1  # 10 steps, valid at 10 (the blend gives test no share)
    for got, want in zip(actual, reference):
        assert got["sources"].keys() == want["sources"].keys() == {"web", "code"}
        for source, numbers in want["sources"].items():
            assert got["sources"][source]["loss"] == pytest.approx(numbers["loss"], rel=RELATIVE_TOLERANCE)
            assert {**got["sources"][source], "loss": None} == {**numbers, "loss": None}  # tokens, share: exact
    assert reference[-1]["sources"]["code"]["tokens"] == 16 * 32


def test_bf16_weights_under_zero1_train_like_one_process(two_rank_runs):
    """bf16 gradients reduced over DP (gloo/NCCL in bf16), bucket buffers and broadcast weights in bf16, each
    rank's share of the stochastically rounded update: the curve of one process within bf16 noise (the
    gradients sum in another order, and each rank's optimizer numbers its parameters, so its random bits,
    differently)."""
    reference = curve(two_rank_runs / "one_process_bf16_weights" / "metrics.jsonl")
    assert len(reference) == 20 + 3
    assert_same_curve(curve(two_rank_runs / "dp2_zero1_bf16_weights" / "metrics.jsonl"), reference, rel=BF16_NOISE)


def test_fp32_gradient_accumulation_trains_like_bf16_and_alike_under_zero1(two_rank_runs):
    """``--accumulate-allreduce-grads-in-fp32`` with bf16 weights: one process (8 micro-batches summed into fp32
    buffers) trains like bf16 accumulation within bf16 noise, and DP 2 + ZeRO-1 (fp32 buckets reduced over
    gloo, bf16 weights broadcast) like that one process."""
    fp32_grads = curve(two_rank_runs / "one_process_fp32_grads" / "metrics.jsonl")
    assert len(fp32_grads) == 20 + 3
    assert_same_curve(fp32_grads, curve(two_rank_runs / "one_process_bf16_weights" / "metrics.jsonl"), rel=BF16_NOISE)
    assert_same_curve(curve(two_rank_runs / "dp2_zero1_fp32_grads" / "metrics.jsonl"), fp32_grads, rel=BF16_NOISE)


def test_fused_loss_and_recompute_under_interleaved_pipeline_match_one_process(two_rank_runs):
    assert_same_curve(curve(two_rank_runs / "pp2_interleaved_fused_recompute" / "metrics.jsonl"),
                      curve(two_rank_runs / "one_process" / "metrics.jsonl"))


def test_comparison_covers_clipped_and_unclipped_steps(two_rank_runs):
    norms = [record[2] for record in curve(two_rank_runs / "one_process" / "metrics.jsonl") if len(record) == 3
             and isinstance(record[1], float)]
    assert min(norms) < 0.8 < max(norms)  # --clip-grad 0.8 scales some steps' gradients and not others


def test_cl100k_vocabulary_at_tp2(two_rank_runs):
    assert model_vocab_size(ModelConfig(vocab_size=100_277), None, 2) == 100_352  # multiple of 128 × 2
    assert_same_curve(curve(two_rank_runs / "tp2_cl100k" / "metrics.jsonl"),
                      curve(two_rank_runs / "one_process_cl100k" / "metrics.jsonl"))


def test_zero1_partitions_optimizer_state_and_keeps_weights_in_sync(two_rank_runs):
    ranks = [json.loads((two_rank_runs / "zero_probe" / f"{rank}.json").read_text()) for rank in range(2)]
    first, second = set(ranks[0]["state"]), set(ranks[1]["state"])
    assert first and second and not first & second
    assert first | second == set(ranks[0]["params"])
    assert ranks[0]["checksum"] == ranks[1]["checksum"]
    for rank in ranks:  # --overlap-grad-reduce: every bucket was sent during the backward pass
        assert all(rank["launched"]) and len(rank["launched"]) >= 4


def test_a_stop_seen_by_one_rank_stops_every_rank_at_the_same_step(two_rank_runs):
    ranks = [json.loads((two_rank_runs / "stop_probe" / f"{rank}.json").read_text()) for rank in range(2)]
    assert ranks == [[1, "another rank asked to stop"], [1, "--exit-duration-in-mins reached"]]
    assert checkpoint.complete_iterations(two_rank_runs / "stop_checkpoints") == [1]


#: FP8 emulated on CPU (scaled_mm), blocks compiled: each TP shard has its own FP8 scales, so runs agree
#: to FP8 rounding, not to RELATIVE_TOLERANCE. On two H200s this mix once trained with near-zero block
#: gradients (in-place collectives under compile, bench/RESULTS.md).
FP8_COMPILED = {"fp8": {"fp8_format": "hybrid", "fp8_recipe": "tensorwise", "fp8_backend": "scaled_mm",
                        "fp8_min_dim": 16}, "model": {"compile": "blocks"}}
FP8_TOLERANCE = 1e-2


def train_fp8_on_cpu(overrides: dict) -> None:
    """``train`` with the FP8 hardware check lifted: torch's CPU ``_scaled_mm`` emulates the FP8 GEMMs."""
    from trainer.fp8 import backends

    backends.check_hardware = lambda device: None
    train(load_config(None, overrides))


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed"])  # delayed: its own fc1 + SwiGLU function
def test_compiled_fp8_blocks_under_sequence_parallelism_match_one_process(tmp_path, recipe):
    fp8 = merge(FP8_COMPILED, {"fp8": {"fp8_recipe": recipe}})
    runs = {name: merge(layout_overrides(tmp_path / name, steps=6, **layout), fp8)
            for name, layout in (("one", {}), ("tp2_sp", LAYOUTS["tp2_sequence_parallel"]))}
    run_ranks(1, [(train_fp8_on_cpu, {"overrides": runs["one"]})])
    run_ranks(2, [(train_fp8_on_cpu, {"overrides": runs["tp2_sp"]})])
    assert_same_curve(curve(tmp_path / "tp2_sp" / "metrics.jsonl"), curve(tmp_path / "one" / "metrics.jsonl"),
                      rel=FP8_TOLERANCE)
