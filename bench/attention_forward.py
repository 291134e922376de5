"""Causal attention's forward at the 1.3b speed shape (batch 4, 4,096 tokens, 16 heads of 128, bf16, the trainer's
memory layout): our Triton kernel (``trainer/attention_forward.py``, each launch shape swept) against SDPA's cuDNN
forward, and cuDNN's backward fed by either forward.

    python3 bench/attention_forward.py [--sweep ROWSxKEYSxWARPSxSTAGES,...]      # one H200

First the checks: our output and log-sum-exp against cuDNN's, and the three input gradients of cuDNN's backward
given our output and statistics against those it computes from its own. Then µs per call (median over 9
interleaved rounds of 10 back-to-back calls) of each forward, and of forward + cuDNN backward.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.adamw_kernel import per_call_microseconds as microseconds, write_results  # noqa: E402
from trainer.attention_forward import TILING, Tiling, triton_attention_forward  # noqa: E402

BATCH, SEQ, HEADS, HEAD_DIM = 4, 4096, 16, 128
ROUNDS = 9
SWEEP = "128x64x8x3,128x128x8x2,128x64x8x4,128x64x4x3,128x32x8x4,64x64x4x3,64x128x4x3"

aten = torch.ops.aten


def inputs() -> tuple[torch.Tensor, ...]:
    """q, k (contiguous, as the rotary kernel writes them), v (a strided slice of the fused QKV output), all
    [B, S, H, D], and an output gradient [B, S, H, D]."""
    torch.manual_seed(0)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    fused = torch.randn(BATCH, SEQ, HEADS, 3, HEAD_DIM, **bf16)
    return fused[:, :, :, 0].contiguous(), fused[:, :, :, 1].contiguous(), fused[:, :, :, 2], torch.randn(
        BATCH, SEQ, HEADS, HEAD_DIM, **bf16)


def cudnn_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """SDPA's cuDNN forward (all its outputs) on [B, S, H, D] inputs."""
    return aten._scaled_dot_product_cudnn_attention(*(t.transpose(1, 2) for t in (q, k, v)), None, True, 0.0, True)


def cudnn_output(forward: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """The output [B, S, H, D] and log-sum-exp among cuDNN's forward outputs."""
    return forward[0].transpose(1, 2), forward[1]


def cudnn_backward(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, forward: tuple) -> tuple[torch.Tensor, ...]:
    """cuDNN's backward given the output [B, S, H, D] and log-sum-exp of any forward (``forward``: cuDNN's outputs
    for the rest of the arguments)."""
    _, _, cum_q, cum_k, max_q, max_k, seed, offset, _ = forward
    return aten._scaled_dot_product_cudnn_attention_backward(
        grad.transpose(1, 2), *(t.transpose(1, 2) for t in (q, k, v)), out.transpose(1, 2), lse, seed, offset, None,
        cum_q, cum_k, max_q, max_k, 0.0, True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", default=SWEEP, help="launch shapes ROWSxKEYSxWARPSxSTAGES, comma-separated")
    args = parser.parse_args()
    ours = triton_attention_forward()
    q, k, v, grad = inputs()
    reference = cudnn_forward(q, k, v)
    ref_out, ref_lse = cudnn_output(reference)
    print(f"cuDNN: output strides {reference[0].stride()}, log-sum-exp {tuple(ref_lse.shape)} strides "
          f"{ref_lse.stride()} {ref_lse.dtype}")
    out, lse = ours(q, k, v)
    lse = lse.view(ref_lse.shape)
    print(f"ours vs cuDNN: output max |diff| {(out.float() - ref_out.float()).abs().max().item():.3e}, "
          f"log-sum-exp max |diff| {(lse - ref_lse).abs().max().item():.3e}")
    ref_grads = cudnn_backward(grad, q, k, v, ref_out, ref_lse, reference)
    our_grads = cudnn_backward(grad, q, k, v, out, lse, reference)
    for name, a, b in zip("qkv", ref_grads, our_grads):
        scale = a.float().abs().max().item()
        print(f"cuDNN backward, d{name} from our forward vs its own: max |diff| "
              f"{(a.float() - b.float()).abs().max().item():.3e} (max |d{name}| {scale:.3e})")

    shapes = {f"ours {TILING.rows}x{TILING.keys}x{TILING.warps}x{TILING.stages} (default)": TILING}
    shapes.update({f"ours {entry}": Tiling(*(int(n) for n in entry.split("x"))) for entry in args.sweep.split(",")})
    table: dict[str, Callable[[], object]] = {"cuDNN forward": lambda: cudnn_forward(q, k, v)}
    for label, tiling in shapes.items():
        try:
            ours(q, k, v, None, tiling)
        except Exception as error:  # NOTE: a shape may not fit shared memory or registers: reported, skipped
            print(f"{label}: {type(error).__name__}: {str(error)[:200]}")
            continue
        table[label] = lambda tiling=tiling: ours(q, k, v, None, tiling)

    def with_backward(forward: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Callable[[], object]:
        def run():
            out, lse = forward()
            return cudnn_backward(grad, q, k, v, out, lse.view(ref_lse.shape), reference)
        return run

    fastest = min((label for label in table if label.startswith("ours")), key=lambda label: microseconds(table[label]))
    table["cuDNN forward + cuDNN backward"] = with_backward(lambda: cudnn_output(cudnn_forward(q, k, v)))
    table[f"{fastest} + cuDNN backward"] = with_backward(table[fastest])
    rounds: dict[str, list[float]] = {label: [] for label in table}
    for _ in range(ROUNDS):  # NOTE: interleaved rounds, as the chip's power state drifts by several % a minute
        for label, call in table.items():
            rounds[label].append(microseconds(call, calls=10, rounds=1))
    results = {label: statistics.median(times) for label, times in rounds.items()}
    for label, us in results.items():
        base = results["cuDNN forward" if "backward" not in label else "cuDNN forward + cuDNN backward"]
        spread = max(rounds[label]) / min(rounds[label]) - 1
        print(f"{label:44s} {us:8.1f} µs {base / us:6.3f}×  (rounds spread {spread:.1%})", flush=True)
    write_results("attention_forward", results)


if __name__ == "__main__":
    main()
