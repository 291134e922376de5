"""The 1.3b preset's MLP chains (16,384 tokens, d 2048, FFN 5632, bf16) over all tokens at once, as the trainer runs
them, against the same chains over slices of the tokens: does a slice's SwiGLU read its GEMM's output from L2?

    python3 bench/mlp_token_chunks.py      # one H200

Forward chain: fc1's GEMM, Inductor's SwiGLU kernel, fc2's GEMM. Backward chain: fc2's input gradient, our SwiGLU
backward kernel, fc1's input gradient (the weight gradients need all tokens and stay whole either way). Over all
16,384 tokens SwiGLU's forward reads 369 MB and its backward 553 MB, far more than the chip's 50 MB of L2; over a
slice of 2,048 tokens fc1's output is 46 MB and fc2's input gradient 23 MB, most of which the GEMM leaves in L2
for the kernel after it. The slices cost GEMM efficiency (smaller outputs, worse wave quantization): which wins?
Each chain is timed as µs per call, the median over 9 interleaved rounds of 20 back-to-back calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import report_interleaved  # noqa: E402
from trainer.model.swiglu import swiglu_backward, swiglu_values  # noqa: E402

TOKENS, HIDDEN, FFN = 16384, 2048, 5632
SLICES = (1, 2, 4, 8)
ROUNDS = 9


def token_slices(slices: int) -> list[slice]:
    """The token rows split into ``slices`` equal consecutive slices."""
    step = TOKENS // slices
    return [slice(start, start + step) for start in range(0, TOKENS, step)]


def chains() -> dict[str, Callable[[], object]]:
    """Label -> one forward or backward MLP chain over the tokens in that many slices."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x, w1 = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(2 * FFN, HIDDEN, **bf16) * 0.03
    w2, grad_out = torch.randn(HIDDEN, FFN, **bf16) * 0.03, torch.randn(TOKENS, HIDDEN, **bf16)
    fused = x @ w1.t()  # fc1's output as the forward saved it
    activation = torch.compile(swiglu_values, dynamic=False)  # the kernel Inductor writes inside a block
    fused_out, out, grad_in = torch.empty_like(fused), torch.empty_like(x), torch.empty_like(x)

    def forward(slices: int) -> torch.Tensor:
        for part in token_slices(slices):
            torch.mm(x[part], w1.t(), out=fused_out[part])
            torch.mm(activation(fused_out[part]), w2.t(), out=out[part])
        return out

    def backward(slices: int) -> torch.Tensor:
        for part in token_slices(slices):
            torch.mm(swiglu_backward(fused[part], grad_out[part] @ w2), w1, out=grad_in[part])
        return grad_in

    table = {}
    for direction, chain in (("forward", forward), ("backward", backward)):
        for slices in SLICES:
            table[f"{direction}, {slices} slice(s) of {TOKENS // slices} tokens"] = (
                lambda chain=chain, slices=slices: chain(slices))
    return table


def main() -> None:
    report_interleaved("mlp_token_chunks", chains(),
                       lambda label: label.split(",")[0] + f", 1 slice(s) of {TOKENS} tokens", ROUNDS)


if __name__ == "__main__":
    main()
