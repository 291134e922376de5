"""Our kernel ops without Triton (CPU-only installs): plain custom ops running the tensor code, registered
without the warning ``torch.library.triton_op`` logs per op there; with Triton, launchers that hand their kernels
whole tensors only."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.trainer.kernels.triton_support import REPO

WITHOUT_TRITON = textwrap.dedent("""
    import sys
    sys.modules["triton"] = None  # as if not installed
    import torch
    from trainer.kernels.ops import HAVE_TRITON
    from trainer.kernels.fp8_transpose import fp8_transpose
    from trainer.model.rotary import rotary_heads, rotary_heads_values
    from trainer.kernels.swiglu import reference_backward, swiglu_backward
    assert not HAVE_TRITON
    matrix = (torch.randn(32, 48) * 8).to(torch.float8_e4m3fn)
    assert torch.equal(fp8_transpose(matrix).view(torch.uint8), matrix.t().contiguous().view(torch.uint8))
    fused, grad = torch.randn(4, 32), torch.randn(4, 16)
    compiled = torch.compile(swiglu_backward)
    assert torch.equal(swiglu_backward(fused, grad), reference_backward(fused, grad))
    torch.testing.assert_close(compiled(fused, grad), reference_backward(fused, grad))
    qkv = torch.randn(1, 3, 4 * 8, requires_grad=True)
    tables = torch.randn(1, 3, 1, 8), torch.randn(1, 3, 1, 8)
    gradients = [torch.autograd.grad(sum(t.sum() for t in f(qkv, tables, (1, 2, 8))), qkv)[0]
                 for f in (rotary_heads, rotary_heads_values)]
    torch.testing.assert_close(*gradients)
    print("ok")
""")


@pytest.mark.slow  # a fresh interpreter importing torch and the trainer
def test_without_triton_the_ops_are_custom_ops_running_tensor_code_and_say_nothing():
    result = subprocess.run([sys.executable, "-c", WITHOUT_TRITON], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
    assert "Triton not available" not in result.stderr


class _LaunchRecorder:
    """Stands in for ``wrap_triton``: records every tensor a launcher hands a kernel, launches nothing."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []

    def __call__(self, kernel):
        return self

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.tensors += [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        return launch


def _swiglu_cast() -> None:
    from trainer.kernels.triton_kernels.swiglu import launch

    for transposed in (False, True):
        launch(torch.randn(64, 256), torch.randn(64, 128), torch.tensor(4.0), torch.float8_e5m2,
                          transposed=transposed)


def _rotary() -> None:
    from tests.trainer.kernels.test_rotary import tables
    from trainer.kernels.triton_kernels.rotary import launch

    grads = [torch.randn(2, 96, heads, 32).bfloat16() for heads in (8, 4, 4)]
    inputs = (*grads, *tables(2, 96, 32, torch.bfloat16), (4, 2, 32))
    launch(*inputs)
    for transposed in (False, True):
        launch(*inputs, torch.tensor(4.0), torch.float8_e5m2, transposed=transposed)


def _transpose() -> None:
    from trainer.kernels.triton_kernels.fp8_transpose import launch

    launch(torch.randn(64, 96).to(torch.float8_e4m3fn))


#: Each module defining a Triton op launcher, and a call of it on whole tensors.
LAUNCHES = {"trainer.kernels.triton_kernels.swiglu": _swiglu_cast, "trainer.kernels.triton_kernels.rotary": _rotary,
            "trainer.kernels.triton_kernels.fp8_transpose": _transpose}


@pytest.mark.parametrize("module", LAUNCHES)
def test_no_launcher_hands_a_kernel_a_view_at_an_offset(module, monkeypatch):
    """Given whole tensors, every launcher of our Triton ops passes its kernels whole tensors too: compiled, torch
    2.11's Inductor clones a view at a storage offset that a user kernel writes by reading past the buffer it
    materialised (pytorch#192226; the RoPE cast's slices of one amax buffer faulted on the H200)."""
    recorder = _LaunchRecorder()
    monkeypatch.setattr(importlib.import_module(module), "wrap_triton", recorder)
    LAUNCHES[module]()
    assert recorder.tensors and all(t.storage_offset() == 0 for t in recorder.tensors)
