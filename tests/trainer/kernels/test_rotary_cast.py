"""The QKV gradient of delayed FP8 scaling written by RoPE's backward kernel: the op is delayed scaling's cast of
the tensor-code gradient, the kernel in its casting form (Triton's interpreter on the CPU, compiled on CUDA)
matches the tensor code on awkward shapes and layouts, and ``qkv.rotary_heads`` trains as
``rotary_heads(qkv(x))`` does, eager and compiled."""

from __future__ import annotations

import copy
import textwrap

import pytest
import torch

from tests.trainer.fp8.test_delayed import GEMM, assert_close_but_for_fp8_steps, scales
from tests.trainer.kernels.test_rotary import tables
from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, ON_CUDA, interpreter_check, run_kernel_check
from trainer.kernels.fp8_cast import amax_of, cast_with_scale
from trainer.kernels.rotary import qkv_gradient, rotary_backward_cast
from trainer.model.layers import ColumnParallelLinear
from trainer.model.rotary import rotary_heads
from trainer.parallel.state import ParallelState


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.float8_e4m3fn])
def test_the_op_is_delayed_scalings_cast_of_the_rounded_gradient(dtype):
    shape, scale = (2, 2, 16), torch.tensor(2.0 ** 6)
    dq, dk, dv = (torch.randn(2, 5, heads, 16).bfloat16() for heads in (4, 2, 2))
    dv[0, 0, 0, 0] = 1e4  # saturates at this scale
    rotary = tables(2, 5, 16, torch.bfloat16)
    got, amax = rotary_backward_cast(dq, dk, dv, *rotary, scale, dtype, *shape)
    rounded = qkv_gradient(dq, dk, dv, *rotary, shape)
    assert got.dtype == dtype and got.shape == (10, 2 * 4 * 16) and rounded.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.uint8), cast_with_scale(rounded, scale, dtype).view(torch.uint8))
    assert torch.equal(amax, amax_of(rounded)) and got.float().abs().max() == torch.finfo(dtype).max


KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import itertools
    import torch
    from tests.trainer.kernels.test_rotary import kernel_cases
    from tests.trainer.kernels.triton_support import assert_cast_matches
    from trainer.kernels.rotary import rotary_cast_reference
    from trainer.kernels.triton_kernels import rotary
    from trainer.kernels.triton_kernels.rotary import Tiling, launch
    defaults = {mode: rotary.TILING[mode] for mode in ("cast", "transposed")}
    torch.manual_seed(0)
    # NOTE: Triton's interpreter converts to FP8 wrongly (e5m2: 120 -> 64): there the cast targets bf16 (the
    # scaling, saturation, amax and layout are the same code), on CUDA the FP8 formats
    targets = [(torch.bfloat16, 2.0 ** 120)] if DEVICE == "cpu" else [(torch.float8_e5m2, 2.0 ** 10),
                                                                      (torch.float8_e4m3fn, 30.0)]
    for shape, dq, dk, dv, cos, sin in kernel_cases(DEVICE):
        dv[-1, -1, -1, -1] = 3e4  # one saturating element
        # NOTE: the default launch shapes, and programs of more tokens than some shapes have (masked tokens)
        masking = dict.fromkeys(defaults, Tiling(tokens=128, warps=4))
        for (dtype, scale), tilings in itertools.product(targets, (defaults, masking)):
            rotary.TILING.update(tilings)
            scale = torch.tensor(scale, device=DEVICE)
            got, amax = launch(dq, dk, dv, cos, sin, shape, scale, dtype)
            # NOTE: the kernel's rotation fuses multiply-adds the tensor code rounds twice: not always the same bytes
            assert_cast_matches(got, amax, *rotary_cast_reference(dq, dk, dv, cos, sin, shape, scale, dtype), dtype,
                                DEVICE, same_bytes=False)
            # the same kernels also writing the transposed copy: the same bytes, and their transpose
            same, transposed, same_amax = launch(dq, dk, dv, cos, sin, shape, scale, dtype, transposed=True)
            assert torch.equal(same.view(torch.uint8), got.view(torch.uint8)) and torch.equal(same_amax, amax)
            assert transposed.shape == got.shape[::-1] and transposed.is_contiguous()
            assert torch.equal(transposed.float(), got.float().t())  # NOTE: FP8 to fp32 is exact
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_triton_kernel_matches_the_tensor_code(interpret):
    run_kernel_check(KERNEL_CHECK, interpret)


CUDA_BF16 = pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=ON_CUDA)


@pytest.mark.parametrize("device, dtype", [("cpu", torch.float32),
                                           pytest.param("cpu", torch.bfloat16, marks=pytest.mark.slow),  # compiles
                                           CUDA_BF16])
def test_the_rotary_linear_equals_rotary_heads_of_the_linear_eager_and_compiled(device, dtype):
    """``qkv.rotary_heads`` (the backward's FP8 gradient straight from RoPE's kernel) against
    ``rotary_heads(qkv(x))`` (the gradient from autograd, then the cast): the same outputs, gradients and
    amaxes, up to the roundings of the gradient before its cast. On CUDA the compiled blocks launch the
    kernels of the Triton ops (RoPE's cast, the transposes) from Inductor's code."""
    torch.manual_seed(0)
    shape = (2, 2, 16)
    qkv = ColumnParallelLinear(64, 2 * 4 * 16, ParallelState(torch.device(device)), 0.05, GEMM).to(device)
    with torch.no_grad():
        qkv.reset_parameters()
    qkv.weight = torch.nn.Parameter(qkv.weight.detach().to(dtype))  # the scales stay fp32
    qkv.fp8_scales = scales(64.0, 2048.0, 2.0 ** 16).to(device)
    x = torch.randn(2, 16, 64, dtype=dtype, device=device)
    rotary = tables(2, 16, 16, dtype, device)
    grads = [torch.randn(2, 16, heads, 16, dtype=dtype, device=device) * 1e-2 for heads in (4, 2, 2)]
    results = []
    for block in (lambda linear, h: linear.rotary_heads(h, rotary, shape),
                  lambda linear, h: rotary_heads(linear(h), rotary, shape)):
        for run in (block, torch.compile(block)):
            linear, h = copy.deepcopy(qkv), x.clone().requires_grad_()
            heads = run(linear, h)
            torch.autograd.backward(heads, grads)
            results.append((*heads, h.grad, linear.weight.grad, linear.fp8_scales.amax_input,
                            linear.fp8_scales.amax_grad))
    assert [t.shape for t in results[0][:3]] == [(2, 16, 4, 16), (2, 16, 2, 16), (2, 16, 2, 16)]
    assert results[0][-1] > 0
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            assert_close_but_for_fp8_steps(got, want, dtype)
