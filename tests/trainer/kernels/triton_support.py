"""Running a check of a hand-written Triton kernel in a fresh process: on the CPU under Triton's interpreter
(``TRITON_INTERPRET`` must be set before Triton is first imported), or on CUDA as compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]  # NOTE: not tests.conftest's, so the GPU cases run with --noconftest

#: The marks of a parameter case that runs on CUDA: a ``gpu`` test, skipped without a GPU.
ON_CUDA = (pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))

#: ``interpret`` for a test parametrized over both places a kernel check runs (the CUDA one is a ``gpu`` test).
INTERPRETER_AND_CUDA = [pytest.param(True, id="interpreter"), pytest.param(False, id="cuda", marks=ON_CUDA)]


def run_kernel_check(code: str, interpret: bool) -> None:
    """Run ``code`` (which prints ``ok`` when every check passed) in a fresh interpreter of this repository, with
    ``DEVICE`` defined as where it runs (``cpu`` under the interpreter, else ``cuda``); skipped where Triton is
    not installed."""
    pytest.importorskip("triton")
    env = {**os.environ, "PYTHONPATH": str(REPO), **({"TRITON_INTERPRET": "1"} if interpret else {})}
    device = "cpu" if interpret else "cuda"
    result = subprocess.run([sys.executable, "-c", f"DEVICE = {device!r}\n{code}"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def assert_cast_matches(got: torch.Tensor, amax: torch.Tensor, want: torch.Tensor, want_amax: torch.Tensor,
                        dtype: torch.dtype, device: str, same_bytes: bool) -> None:
    """A kernel's scaled, saturating cast (and its amax) against the tensor code's, inside a kernel check: on
    CUDA the same bytes (``same_bytes``) or, where the kernel may fuse a multiply-add the tensor code rounds
    twice, rarely one FP8 step apart; under the interpreter (which rounds fp32 -> bf16 towards zero) within
    two bf16 steps."""
    assert got.dtype == dtype and got.shape == want.shape and amax.shape == ()
    assert got.float().abs().max() == torch.finfo(dtype).max  # saturated, not inf
    if device == "cuda" and same_bytes:
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)) and torch.equal(amax, want_amax)
        return
    if device == "cuda":
        step = 2.0 ** -2 if dtype == torch.float8_e5m2 else 2.0 ** -3
        assert (got.view(torch.uint8) != want.view(torch.uint8)).float().mean() < 1e-3
        torch.testing.assert_close(got.float(), want.float(), rtol=step, atol=0)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=0)
    torch.testing.assert_close(amax, want_amax, rtol=2 ** -7, atol=0)
