"""The chip's ceilings, printed beside the baselines: bf16 and FP8 GEMM TFLOP/s at 8192³, and causal attention's
forward + backward TFLOP/s through each of SDPA's kernels at the speed shape's attention (B=4, H=16, S=4096,
D=128): what the trainer's GEMMs and attention could reach on this GPU today.

    python3 bench/baselines/ceilings.py        # one GPU; $OUT/ceilings.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run by path: the repository's packages first
from bench.timing import seconds_per_call, write_results  # noqa: E402

GEMM_SIZE = 8192
#: Causal attention's FLOPs at (B, H, S, D): two matmuls, half of them masked, forward + backward (2.5×).
ATTENTION = (4, 16, 4096, 128)


def tflops(flops: float, call: Callable[[], object], calls: int, warmup: int) -> float:
    """TFLOP/s of ``call`` (``flops`` a call) over ``calls`` back-to-back calls after ``warmup``."""
    return round(flops / seconds_per_call(call, calls, warmup)[0] / 1e12, 1)


def gemm_ceilings() -> dict:
    """bf16, FP8 tensorwise and FP8 row-wise (``torch._scaled_mm``) GEMMs of ``GEMM_SIZE``³."""
    n = GEMM_SIZE
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    results = {"bf16_mm_tflops": tflops(2 * n**3, lambda: a @ b, 20, 5)}
    try:
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        results["fp8_tensorwise_mm_tflops"] = tflops(2 * n**3, lambda: torch._scaled_mm(
            a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 20, 5)
        rows, columns = torch.ones(n, 1, device="cuda"), torch.ones(1, n, device="cuda")
        results["fp8_rowwise_mm_tflops"] = tflops(2 * n**3, lambda: torch._scaled_mm(
            a8, b8, scale_a=rows, scale_b=columns, out_dtype=torch.bfloat16), 20, 5)
    except Exception as error:  # an older GPU or torch: reported, the other ceilings still run
        results["fp8_mm"] = f"failed: {error!r}"[:300]
    return results


def attention_ceilings() -> dict:
    """Causal SDPA forward + backward at :data:`ATTENTION` through the flash, cuDNN and efficient kernels."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads, seq, head_dim = ATTENTION
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    flops = 4 * batch * heads * seq * seq * head_dim / 2 * 3.5
    results = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):

        def forward_backward(backend=backend) -> None:
            with sdpa_kernel(backend):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.sum().backward()

        try:
            results[f"sdpa_{name}_fwdbwd_tflops"] = tflops(flops, forward_backward, 10, 3)
        except Exception as error:  # a kernel this GPU or shape lacks: reported, the others still run
            results[f"sdpa_{name}"] = f"failed: {error!r}"[:200]
    return results


def environment() -> dict:
    """torch, CUDA and the GPU's name and compute capability."""
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
            "cap": torch.cuda.get_device_capability()}


def ceilings() -> dict:
    """:func:`environment`, :func:`gemm_ceilings` and :func:`attention_ceilings`, each printed."""
    results = {**environment(), **gemm_ceilings(), **attention_ceilings()}
    for key, value in results.items():
        print(f"{key}: {value}", flush=True)
    torch.cuda.empty_cache()
    return results


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    write_results("ceilings", ceilings())
