"""The 1.3b MLP's GEMMs with SwiGLU in their epilogues (``trainer/swiglu_gemm.py``) against what a bf16 step
runs unfused: cuBLAS's GEMM, then SwiGLU's kernel (Inductor's forward, our Triton backward), side by side in
one run, over the fused kernels' launch shapes.

    python3 bench/swiglu_gemm.py [--tilings BMxBNxBKxSTAGESxWARPSxGROUP[xws],...]     # one H200

Prints µs per call (the median of 5 rounds of 20 back-to-back calls), TFLOP/s and the ratio to the unfused
pair, for the forward (fc1 + activation) and the backward (fc2's input gradient + the activation's
gradient); a shape that fails to compile prints its error. Results: ``bench/swiglu_gemm.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import per_call_microseconds as microseconds, write_results  # noqa: E402
from trainer.swiglu import swiglu_backward, swiglu_values  # noqa: E402
from trainer.swiglu_gemm import GemmTiling, kernels  # noqa: E402

TOKENS, HIDDEN, FFN = 16384, 2048, 5632
TILINGS = ("128x128x64x3x8x8,128x128x64x4x8x8,128x64x64x4x4x8,128x64x64x4x8x8,128x128x64x3x8x8xws,"
           "128x128x64x4x8x8xws,128x64x64x4x4x8xws,128x128x32x5x8x8,64x128x64x4x4x8,128x256x64x3x8x8,"
           "256x128x64x3x8x8,128x128x64x4x8x16")


def tiling(entry: str) -> GemmTiling:
    """A ``BMxBNxBKxSTAGESxWARPSxGROUP[xws]`` entry of ``--tilings``."""
    fields = entry.split("x")
    bm, bn, bk, stages, warps, group = (int(f) for f in fields[:6])
    return GemmTiling(bm, bn, bk, stages, warps, group, warp_specialize="ws" in fields[6:],
                      prefetch="pf" in fields[6:], programs_per_sm=2 if "2p" in fields[6:] else 1)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest difference over the largest magnitude."""
    return float((got.float() - expected.float()).abs().max() / expected.float().abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tilings", default=TILINGS)
    parser.add_argument("--directions", default="forward,backward")
    args = parser.parse_args()
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x, w1 = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(2 * FFN, HIDDEN, **bf16) * 0.03
    dout, w2 = torch.randn(TOKENS, HIDDEN, **bf16), torch.randn(HIDDEN, FFN, **bf16) * 0.03
    activation = torch.compile(swiglu_values)
    y = x @ w1.t()
    h = activation(y)
    dh = dout @ w2
    dy = swiglu_backward(y, dh)
    flops = 2 * TOKENS * HIDDEN * 2 * FFN, 2 * TOKENS * HIDDEN * FFN
    forward, backward = kernels()
    results: dict[str, float] = {}

    def report(label: str, us: float, work: int, reference: float) -> None:
        results[label] = us
        print(f"{label:52s} {us:8.1f} µs {work / us / 1e6:6.0f} TFLOP/s {reference / us:6.3f}×", flush=True)

    unfused = {
        "forward": [("cuBLAS fc1", lambda: x @ w1.t()), ("Inductor SwiGLU", lambda: activation(y)),
                    ("cuBLAS fc1 + Inductor SwiGLU", lambda: activation(x @ w1.t()))],
        "backward": [("cuBLAS fc2 input gradient", lambda: dout @ w2),
                     ("Triton SwiGLU backward", lambda: swiglu_backward(y, dh)),
                     ("cuBLAS fc2 input gradient + SwiGLU backward", lambda: swiglu_backward(y, dout @ w2))]}
    for direction, work in zip(unfused, flops):
        if direction not in args.directions.split(","):
            continue
        reference = microseconds(unfused[direction][-1][1])
        for label, call in unfused[direction]:
            report(f"{direction}: {label}", microseconds(call), work, reference)
        for entry in args.tilings.split(","):
            shape = tiling(entry)
            try:
                if direction == "forward":
                    got_y, got_h = forward(x, w1, shape)
                    error = max(relative_error(got_y, y), relative_error(got_h, h))
                    us = microseconds(lambda: forward(x, w1, shape))
                else:
                    error = relative_error(backward(dout, w2, y, shape), dy)
                    us = microseconds(lambda: backward(dout, w2, y, shape))
            except Exception as failure:  # noqa: BLE001 (a launch shape the compiler refuses is a result)
                print(f"{direction}: fused {entry:40s} failed: {str(failure).splitlines()[0][:120]}", flush=True)
                continue
            report(f"{direction}: fused {entry} (error {error:.1e})", us, work, reference)
    write_results("swiglu_gemm", results)


if __name__ == "__main__":
    main()
