"""Causal attention (SDPA's cuDNN kernel, the trainer's on Hopper) at the 1.3b speed shape (batch 4, 4,096 tokens, 16
heads of 128, bf16) for the memory layouts q, k, v and the output gradient could have: is the trainer's the fastest?

    python3 bench/attention_layouts.py      # one H200

Layouts: the trainer's (q and k fresh from the rotary kernel, [B, S, H, D] contiguous; v a strided slice of the
fused QKV output; the output gradient [B, S, H·D] from the attention-out GEMM); all three [B, S, H, D] contiguous;
all three slices of one fused [B, S, H, 3, D] tensor; and [B, H, S, D] contiguous (cuDNN's native order; the
model would pay a transpose each way to get there). Forward alone and forward + backward, µs per call, the median
over 9 interleaved rounds of 10 back-to-back calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import report_interleaved  # noqa: E402

BATCH, SEQ, HEADS, HEAD_DIM = 4, 4096, 16, 128
ROUNDS = 9


def layouts() -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Label -> (q, k, v, output gradient), each [B, H, S, D] as SDPA takes them, in that memory layout."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    fused = torch.randn(BATCH, SEQ, HEADS, 3, HEAD_DIM, **bf16)
    heads_first = [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, **bf16) for _ in range(4)]

    def sequence_first(t: torch.Tensor) -> torch.Tensor:  # [B, S, H, D] storage seen as [B, H, S, D]
        return t.transpose(1, 2)

    q, k, v = fused.unbind(3)
    grad_out = torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, **bf16)
    return {
        "trainer's (q, k contiguous; v strided)": tuple(sequence_first(t) for t in (q.contiguous(), k.contiguous(), v,
                                                                                    grad_out)),
        "[B, S, H, D] contiguous": tuple(sequence_first(t.contiguous()) for t in (q, k, v, grad_out)),
        "slices of one [B, S, H, 3, D]": tuple(sequence_first(t) for t in (q, k, v, grad_out)),
        "[B, H, S, D] contiguous": tuple(heads_first),
    }


def passes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           grad_out: torch.Tensor) -> tuple[Callable[[], object], Callable[[], object]]:
    """(forward alone, forward + backward) over these inputs."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

    def forward() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    out = forward()
    if out.stride() != grad_out.stride():  # NOTE: the gradient arrives in the output's layout (the trainer's does)
        print(f"output strides {out.stride()} differ from the gradient's {grad_out.stride()}: copied once")
        grad_out = torch.empty_like(out).copy_(grad_out)

    def forward_backward() -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(forward(), (q, k, v), grad_out)

    return forward, forward_backward


def main() -> None:
    table = {}
    for label, tensors in layouts().items():
        forward, forward_backward = passes(*tensors)
        table[f"{label}: forward"] = forward
        table[f"{label}: forward + backward"] = forward_backward
    trainers = next(iter(table)).split(":")[0]  # each pass against the trainer's layout's
    report_interleaved("attention_layouts", table, lambda label: trainers + ":" + label.split(":")[1], ROUNDS,
                       calls=10)


if __name__ == "__main__":
    main()
