"""The memory estimate made before the model is built: absurd shapes and models too big for the machine are
refused in one line naming the estimate, what is available and the knobs; a real out-of-memory is caught too."""

from __future__ import annotations

import contextlib
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
from trainer.parallel.state import ParallelState
from trainer.parallelize.layout import whole_model_counts
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
