"""What both baselines share: the shape they train, how a configuration is timed and recorded, and the loop over
configurations that writes ``$OUT/<name>.json``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bench.timing import seconds_per_call, write_results
from trainer.config.presets import PRESETS

#: The dense bf16 peak of an H100/H200, MFU's denominator (the trainer's convention too).
PEAK_FLOPS = 989e12
#: Untimed steps first (compilation, allocator growth, FP8 scales settling).
WARMUP_STEPS = 3


@dataclass(frozen=True)
class Shape:
    """A GPT's size and batch: ``layers`` blocks of width ``hidden`` with ``heads`` heads (no grouped-query
    attention) and a SwiGLU FFN of ``ffn``; ``micro_batch`` sequences of ``seq`` tokens a step."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    seq: int
    micro_batch: int

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq


def speed_shape() -> Shape:
    """The trainer's speed shape: the ``1.3b`` preset at seq 4096, micro-batch 4, vocabulary 32768."""
    preset = PRESETS["1.3b"]
    assert preset.num_query_groups == preset.num_attention_heads, "the baselines have no grouped-query attention"
    return Shape(vocab=32768, hidden=preset.hidden_size, layers=preset.num_layers, heads=preset.num_attention_heads,
                 ffn=preset.ffn_hidden_size, seq=4096, micro_batch=4)


def next_token_step(forward: Callable[[torch.Tensor], torch.Tensor], tokens: torch.Tensor,
                    optimizer: torch.optim.Optimizer,
                    precision: Callable[[], AbstractContextManager]) -> Callable[[], torch.Tensor]:
    """One training step on ``tokens`` [B, S + 1]: ``forward`` of the first S under ``precision()``, the next-token
    cross entropy in fp32, backward, the optimizer's step; returns the loss."""

    def step() -> torch.Tensor:
        with precision():
            logits = forward(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def train_record(model: torch.nn.Module, step: Callable[[], torch.Tensor], shape: Shape, steps: int) -> dict:
    """Time ``steps`` calls of ``step`` (one optimizer step, returning the loss) after :data:`WARMUP_STEPS`; the
    model's parameters (M), tokens/s, MFU (``6·N + 12·L·d·S`` FLOPs a token, N without the embedding, against
    :data:`PEAK_FLOPS`), seconds a step, peak memory (GiB) and the last loss."""
    seconds, loss = seconds_per_call(step, steps, WARMUP_STEPS)
    parameters = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * (parameters - shape.vocab * shape.hidden) + 12 * shape.layers * shape.hidden * shape.seq
    tokens_per_s = shape.tokens / seconds
    memory = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    return {"params_M": round(parameters / 1e6), "tok_s": round(tokens_per_s),
            "mfu_vs_989": round(flops_per_token * tokens_per_s / PEAK_FLOPS, 3), "step_s": round(seconds, 3),
            "mem_GB": round(memory, 1), "loss": round(float(loss.detach()), 3)}


def free_memory() -> None:
    """Give the allocator's cache back and restart the peak, so each configuration's memory is its own."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def run_all(name: str, runs: dict[str, Callable[[], dict]], results: dict | None = None) -> dict:
    """Each of ``runs`` in turn (a failure, e.g. a missing torchao, is recorded as its result and the next runs),
    printed as it ends; everything, after ``results``, into ``$OUT/<name>.json``."""
    results = dict(results or {})
    for tag, run in runs.items():
        try:
            results[tag] = run()
        except Exception as error:  # reported in the results: the other configurations still run
            results[tag] = f"failed: {error!r}"[:400]
        print(f"{tag}: {results[tag]}", flush=True)
        free_memory()
    write_results(name, results)
    return results
