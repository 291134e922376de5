"""The QKV linear's output gradient under delayed FP8 scaling, written by RoPE's backward kernel already cast.

Attention's backward gives ``dq``, ``dk``, ``dv``; the QKV GEMMs want ``[dq; dk; dv]`` (RoPE undone on ``dq``
and ``dk``, heads back in the fused weight's per-group layout) cast to FP8 with its amax. Compiled from the
autograd formula, Inductor did all of that in one kernel, but a row reduction over the concatenation whose
every element loads from three masked sources: on the H200 it moved ~1.4 TB/s (214 µs per layer of the 1.3b
preset for 0.3 GB; bench/train_h200.md, ninth run). :mod:`trainer.model.rotary`'s backward kernel does it instead, in
its casting form: each program takes a tile of tokens of one head, loads the head's two halves once, rotates
them back, rounds to the gradient's dtype (as the bf16 gradient would have been), and stores the scaled FP8
values into the head's columns, keeping the tile's amax.

The ops are ``torch.library.triton_op``s (compiled, Inductor launches the kernels itself); off CUDA, or without
Triton, they are the same computation in tensor code (:func:`rotary_cast_reference`).
"""

from __future__ import annotations

import torch

from trainer.fp8.delayed import cast_outputs
from trainer.kernels.ops import kernel_op, launcher
from trainer.model.rotary import HeadShape, qkv_gradient, triton_rotary_backward


def rotary_cast_reference(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor, shape: HeadShape, scale: torch.Tensor, dtype: torch.dtype,
                          transposed: bool = False) -> tuple[torch.Tensor, ...]:
    """:func:`rotary_backward_cast` (with ``transposed``: :func:`rotary_backward_cast_transposed`) in tensor
    code, with the arguments of :func:`trainer.model.rotary.triton_rotary_backward`'s launcher."""
    return cast_outputs(qkv_gradient(dq, dk, dv, cos, sin, shape), scale, dtype, transposed)


@kernel_op("blendforge::rotary_backward_cast")
def rotary_backward_cast(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         scale: torch.Tensor, dtype: torch.dtype, groups: int, per_group: int,
                         head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The QKV gradient [tokens, width] (:func:`trainer.model.rotary.qkv_gradient`) times ``scale``, saturated into
    ``dtype``, and its amax (fp32, 0-d), from ``dq`` [B, S, groups·per_group, head_dim], ``dk`` and ``dv`` [B, S,
    groups, head_dim] and RoPE's tables ``cos``/``sin`` [B, S, 1, head_dim]."""
    launch = launcher(triton_rotary_backward, rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim), scale, dtype)


@kernel_op("blendforge::rotary_backward_cast_transposed")
def rotary_backward_cast_transposed(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, cos: torch.Tensor,
                                    sin: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, groups: int,
                                    per_group: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`rotary_backward_cast` with the cast gradient's transpose [width, tokens] (row-major, the weight
    gradient GEMM's left operand) between the two: on CUDA written by the same kernels, so no transposing copy
    reads the gradient again (``--fp8-transpose producers``)."""
    launch = launcher(triton_rotary_backward, rotary_cast_reference, dq.device)
    return launch(dq, dk, dv, cos, sin, (groups, per_group, head_dim), scale, dtype, transposed=True)
