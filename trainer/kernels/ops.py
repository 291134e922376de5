"""How our hand-written Triton kernels become torch ops, and the one way an op chooses between its Triton kernel
and its formula in tensor code.

Every op of this package is a pair: a formula in tensor code (it runs anywhere, and the tests hold the kernel to
it) and a Triton kernel in ``trainer.kernels.triton_kernels.<name>`` (CUDA). :func:`launcher` picks the kernel
module's ``launch`` on CUDA where Triton imports, else the formula. Kernel modules import Triton at their top and
are imported the first time a launch needs them (:func:`triton_kernels`), so CPU-only installs never import
Triton, and ``TRITON_INTERPRET=1`` set before that first use runs the kernels on the CPU (the tests do).

:func:`kernel_op` registers an op's body: where Triton is importable as a ``torch.library.triton_op`` (compiled,
AOTAutograd traces the body and Inductor launches the kernels itself: no dispatcher or Python launcher per call),
elsewhere as a plain custom op running the same body (``triton_op`` would work there too, but logs a warning for
every op it registers).
"""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType
from typing import Callable

import torch

from corpus.core.optional import missing

log = logging.getLogger(__name__)

#: Whether Triton imports here (CUDA builds of torch bring it; CPU-only installs may not).
HAVE_TRITON = missing("triton") is None


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


@functools.cache
def triton_kernels(name: str) -> ModuleType | None:
    """The Triton kernels of op ``name`` (the module ``trainer.kernels.triton_kernels.<name>``), imported now, or
    None where Triton is not importable (said once in the log: the op then runs as tensor code)."""
    if not HAVE_TRITON:
        log.warning("%s runs as tensor code, not as one Triton kernel: %s", name, missing("triton"))
        return None
    return importlib.import_module(f"{__package__}.triton_kernels.{name}")


def launcher(name: str, reference: Callable, device: torch.device) -> Callable:
    """What the body of op ``name`` runs on ``device``: its Triton kernels' ``launch`` on CUDA, else ``reference``,
    the same computation in tensor code taking the same arguments."""
    module = triton_kernels(name) if device.type == "cuda" else None
    return module.launch if module is not None else reference
