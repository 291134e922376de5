"""fc2's weight gradient of the 1.3b preset (dy.T @ h: 2,048 × 5,632 from 16,384 tokens, bf16) as one cuBLAS GEMM
against the same product with its ragged last wave split along the tokens.

    python3 bench/wgrad_last_wave.py      # one H200

One GEMM makes 352 of cuBLAS's 128 × 256 output tiles on 132 SMs: 2.67 waves, a third of the last one idle (in a
training step it ran at 688 TFLOP/s against ~745 for the other GEMMs, bench/train_h200.md, session 15). The split
computes the first 1,536 rows (264 tiles: two full waves) as one GEMM and the last 512 rows (88 tiles) as a batch
of s GEMMs over token slices (s = 2, 4, 8) with fp32 outputs, summed into bf16 after: s × 88 shorter tiles to fill
the third wave. µs per call, the median over 9 interleaved rounds of 20 back-to-back calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import report_interleaved  # noqa: E402

TOKENS, HIDDEN, FFN = 16384, 2048, 5632
FULL_ROWS = 1536  # 12 rows of 128-row tiles × 22 columns of 256 = 264 tiles, two waves on 132 SMs
ROUNDS = 9


def products() -> dict[str, Callable[[], torch.Tensor]]:
    """Label -> one computation of fc2's weight gradient."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    dy, h = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(TOKENS, FFN, **bf16)
    out = torch.empty(HIDDEN, FFN, **bf16)

    def one_gemm() -> torch.Tensor:
        return torch.mm(dy.t(), h, out=out)

    def last_wave_split(splits: int) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            torch.mm(dy[:, :FULL_ROWS].t(), h, out=out[:FULL_ROWS])
            rest = dy[:, FULL_ROWS:].reshape(splits, TOKENS // splits, HIDDEN - FULL_ROWS).transpose(1, 2)
            partial = torch.bmm(rest, h.view(splits, TOKENS // splits, FFN), out_dtype=torch.float32)
            torch.sum(partial, dim=0, out=out[FULL_ROWS:])  # NOTE: fp32 sums, rounded to bf16 once
            return out
        return run

    table = {"one GEMM (cuBLAS)": one_gemm}
    for splits in (2, 4, 8):
        table[f"last wave split in {splits}"] = last_wave_split(splits)
    table["(first 1,536 rows alone)"] = lambda: torch.mm(dy[:, :FULL_ROWS].t(), h, out=out[:FULL_ROWS])
    return table


def main() -> None:
    table = products()
    reference = table["one GEMM (cuBLAS)"]().float()
    for label, call in table.items():  # the check that each computes the same product
        error = (call()[:FULL_ROWS if label.startswith("(") else None].float()
                 - reference[:FULL_ROWS if label.startswith("(") else None]).abs().max().item()
        print(f"{label}: max |diff| against one GEMM {error:.3e}")
    report_interleaved("wgrad_last_wave", table, lambda label: "one GEMM (cuBLAS)", ROUNDS)


if __name__ == "__main__":
    main()
