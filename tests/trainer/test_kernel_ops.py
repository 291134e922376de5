"""Our kernel ops without Triton (CPU-only installs): plain custom ops running the tensor code, registered
without the warning ``torch.library.triton_op`` logs per op there."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.trainer.triton_support import REPO

WITHOUT_TRITON = textwrap.dedent("""
    import sys
    sys.modules["triton"] = None  # as if not installed
    import torch
    from trainer.kernel_ops import HAVE_TRITON
    from trainer.fp8.transpose import fp8_transpose
    from trainer.swiglu import reference_backward, swiglu_backward
    assert not HAVE_TRITON
    matrix = (torch.randn(32, 48) * 8).to(torch.float8_e4m3fn)
    assert torch.equal(fp8_transpose(matrix).view(torch.uint8), matrix.t().contiguous().view(torch.uint8))
    fused, grad = torch.randn(4, 32), torch.randn(4, 16)
    compiled = torch.compile(swiglu_backward)
    assert torch.equal(swiglu_backward(fused, grad), reference_backward(fused, grad))
    torch.testing.assert_close(compiled(fused, grad), reference_backward(fused, grad))
    print("ok")
""")


def test_without_triton_the_ops_are_custom_ops_running_tensor_code_and_say_nothing():
    result = subprocess.run([sys.executable, "-c", WITHOUT_TRITON], cwd=REPO, capture_output=True, text=True,
                            timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
    assert "Triton not available" not in result.stderr
