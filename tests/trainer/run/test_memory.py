"""The memory estimate made before the model is built: absurd shapes and models too big for the machine are
refused in one line naming the estimate, what is available and the knobs; a real out-of-memory is caught too."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import sys

import pytest
import torch
from click.testing import CliRunner

import trainer.run.memory
from cli.trainer import main
from corpus.core.errors import ConfigError
from tests.conftest import assert_exited
from tests.trainer.conftest import tiny_config
from trainer.model.attention import BACKENDS
from trainer.model.gpt import GPT
from trainer.parallel.state import ParallelState
from trainer.parallelize.layout import stage_spec, whole_model_counts
from trainer.run.memory import check_memory, estimate_memory

TINY = ["--mock-data", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
        "--ffn-hidden-size", "64", "--vocab-size", "96", "--micro-batch-size", "1", "--eval-iters", "0",
        "--train-iters", "1"]


def estimate(config, seq_length: int = 16, vocab: int = 128):
    cpu = ParallelState(torch.device("cpu"))
    counts = whole_model_counts(config.model, vocab, seq_length, BACKENDS["math"])
    return estimate_memory(config, cpu, counts, vocab, seq_length, 4, "math", False), cpu


def test_the_estimate_counts_weights_gradients_adam_and_activations(tmp_path):
    config = tiny_config(tmp_path)
    small, _ = estimate(config)
    params = whole_model_counts(config.model, 128, 16, BACKENDS["math"])["total"]
    assert (small.weights, small.gradients, small.optimizer) == (4 * params, 4 * params, 8 * params)
    recomputed, _ = estimate(tiny_config(tmp_path, model={"recompute_granularity": "full"}), seq_length=4096)
    kept, _ = estimate(config, seq_length=4096)
    assert recomputed.activations < kept.activations and recomputed.attention_scores < kept.attention_scores
    zero, _ = estimate(tiny_config(tmp_path, optim={"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}))
    assert zero.optimizer == small.optimizer // 2


def test_an_8b_model_on_a_24_gb_machine_is_refused_naming_estimate_available_and_knobs(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer.run.memory, "available_bytes", lambda parallel: (24 * 10**9, "available here"))
    config = tiny_config(tmp_path, model={"preset": "8b", "num_layers": None, "hidden_size": None,
                                          "num_attention_heads": None, "num_query_groups": None,
                                          "ffn_hidden_size": None})
    found, cpu = estimate(config, vocab=128256)
    with pytest.raises(ConfigError) as refused:
        check_memory(config, found, cpu)
    message = str(refused.value)
    assert "needs about" in message and "weights 32.1 GB" in message and "24.0 GB is available here" in message
    assert "--micro-batch-size" in message and "--recompute-granularity full" in message
    assert "--no-check-memory" in message
    check_memory(tiny_config(tmp_path, training={"check_memory": False}), found, cpu)  # the override


@contextlib.contextmanager
def address_space_capped(headroom_bytes: int = 16 << 30):
    """Cap this process's address space at what it maps now plus ``headroom_bytes``: an allocation of the size a
    test means to refuse then fails at once, whether or not the machine overcommits memory, and never takes the
    machine's memory (a 300k-token attention is about 1.4 TB)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    mapped = int(status["VmSize"].split()[0]) * 1024
    cap = mapped + headroom_bytes if hard == resource.RLIM_INFINITY else min(hard, mapped + headroom_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


needs_linux = pytest.mark.skipif(sys.platform != "linux", reason="needs Linux (/proc/self/status, RLIMIT_AS)")


@needs_linux
def test_an_absurd_sequence_length_is_refused_before_the_model_is_built():
    with address_space_capped():  # were the estimate skipped, the run would try ~16 TB of attention scores
        result = CliRunner().invoke(main, ["run", *TINY, "--seq-length", "1000000"])
    assert_exited(result, 1)
    assert "needs about" in result.output and "attention scores" in result.output and "--seq-length" in result.output


@needs_linux
def test_a_real_cpu_out_of_memory_is_caught_like_a_cuda_one():
    """With the estimate skipped, torch's CPU allocator fails (a RuntimeError, not torch.OutOfMemoryError)."""
    with address_space_capped():
        result = CliRunner().invoke(main, ["run", *TINY, "--seq-length", "300000", "--no-check-memory"])
    assert_exited(result, 1)
    assert "out of memory at step 1" in result.output and "--micro-batch-size" in result.output


VOCAB, SEQ = 128, 16


def at_layout(config, tp: int = 1, pp: int = 1, dp: int = 1, seq_length: int = SEQ, attention: str = "math",
              fused_loss: bool = False):
    """The estimate for the first rank of a TP × PP × DP layout (what :func:`check_memory` compares)."""
    parallel = ParallelState(torch.device("cpu"), tp_size=tp, pp_size=pp, dp_size=dp)
    counts = whole_model_counts(config.model, VOCAB, seq_length, BACKENDS["math"])
    return estimate_memory(config, parallel, counts, VOCAB, seq_length, 4, attention, fused_loss)


def largest_rank_parameters(config, tp: int, pp: int) -> int:
    """Parameters the fullest rank of the layout really holds: every stage of it built (on the meta device)."""
    sizes = []
    for stage in range(pp):
        parallel = ParallelState(torch.device("meta"), tp_size=tp, pp_size=pp, rank=stage * tp)
        with torch.device("meta"):
            model = GPT(config.model, VOCAB, SEQ, parallel, BACKENDS["math"], stage_spec(config.model.num_layers,
                                                                                     pp, stage))
        sizes.append(sum(p.numel() for p in model.parameters()))
    return max(sizes)


@pytest.mark.parametrize("tp, pp", [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_the_weights_are_what_the_fullest_rank_of_the_layout_builds(tmp_path, tp: int, pp: int):
    """TP splits every matrix but the norms, PP the layers and one of the two vocabulary matrices per end stage:
    within 1% of the parameters each rank builds (the replicated norm scales are what the estimate leaves out)."""
    config = tiny_config(tmp_path)
    found = at_layout(config, tp=tp, pp=pp)
    real = largest_rank_parameters(config, tp, pp)
    assert found.weights == 4 * (found.weights // 4) and abs(found.weights // 4 - real) <= 0.01 * real
    assert found.gradients == found.weights  # fp32 master weights: fp32 gradients


def test_gradients_follow_the_master_weights_unless_accumulated_in_fp32(tmp_path):
    fp32 = at_layout(tiny_config(tmp_path))
    bf16 = at_layout(tiny_config(tmp_path, optim={"main_params_dtype": "bf16"}))
    accumulated = at_layout(tiny_config(tmp_path, optim={"main_params_dtype": "bf16"},
                                        parallel={"accumulate_allreduce_grads_in_fp32": True}))
    assert bf16.weights == fp32.weights // 2 and bf16.gradients == fp32.gradients // 2
    assert accumulated.weights == bf16.weights and accumulated.gradients == fp32.gradients


def test_zero1_divides_the_adam_moments_over_data_parallel_ranks_and_plain_dp_does_not(tmp_path):
    alone = at_layout(tiny_config(tmp_path))
    replicated = at_layout(tiny_config(tmp_path), dp=4)
    zero1 = at_layout(tiny_config(tmp_path, parallel={"use_distributed_optimizer": True}), dp=4)
    assert replicated == alone
    assert zero1.optimizer == alone.optimizer // 4
    assert (zero1.weights, zero1.gradients, zero1.activations) == (alone.weights, alone.gradients, alone.activations)


def test_the_activations_of_a_block_are_counted_value_by_value(tmp_path):
    """Per token and block: 6 × hidden whole (norm inputs and outputs, residual) and, split over TP, 2 × hidden
    (query, attention output) + 2 × groups × head_dim (keys, values) + 3 × ffn (SwiGLU's gate, up, product).
    The tiny model: 6·32 + (2·32 + 2·2·8 + 3·64) / TP = 192 + 288 / TP values."""
    config = tiny_config(tmp_path)
    tokens_kept = config.model.num_layers * config.training.micro_batch_size * SEQ
    assert at_layout(config).activations == tokens_kept * (192 + 288) * 4
    assert at_layout(config, tp=2).activations == tokens_kept * (192 + 144) * 4
    found = at_layout(config, tp=2, pp=2, dp=2)
    assert all(isinstance(getattr(found, part.name), int) for part in dataclasses.fields(found))  # whole bytes


def test_tensor_parallelism_splits_the_heads_ffn_and_logits_but_not_the_residual_stream(tmp_path):
    config = tiny_config(tmp_path)
    whole, split = at_layout(config), at_layout(config, tp=2)
    assert split.attention_scores == whole.attention_scores // 2 and split.logits == whole.logits // 2
    # the norms' inputs and outputs and the residual (6 × hidden per token) stay whole on every TP rank
    residual = config.model.num_layers * config.training.micro_batch_size * SEQ * 6 * config.model.hidden_size * 4
    assert split.activations - residual == (whole.activations - residual) // 2


def test_pipeline_stages_keep_the_activations_of_all_layers(tmp_path):
    """1F1B keeps up to PP micro-batches in flight on the first stage, each for its L / PP layers."""
    config = tiny_config(tmp_path)
    whole, staged = at_layout(config), at_layout(config, pp=2)
    assert (staged.activations, staged.attention_scores) == (whole.activations, whole.attention_scores)
    assert staged.weights < whole.weights


def test_full_recompute_keeps_each_blocks_input_and_one_blocks_activations(tmp_path):
    config = tiny_config(tmp_path)
    kept = at_layout(config)
    recomputed = at_layout(tiny_config(tmp_path, model={"recompute_granularity": "full"}))
    layers = config.model.num_layers
    block_inputs = layers * config.training.micro_batch_size * SEQ * config.model.hidden_size * 4
    assert recomputed.activations == block_inputs + kept.activations // layers
    assert recomputed.attention_scores == kept.attention_scores // layers


def test_scores_count_only_for_the_math_kernel_and_logits_only_without_the_fused_loss(tmp_path):
    config = tiny_config(tmp_path)
    math = at_layout(config)
    fused = at_layout(config, attention="cudnn", fused_loss=True)
    micro_batch, heads = config.training.micro_batch_size, config.model.num_attention_heads
    assert math.attention_scores == config.model.num_layers * micro_batch * heads * SEQ * SEQ * 4 * 2
    assert math.logits == micro_batch * SEQ * VOCAB * 4 * 2
    assert (fused.attention_scores, fused.logits) == (0, 0)
    assert fused.total == math.total - math.attention_scores - math.logits


def test_the_machines_memory_is_shared_by_the_processes_of_this_host(monkeypatch):
    world = ParallelState(torch.device("cpu"), tp_size=2, dp_size=2)
    alone, where = trainer.run.memory.available_bytes(ParallelState(torch.device("cpu")))
    shared, shared_where = trainer.run.memory.available_bytes(world)
    assert where == "available on this machine" and "shared by 4 processes" in shared_where
    page = os.sysconf("SC_PAGE_SIZE")  # MemAvailable (kB) in bytes: above the free pages, below all of them
    assert page * os.sysconf("SC_AVPHYS_PAGES") // 2 <= alone <= page * os.sysconf("SC_PHYS_PAGES")
    assert abs(shared - alone // 4) < alone // 40  # MemAvailable moves a little between the two reads
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two nodes of two processes each
    half, half_where = trainer.run.memory.available_bytes(world)
    assert abs(half - alone // 2) < alone // 20 and "shared by 2 processes" in half_where


def test_memory_that_cannot_be_read_is_unknown(monkeypatch):
    def unreadable(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/proc/meminfo")

    monkeypatch.setattr(trainer.run.memory, "open", unreadable, raising=False)
    assert trainer.run.memory.available_bytes(ParallelState(torch.device("cpu"))) == (None, "unknown")


def test_a_run_that_fits_or_whose_available_memory_is_unknown_is_let_through(tmp_path, monkeypatch):
    config = tiny_config(tmp_path)
    found, cpu = estimate(config)
    monkeypatch.setattr(trainer.run.memory, "available_bytes", lambda parallel: (found.total, "available here"))
    check_memory(config, found, cpu)  # exactly what is needed: fits
    monkeypatch.setattr(trainer.run.memory, "available_bytes", lambda parallel: (found.total - 1, "available here"))
    with pytest.raises(ConfigError, match="needs about"):
        check_memory(config, found, cpu)
    monkeypatch.setattr(trainer.run.memory, "available_bytes", lambda parallel: (None, "unknown"))
    check_memory(config, found, cpu)
