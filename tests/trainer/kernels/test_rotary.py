"""RoPE on the fused QKV output: the tensor-code gradient is autograd's through the rotary split, ``rotary_heads``
(its backward the ``rotary_backward_qkv`` op) trains as that formula does, eager and compiled, and the op's Triton
kernel (Triton's interpreter on the CPU, compiled on CUDA) matches the tensor code on awkward shapes and layouts."""

from __future__ import annotations

import textwrap

import pytest
import torch

from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, ON_CUDA, interpreter_check, run_kernel_check
from trainer.kernels.rotary import qkv_gradient
from trainer.model.layers import RotaryEmbedding
from trainer.model.rotary import rotary_heads, rotary_heads_values


def tables(batch: int, size: int, head_dim: int, dtype: torch.dtype, device: str = "cpu"):
    """RoPE's cos and sin [B, S, 1, head_dim] as the model computes them, at shuffled positions."""
    rope = RotaryEmbedding(head_dim, 10000.0, 4 * size).to(device)
    rope.reset_parameters()
    positions = torch.stack([torch.randperm(4 * size, device=device)[:size] for _ in range(batch)])
    return rope(positions, dtype)


def kernel_cases(device: str):
    """``(shape, dq, dk, dv, cos, sin)`` in the layouts the kernel meets, bf16 on ``device``: ``dq`` and ``dv`` as
    views of one ``[B, S, groups, heads + 2, head_dim]`` tensor (``dv`` a strided slice, as the model's v), ``dk``
    heads outermost; the shapes with a partial token tile, a half of 12 (masked columns), and the 1.3b preset's
    head layout with more tokens than one tile."""
    for batch, size, groups, per_group, head_dim in [(2, 5, 2, 2, 16), (1, 70, 3, 1, 24), (2, 96, 4, 1, 128)]:
        qkv = torch.randn(batch, size, groups, per_group + 2, head_dim, device=device).bfloat16()
        dq = qkv[:, :, :, :per_group].reshape(batch, size, groups * per_group, head_dim)
        dk = qkv[:, :, :, per_group].transpose(1, 2).contiguous().transpose(1, 2)
        yield ((groups, per_group, head_dim), dq, dk, qkv[:, :, :, per_group + 1],
               *tables(batch, size, head_dim, torch.bfloat16, device))


@pytest.mark.parametrize("shape", [(2, 2, 16), (3, 1, 8), (1, 4, 24)])
def test_the_tensor_code_gradient_is_autograds_through_the_rotary_split(shape):
    groups, per_group, head_dim = shape
    torch.manual_seed(0)
    qkv = torch.randn(2, 5, groups * (per_group + 2) * head_dim, dtype=torch.float64, requires_grad=True)
    rotary = tables(2, 5, head_dim, torch.float64)
    heads = rotary_heads_values(qkv, rotary, shape)
    grads = [torch.randn_like(h) for h in heads]
    torch.autograd.backward(heads, grads)
    torch.testing.assert_close(qkv_gradient(*grads, *rotary, shape), qkv.grad.view(10, -1))


CUDA_BF16 = pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=ON_CUDA)


@pytest.mark.parametrize("device, dtype", [("cpu", torch.float32), ("cpu", torch.bfloat16), CUDA_BF16])
def test_rotary_heads_trains_as_its_formula_eager_and_compiled(device, dtype):
    """The same q, k, v, and the QKV gradient of autograd through the formula, up to its roundings: in bf16 the
    op rounds once from fp32, eager autograd after every operation. On CUDA the compiled block launches the
    op's kernel from Inductor's code."""
    torch.manual_seed(0)
    shape = (2, 2, 16)
    qkv = torch.randn(2, 24, 2 * 4 * 16, dtype=dtype, device=device)
    rotary = tables(2, 24, 16, dtype, device)
    grads = [torch.randn(2, 24, heads, 16, dtype=dtype, device=device) for heads in (4, 2, 2)]
    results = []
    for function in (rotary_heads_values, rotary_heads, torch.compile(rotary_heads)):
        leaf = qkv.clone().requires_grad_()
        heads = function(leaf, rotary, shape)
        torch.autograd.backward(heads, grads)
        results.append((*heads, leaf.grad))
    assert [t.shape for t in results[1]] == [(2, 24, 4, 16), (2, 24, 2, 16), (2, 24, 2, 16), qkv.shape]
    tolerance = {"rtol": 2 ** -7, "atol": 2 ** -7} if dtype == torch.bfloat16 else {}
    for got in results[1:]:
        for tensor, want in zip(got, results[0]):
            torch.testing.assert_close(tensor, want, **tolerance)


KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import torch
    from tests.trainer.kernels.test_rotary import kernel_cases
    from trainer.kernels.rotary import qkv_gradient
    from trainer.kernels.triton_kernels import rotary
    from trainer.kernels.triton_kernels.rotary import Tiling, launch
    default = rotary.TILING["plain"]
    torch.manual_seed(0)
    for shape, dq, dk, dv, cos, sin in kernel_cases(DEVICE):
        head_dim = shape[2]
        want = qkv_gradient(dq, dk, dv, cos, sin, shape)
        # NOTE: the default launch shape, and programs of more tokens than some shapes have (masked tokens)
        for tiling in (default, Tiling(tokens=128, warps=4)):
            rotary.TILING["plain"] = tiling
            got = launch(dq, dk, dv, cos, sin, shape)
            assert got.dtype == torch.bfloat16 and got.shape == want.shape and got.is_contiguous()
            # NOTE: the kernel fuses multiply-adds the tensor code rounds twice, and the interpreter rounds fp32
            # to bf16 towards zero: within one bf16 step on CUDA, two under the interpreter
            step = 2 ** -7 if DEVICE == "cuda" else 2 ** -6
            torch.testing.assert_close(got.float(), want.float(), rtol=step, atol=1e-30)
            assert torch.equal(got[:, -head_dim:], want[:, -head_dim:])  # v: copied, never rotated
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_triton_kernel_matches_the_tensor_code(interpret):
    run_kernel_check(KERNEL_CHECK, interpret)
