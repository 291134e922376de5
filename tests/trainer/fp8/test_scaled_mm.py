"""Our torch._scaled_mm FP8 linear on CPU: forward and both backward GEMMs against float64 emulation of
the same quantization, cuBLAS's layout rules, the skip rule, autocast, and torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.fp8.scaled_mm import ScaledMMRecipe, fp8_matmul, make_scaled_mm_gemm
from trainer.fp8.scaling import E4M3, E5M2, FORMATS, Eligibility, dequantize, quantize

ELIGIBLE = Eligibility(16)


def emulated(t: torch.Tensor, dtype: torch.dtype, dim: int | None) -> torch.Tensor:
    """``t`` after an FP8 round trip with dynamic scaling, in float64."""
    q, inverse = quantize(t.detach(), dtype, dim)
    return dequantize(q, inverse).double()


def reference(x, w, grad, recipe: ScaledMMRecipe):
    """y, dx, dW from dequantized operands (float64 matmuls); scales along each GEMM's contraction-free axes."""
    forward, gradient = recipe.forward_dtype, (E4M3 if recipe.rowwise else recipe.grad_dtype)
    rows = -1 if recipe.rowwise else None
    columns = 0 if recipe.rowwise else None
    y = emulated(x, forward, rows) @ emulated(w, forward, rows).T
    grad_x = emulated(grad, gradient, rows) @ emulated(w, forward, columns)
    grad_w = emulated(grad, gradient, columns).T @ emulated(x, forward, columns)
    return y, grad_x, grad_w


@pytest.mark.parametrize("fmt", ["hybrid", "e4m3"])
@pytest.mark.parametrize("rowwise", [False, True])
def test_forward_and_backward_equal_the_emulated_fp8_math(fmt, rowwise):
    recipe = ScaledMMRecipe(*FORMATS[fmt], rowwise=rowwise)
    gemm = make_scaled_mm_gemm(recipe, ELIGIBLE)
    x = torch.randn(3, 32, 64, requires_grad=True)
    w = (torch.randn(48, 64) * 0.05).requires_grad_()
    grad = torch.randn(3, 32, 48) * 1e-3
    y = gemm(x, w)
    y.backward(grad)
    want_y, want_dx, want_dw = reference(x.reshape(-1, 64), w, grad.reshape(-1, 48), recipe)
    rtol = 2 ** -8 if rowwise else 1e-5  # row-wise kernels write bf16, tensorwise ones fp32 here
    for got, want in ((y.reshape(-1, 48), want_y), (x.grad.reshape(-1, 64), want_dx), (w.grad, want_dw)):
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=rtol * float(want.abs().max()))
    assert x.grad.dtype == x.dtype and w.grad.dtype == w.dtype
    exact = F.linear(x.detach(), w.detach())
    assert ((y.detach() - exact).norm() / exact.norm()) < 0.08  # and it is FP8 arithmetic, not exact


def test_layout_rules_of_the_fp8_gemm_are_enforced_on_every_device():
    a, _ = quantize(torch.randn(32, 64), E4M3)
    b, _ = quantize(torch.randn(48, 64), E4M3)
    one = torch.ones(())
    assert fp8_matmul(a, b.t(), one, one, torch.float32).shape == (32, 48)
    with pytest.raises(ValueError, match="column-major"):
        fp8_matmul(a, b.t().contiguous(), one, one, torch.float32)
    odd, _ = quantize(torch.randn(32, 40), E4M3)
    with pytest.raises(ValueError, match="multiple of 16"):
        fp8_matmul(odd, quantize(torch.randn(48, 40), E4M3)[0].t(), one, one, torch.float32)


def test_ineligible_shapes_run_the_plain_linear_exactly():
    gemm = make_scaled_mm_gemm(ScaledMMRecipe(E4M3, E5M2, False), Eligibility(512))
    x, w = torch.randn(2, 16, 64), torch.randn(96, 64)
    assert torch.equal(gemm(x, w), F.linear(x, w))


def test_autocast_output_and_fp32_master_gradients():
    gemm = make_scaled_mm_gemm(ScaledMMRecipe(E4M3, E5M2, False), ELIGIBLE)
    x = torch.randn(32, 64, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = gemm(x, w)
    assert y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32


def test_compiled_gradients_equal_eager_ones():
    """torch 2.11's compiler once zeroed every gradient through this function (it returned a no-op .to()
    alias); compiled and eager must agree."""
    gemm = make_scaled_mm_gemm(ScaledMMRecipe(E4M3, E5M2, False), ELIGIBLE)

    def loss(x, w):
        return (x + gemm(x, w)).square().sum()

    x, w = torch.randn(2, 32, 64, requires_grad=True), torch.randn(64, 64, requires_grad=True)
    loss(x, w).backward()
    eager = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    torch.compile(loss)(x, w).backward()
    torch.testing.assert_close((x.grad, w.grad), eager, rtol=1e-4, atol=1e-3)
