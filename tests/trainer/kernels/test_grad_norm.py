"""The one-launch sum of squares of the gradients (trainer.kernels.grad_norm) against torch's norms: Triton's
interpreter on the CPU, the real kernel on CUDA."""

from __future__ import annotations

import textwrap

import pytest

from tests.trainer.kernels.triton_support import INTERPRETER_AND_CUDA, interpreter_check, run_kernel_check

KERNEL_CHECK = interpreter_check(textwrap.dedent("""
    import torch
    from trainer.kernels.triton_kernels.grad_norm import sum_of_squares
    torch.manual_seed(0)
    # bf16 and fp32 (two launches), counts that are multiples of 16 and not, a view at an odd offset (not 16-byte
    # aligned: a launch of its own), a non-contiguous tensor (copied), one spanning several programs
    tensors = [torch.randn(numel, device=DEVICE).to(dtype) * scale for numel, dtype, scale in
               [(3000, torch.bfloat16, 1.0), (4099, torch.bfloat16, 3.0), (777, torch.float32, 0.5),
                (70_000, torch.float32, 2.0), (40_000, torch.bfloat16, 0.1)]]
    tensors.append(torch.randn(1001, device=DEVICE).bfloat16()[1:])
    tensors.append(torch.randn(64, 48, device=DEVICE).bfloat16().t())
    want = sum(t.double().square().sum() for t in tensors)
    for shape in ({}, {"block": 256, "blocks_per_program": 3, "num_warps": 4}):
        got = sum_of_squares(tensors, **shape)
        assert got.dtype == torch.float32 and got.shape == () and got.device.type == DEVICE
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=0)
        assert torch.equal(sum_of_squares(tensors, **shape), got)  # no atomics: the same sum every time
    print("ok")
"""))


@pytest.mark.parametrize("interpret", INTERPRETER_AND_CUDA)
def test_sum_of_squares_matches_torch(interpret):
    """Every element counted once, whatever the dtypes, alignment, strides and launch shape."""
    run_kernel_check(KERNEL_CHECK, interpret)
