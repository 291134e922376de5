"""The MLP's two GEMMs next to SwiGLU with the activation in their epilogues (Triton, Hopper's TMA).

Unfused, a bf16 step of the ``1.3b`` preset on an H200 spends 3.1 ms in SwiGLU's forward kernel (it reads the
``[gate | up]`` output of fc1 back from memory) and 5.4 ms in its backward (it reads fc2's input gradient back);
the GEMMs around them write those tensors moments before (bench/train_h200.md, fourteenth run). Here:

- :func:`swiglu_forward_gemm`: ``y = x @ w1.T`` with ``w1 = [gate; up]`` computed as two products sharing the
  ``x`` tile, so one program holds matching gate and up tiles and also writes ``h = silu(gate) * up``.
- :func:`swiglu_backward_gemm`: ``dh = dout @ w2`` (fc2's input gradient), whose epilogue reads the gate and up
  tiles of ``y`` and writes ``[dgate | dup]`` instead of ``dh``.

Both round as the unfused path does (the activation and its gradient from the bf16 ``y`` and ``dh``), so they
give its results up to the GEMMs' summation order. They are persistent kernels (one program per SM walking
the output tiles, grouped along M for L2 reuse) reading operands through TMA descriptors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GemmTiling:
    """A persistent GEMM's launch shape: output tile ``block_m`` × ``block_n`` (per half for the forward's two
    products), ``block_k`` deep, ``stages`` of operand buffers, ``warps`` warps, ``group_m`` row tiles walked
    together, and whether Triton warp-specialises the loop (TMA loads and MMAs in separate warps)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    stages: int = 3
    warps: int = 8
    group_m: int = 8
    warp_specialize: bool = False
    prefetch: bool = False
    programs_per_sm: int = 1


def fusable(tokens: int, width: int, depth: int, tiling: GemmTiling) -> bool:
    """Whether the fused kernels take an MLP of ``width`` SwiGLU features and ``depth`` (the hidden size):
    the halves must split on tile bounds and TMA needs 16-byte aligned rows."""
    return width % tiling.block_n == 0 and depth % 8 == 0 and width % 8 == 0 and tokens > 0


@functools.cache
def kernels():
    """The two Triton launchers ``(forward, backward)``, built on first use; None without Triton."""
    try:
        import triton
        import triton.language as tl
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None

    @triton.jit
    def forward_kernel(x_desc, w_desc, y_desc, h_desc, tokens, width, depth, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                       WARP_SPECIALIZE: tl.constexpr):
        dtype = y_desc.dtype
        tiles_m, tiles_n = tl.cdiv(tokens, BLOCK_M), tl.cdiv(width, BLOCK_N)
        steps = tl.cdiv(depth, BLOCK_K)
        for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, flatten=True,
                             warp_specialize=WARP_SPECIALIZE):
            # NOTE: GROUP_M row tiles walked together (their x or grad tiles stay in L2); inline, as the
            # interpreter does not resolve a jitted helper defined beside the kernels
            first_m = (tile // (GROUP_M * tiles_n)) * GROUP_M
            rows = min(tiles_m - first_m, GROUP_M)
            pid_m, pid_n = first_m + (tile % (GROUP_M * tiles_n)) % rows, (tile % (GROUP_M * tiles_n)) // rows
            row, col = pid_m * BLOCK_M, pid_n * BLOCK_N
            gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(steps):
                k = step * BLOCK_K
                x = x_desc.load([row, k])
                gate = tl.dot(x, w_desc.load([col, k]).T, gate)
                up = tl.dot(x, w_desc.load([width + col, k]).T, up)
            gate, up = gate.to(dtype), up.to(dtype)
            y_desc.store([row, col], gate)
            y_desc.store([row, width + col], up)
            gate32 = gate.to(tl.float32)
            h_desc.store([row, col], (gate32 * tl.sigmoid(gate32) * up.to(tl.float32)).to(dtype))

    @triton.jit
    def backward_kernel(g_desc, w_desc, y_desc, d_desc, tokens, width, depth, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr,
                        WARP_SPECIALIZE: tl.constexpr, PREFETCH: tl.constexpr):
        dtype = d_desc.dtype
        tiles_m, tiles_n = tl.cdiv(tokens, BLOCK_M), tl.cdiv(width, BLOCK_N)
        steps = tl.cdiv(depth, BLOCK_K)
        for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, PROGRAMS, flatten=True,
                             warp_specialize=WARP_SPECIALIZE):
            # NOTE: GROUP_M row tiles walked together (their x or grad tiles stay in L2); inline, as the
            # interpreter does not resolve a jitted helper defined beside the kernels
            first_m = (tile // (GROUP_M * tiles_n)) * GROUP_M
            rows = min(tiles_m - first_m, GROUP_M)
            pid_m, pid_n = first_m + (tile % (GROUP_M * tiles_n)) % rows, (tile % (GROUP_M * tiles_n)) // rows
            row, col = pid_m * BLOCK_M, pid_n * BLOCK_N
            grad = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if PREFETCH:
                gate = y_desc.load([row, col])
                up = y_desc.load([row, width + col])
            for step in range(steps):
                k = step * BLOCK_K
                grad = tl.dot(g_desc.load([row, k]), w_desc.load([k, col]), grad)
            grad = grad.to(dtype).to(tl.float32)  # as the unfused path's bf16 dh
            if not PREFETCH:
                gate = y_desc.load([row, col])
                up = y_desc.load([row, width + col])
            gate, up = gate.to(tl.float32), up.to(tl.float32)
            sigmoid = tl.sigmoid(gate)
            d_desc.store([row, col], (grad * up * sigmoid * (1.0 + gate * (1.0 - sigmoid))).to(dtype))
            d_desc.store([row, width + col], (grad * gate * sigmoid).to(dtype))

    def programs(device: torch.device, tiles: int, tiling: GemmTiling) -> int:
        """One program per SM (a few on the CPU, where the interpreter runs them)."""
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
        return min(tiles, sms * tiling.programs_per_sm)

    def forward(x: torch.Tensor, w: torch.Tensor, tiling: GemmTiling) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, depth = x.shape
        width = w.shape[0] // 2
        y, h = x.new_empty(tokens, 2 * width), x.new_empty(tokens, width)
        bm, bn, bk = tiling.block_m, tiling.block_n, tiling.block_k
        count = programs(x.device, triton.cdiv(tokens, bm) * (width // bn), tiling)
        forward_kernel[(count,)](
            TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
            TensorDescriptor.from_tensor(y, [bm, bn]), TensorDescriptor.from_tensor(h, [bm, bn]), tokens, width,
            depth, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=tiling.group_m, PROGRAMS=count,
            WARP_SPECIALIZE=tiling.warp_specialize, num_stages=tiling.stages, num_warps=tiling.warps)
        return y, h

    def backward(grad: torch.Tensor, w: torch.Tensor, y: torch.Tensor, tiling: GemmTiling) -> torch.Tensor:
        tokens, depth = grad.shape
        width = w.shape[1]
        out = torch.empty_like(y)
        bm, bn, bk = tiling.block_m, tiling.block_n, tiling.block_k
        count = programs(grad.device, triton.cdiv(tokens, bm) * (width // bn), tiling)
        backward_kernel[(count,)](
            TensorDescriptor.from_tensor(grad, [bm, bk]), TensorDescriptor.from_tensor(w, [bk, bn]),
            TensorDescriptor.from_tensor(y, [bm, bn]), TensorDescriptor.from_tensor(out, [bm, bn]), tokens, width,
            depth, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=tiling.group_m, PROGRAMS=count,
            WARP_SPECIALIZE=tiling.warp_specialize, PREFETCH=tiling.prefetch, num_stages=tiling.stages,
            num_warps=tiling.warps)
        return out

    return forward, backward
