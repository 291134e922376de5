"""SwiGLU's activation: the hand backward equals autograd's, compiled and eager, and the Triton kernel
(run by Triton's interpreter on the CPU) equals the tensor-code formula on awkward shapes."""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, interpreter_check, run_kernel_check
from trainer.model.swiglu import swiglu


def _autograd_reference(fused: torch.Tensor) -> torch.Tensor:
    gate, up = fused.chunk(2, dim=-1)
    return F.silu(gate) * up


def test_gradient_equals_autograds_formula():
    fused = torch.randn(3, 5, 2 * 24, dtype=torch.float64, requires_grad=True)
    out_grad = torch.randn(3, 5, 24, dtype=torch.float64)
    expected = torch.autograd.grad(_autograd_reference(fused), fused, out_grad)[0]
    out = swiglu(fused)
    torch.testing.assert_close(out, _autograd_reference(fused))
    torch.testing.assert_close(torch.autograd.grad(out, fused, out_grad)[0], expected, rtol=1e-12, atol=1e-12)


def test_compiled_matches_eager_in_bf16():
    fused = torch.randn(4, 7, 2 * 40, dtype=torch.bfloat16, requires_grad=True)
    out_grad = torch.randn(4, 7, 40, dtype=torch.bfloat16)
    eager = torch.autograd.grad(swiglu(fused), fused, out_grad)[0]
    compiled = torch.autograd.grad(torch.compile(swiglu)(fused), fused, out_grad)[0]
    assert compiled.dtype == torch.bfloat16 and compiled.shape == fused.shape
    torch.testing.assert_close(compiled, eager)
    # bf16 rounding of a gradient computed in fp32, against autograd's all-bf16 arithmetic
    torch.testing.assert_close(eager, torch.autograd.grad(_autograd_reference(fused), fused, out_grad)[0],
                               rtol=2e-2, atol=2e-2)


KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import torch
    from trainer.kernels.swiglu import reference_backward
    from trainer.kernels.triton_kernels.swiglu import launch
    torch.manual_seed(0)
    for rows, width in [(1, 16), (7, 48), (5, 1024), (3, 1500), (2, 2500)]:
        fused, grad = torch.randn(rows, 2 * width) * 3, torch.randn(rows, width)
        torch.testing.assert_close(launch(fused, grad), reference_backward(fused, grad), rtol=1e-5, atol=1e-5)
        fused, grad = fused.bfloat16(), grad.bfloat16()
        # NOTE: the interpreter rounds fp32 -> bf16 towards zero (the GPU to nearest): within one bf16 step
        torch.testing.assert_close(launch(fused, grad).float(), reference_backward(fused, grad).float(),
                                   rtol=2 ** -7, atol=1e-6)
    strided = torch.randn(6, 2 * 64 + 8)[:, :128]
    torch.testing.assert_close(launch(strided, torch.ones(6, 64)), reference_backward(strided, torch.ones(6, 64)))
    print("ok")
"""))


def test_triton_kernel_matches_the_formula_in_the_interpreter():
    run_kernel_check(KERNEL_CHECK, interpret=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_op_runs_the_kernel_and_matches_the_formula():
    from trainer.kernels.ops import triton_kernels
    from trainer.kernels.swiglu import reference_backward, swiglu_backward

    assert triton_kernels("swiglu") is not None, "Triton is part of CUDA torch builds"
    fused = torch.randn(4096, 2 * 5632, device="cuda", dtype=torch.bfloat16) * 3
    grad = torch.randn(4096, 5632, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(swiglu_backward(fused, grad).float(), reference_backward(fused, grad).float(),
                               rtol=2 ** -7, atol=1e-6)


CAST_CHECK = interpreter_check(textwrap.dedent("""
    import itertools
    import torch
    from tests.trainer.kernels.triton_support import assert_cast_matches
    from trainer.kernels.swiglu import swiglu_cast_reference
    from trainer.kernels.triton_kernels import swiglu
    from trainer.kernels.triton_kernels.swiglu import Tiling, launch
    torch.manual_seed(0)
    # NOTE: Triton's interpreter converts to FP8 wrongly (e5m2: 120 -> 64): there the cast targets bf16 (the
    # scaling, saturation, amax and layout are the same code), on CUDA the FP8 formats, byte for byte
    targets = [(torch.bfloat16, 2.0 ** 120)] if DEVICE == "cpu" else [(torch.float8_e5m2, 2.0 ** 10),
                                                                      (torch.float8_e4m3fn, 30.0)]
    for rows, width in [(1, 16), (7, 48), (5, 1024), (3, 1500)]:
        fused = (torch.randn(rows, 2 * width, device=DEVICE) * 3).bfloat16()
        grad = torch.randn(rows, width, device=DEVICE).bfloat16()
        grad[-1, -1] = 3e4  # one saturating element
        # NOTE: the default launch shape, and programs of more rows than some shapes have (masked rows)
        for (dtype, scale), tiling in itertools.product(targets, (swiglu.TILING["cast"], Tiling(8192, warps=4))):
            swiglu.TILING["cast"] = tiling
            scale = torch.tensor(scale, device=DEVICE)
            got, amax = launch(fused, grad, scale, dtype)
            assert_cast_matches(got, amax, *swiglu_cast_reference(fused, grad, scale, dtype), dtype, DEVICE,
                                same_bytes=True)
        # the cast that also writes the transposed copy: its square tiles, and a shape masking rows and columns
        for (dtype, scale), tiling in itertools.product(targets, (swiglu.TILING["transposed"],
                                                                   Tiling(2048, warps=4, columns=32))):
            swiglu.TILING["transposed"] = tiling
            scale = torch.tensor(scale, device=DEVICE)
            got, transposed, amax = launch(fused, grad, scale, dtype, transposed=True)
            assert_cast_matches(got, amax, *swiglu_cast_reference(fused, grad, scale, dtype), dtype, DEVICE,
                                same_bytes=True)
            assert transposed.shape == (2 * width, rows) and transposed.is_contiguous()
            assert torch.equal(transposed.float(), got.float().t())  # NOTE: FP8 to fp32 is exact
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_triton_cast_matches_the_formula(interpret):
    run_kernel_check(CAST_CHECK, interpret)
