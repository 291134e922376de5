"""How our hand-written Triton kernels become torch ops: :func:`kernel_op`, whose bodies run :func:`launcher`'s
choice.

Where Triton is importable the op is a ``torch.library.triton_op``: compiled, AOTAutograd traces its body and
Inductor launches the kernels itself (no dispatcher or Python launcher per call; bench/train_h200.md, tenth
run). Without Triton (CPU-only installs) it is a plain custom op around the same body, which then runs the
tensor code: ``triton_op`` itself would work there too, but logs a warning for every op it registers.
"""

from __future__ import annotations

from typing import Callable

import torch

try:  # NOTE: imported, not only looked up: a module set to None in sys.modules (tests) must count as missing
    import triton  # noqa: F401

    HAVE_TRITON = True  # CUDA builds of torch bring it; CPU-only installs may not
except ImportError:
    HAVE_TRITON = False


def kernel_op(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering ``fn`` (its body: the Triton launch on CUDA, tensor code elsewhere; no mutated
    arguments) as the op ``name``; the body also serves as the op's fake implementation."""

    def register(fn: Callable) -> Callable:
        if HAVE_TRITON:
            return torch.library.triton_op(name, fn, mutates_args=())
        op = torch.library.custom_op(name, fn, mutates_args=())
        op.register_fake(fn)
        return op

    return register


def launcher(factory: Callable[[], Callable | None], reference: Callable, device: torch.device) -> Callable:
    """What a kernel op's body runs on ``device``: the Triton launcher ``factory()`` builds (None without Triton)
    on CUDA, else ``reference``, the same computation in tensor code with the same arguments."""
    return (factory() if device.type == "cuda" else None) or reference
