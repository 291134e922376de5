"""Running a check of a hand-written Triton kernel in a fresh process: on the CPU under Triton's interpreter
(``TRITON_INTERPRET`` must be set before Triton is first imported), or on CUDA as compiled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]  # NOTE: not tests.conftest's, so the GPU cases run with --noconftest

#: ``interpret`` for a test parametrized over both places a kernel check runs (the CUDA one is a ``gpu`` test).
INTERPRETER_AND_CUDA = [
    pytest.param(True, id="interpreter"),
    pytest.param(False, id="cuda", marks=(pytest.mark.gpu,
                                          pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))),
]


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
