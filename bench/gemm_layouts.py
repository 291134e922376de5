"""bf16 GEMMs of the ``1.3b`` preset's MLP (16,384 tokens, d 2048, FFN 5632): for each product a linear's
forward and backward passes compute, the operand layout autograd uses beside alternatives (a weight stored
transposed, a product computed transposed), under cuBLAS and cuBLASLt, timed side by side in one run.

    python3 bench/gemm_layouts.py      # one H200

Prints µs per call, TFLOP/s and the ratio to autograd's layout under cuBLAS (torch's default) for each.
Results: ``bench/gemm_layouts.md``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import per_call_microseconds as microseconds  # noqa: E402

TOKENS, HIDDEN, FFN = 16384, 2048, 5632


def products() -> dict[str, list[tuple[str, Callable[[], torch.Tensor], int]]]:
    """Per product: (layout, call, FLOPs) with autograd's layout first."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x, w = torch.randn(TOKENS, FFN, **bf16), torch.randn(HIDDEN, FFN, **bf16)  # fc2's input and weight [out, in]
    w_t, dy = w.t().contiguous(), torch.randn(TOKENS, HIDDEN, **bf16)
    h, w1 = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(2 * FFN, HIDDEN, **bf16)  # fc1's input and weight
    dy1 = torch.randn(TOKENS, 2 * FFN, **bf16)
    fc2, fc1 = 2 * TOKENS * HIDDEN * FFN, 2 * TOKENS * HIDDEN * 2 * FFN
    return {
        "fc2 forward": [("x @ w.T", lambda: x @ w.t(), fc2),
                        ("x @ w_t (weight stored transposed)", lambda: x @ w_t, fc2)],
        "fc2 input gradient": [("dy @ w", lambda: dy @ w, fc2), ("dy @ w_t.T", lambda: dy @ w_t.t(), fc2),
                               ("(w.T @ dy.T).T", lambda: (w.t() @ dy.t()).t(), fc2)],
        "fc2 weight gradient": [("dy.T @ x", lambda: dy.t() @ x, fc2),
                                ("(x.T @ dy).T", lambda: (x.t() @ dy).t(), fc2),
                                ("(x.T @ dy).T, then contiguous", lambda: (x.t() @ dy).t().contiguous(), fc2)],
        "fc1 forward": [("h @ w1.T", lambda: h @ w1.t(), fc1)],
        "fc1 input gradient": [("dy1 @ w1", lambda: dy1 @ w1, fc1)],
        "fc1 weight gradient": [("dy1.T @ h", lambda: dy1.t() @ h, fc1)],
    }


def main() -> None:
    table = products()
    for product, layouts in table.items():
        reference = None
        for library in ("cublas", "cublaslt"):
            torch.backends.cuda.preferred_blas_library(library)
            for layout, call, flops in layouts:
                us = microseconds(call)
                reference = reference or us
                print(f"{product:20s} {library:9s} {layout:36s} {us:8.1f} µs {flops / us / 1e6:6.0f} TFLOP/s "
                      f"{reference / us:5.3f}×", flush=True)
    torch.backends.cuda.preferred_blas_library("cublas")


if __name__ == "__main__":
    main()
