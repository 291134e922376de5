"""The FP8 transpose op: its Triton kernel (Triton's interpreter on the CPU, compiled on CUDA) equals
``t().contiguous()`` on awkward shapes, and ``--fp8-transpose kernel`` gives our FP8 linear the same gradients
as the fused copies; on CUDA the compiled graphs launch the kernel itself (``triton_op``), not the op."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd

from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, interpreter_check, run_kernel_check
from trainer.fp8.delayed import Calibration
from trainer.fp8.scaled_mm import DelayedScaledGemm, ScaledMMRecipe, make_scaled_mm_gemm
from trainer.fp8.scaling import E4M3, E5M2, Eligibility

KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import torch
    from trainer.kernels.triton_kernels.fp8_transpose import launch
    torch.manual_seed(0)
    for rows, cols in [(1, 16), (16, 1), (130, 70), (257, 384), (128, 128)]:
        for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            matrix = (torch.randn(rows, cols, device=DEVICE) * 8).to(dtype)
            assert torch.equal(launch(matrix).view(torch.uint8), matrix.t().contiguous().view(torch.uint8))
    # rows further apart than their width
    padded = (torch.randn(40, 96, device=DEVICE) * 8).to(torch.float8_e4m3fn)[:, :80]
    assert torch.equal(launch(padded).view(torch.uint8), padded.t().contiguous().view(torch.uint8))
    column_major = (torch.randn(48, 32, device=DEVICE) * 8).to(torch.float8_e5m2).t()
    assert torch.equal(launch(column_major).view(torch.uint8), column_major.t().contiguous().view(torch.uint8))
    for bad in (torch.zeros(4, 4, dtype=torch.bfloat16, device=DEVICE),
                torch.zeros(2, 4, 4, dtype=torch.uint8, device=DEVICE)):
        try:
            launch(bad)
        except ValueError as error:
            assert "2-D tensor of 1-byte elements" in str(error)
        else:
            raise AssertionError(f"accepted {bad.dtype} {tuple(bad.shape)}")
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_triton_kernel_equals_a_transposing_copy(interpret):
    run_kernel_check(KERNEL_CHECK, interpret)


def _compiled_gradients(gemm, scales, device: str) -> tuple[tuple[torch.Tensor, torch.Tensor], str]:
    """Weight and input gradients of ``gemm`` compiled through AOTAutograd on ``device``, and the code of its
    forward and backward graphs."""
    graphs = []

    def keep(module: torch.fx.GraphModule, _inputs):
        graphs.append(module.code)
        return module.forward

    torch.manual_seed(0)
    x = torch.randn(64, 64, device=device, requires_grad=True)
    w = (torch.randn(32, 64, device=device) * 0.05).requires_grad_()
    extra = () if scales is None else (scales.to(device),)
    loss = torch.compile(lambda a, b: gemm(a, b, *extra).square().sum(),
                         backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))(x, w)
    loss.backward()
    return (x.grad, w.grad), "\n".join(graphs)


def _gemm(recipe: str, transpose_kernel: bool):
    """The FP8 local GEMM of ``recipe`` (and its scales for delayed scaling)."""
    spec = ScaledMMRecipe(E4M3, E5M2, rowwise=False, transpose_kernel=transpose_kernel)
    if recipe == "tensorwise":
        return make_scaled_mm_gemm(spec, Eligibility(16)), None
    return DelayedScaledGemm(spec, Eligibility(16), Calibration(active=False)), DelayedScaledGemm.new_scales()


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed"])
def test_the_kernel_option_gives_the_fused_copies_gradients(recipe):
    fused, fused_code = _compiled_gradients(*_gemm(recipe, False), "cpu")
    kernel, _ = _compiled_gradients(*_gemm(recipe, True), "cpu")
    assert "fp8_transpose" not in fused_code
    torch.testing.assert_close(kernel, fused, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("recipe", ["tensorwise", "delayed"])
def test_compiled_graphs_launch_the_kernel_itself_on_cuda(recipe):
    fused, _ = _compiled_gradients(*_gemm(recipe, False), "cuda")
    kernel, kernel_code = _compiled_gradients(*_gemm(recipe, True), "cuda")
    # NOTE: x's and dy's transposes, each a Triton kernel in the graph (no opaque op call for Inductor to wrap)
    assert kernel_code.count("triton_kernel_wrapper_functional(") == 2, kernel_code
    assert "blendforge.fp8_transpose" not in kernel_code
    torch.testing.assert_close(kernel, fused, rtol=0, atol=0)
