"""What an FP8 backend is: its registry entry (:class:`FP8Backend`) and what it builds for a run
(:class:`BackendParts`). Each backend's module declares its entry as ``BACKEND``; :mod:`trainer.fp8.backends`
lists the modules, resolves ``--fp8-backend`` and logs the choice."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from trainer.config.schema import FP8Config
from trainer.fp8.scaling import Eligibility
from trainer.model.layers import LocalGemm


def _no_update(chunks: list[torch.nn.Module]) -> None:
    """Nothing to do after a backward pass (the backend keeps its own state, or has none)."""


def _ignore_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """The backend needs nothing from the optimizer."""


def _plain_step(chunks: list[torch.nn.Module]) -> contextlib.AbstractContextManager:
    """A training step as configured (nothing changed around it)."""
    return contextlib.nullcontext()


@dataclass(frozen=True)
class BackendParts:
    """What a backend builds for a run: its local GEMM, the context the forward pass runs in, what runs after
    each step's backward pass (delayed scaling's scale update), the context a training step over the model
    chunks runs in, how many leading steps of a run that context keeps eager (delayed scaling's
    calibration), what it takes from the run's optimizer once built (delayed scaling: the weights'
    amaxes, recorded by the update that writes the weights), and a note for the start-up line."""

    gemm: LocalGemm
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    after_backward: Callable[[list[torch.nn.Module]], None] = _no_update
    step_context: Callable[[list[torch.nn.Module]], contextlib.AbstractContextManager] = _plain_step
    eager_steps: int = 0
    attach_optimizer: Callable[[torch.optim.Optimizer], None] = _ignore_optimizer
    note: str = ""
    """Said after the backend in the start-up line (an option of this backend the run uses), or nothing."""


@dataclass(frozen=True)
class FP8Backend:
    """One registered implementation: the module it needs, the recipes it runs, how to build its parts."""

    name: str
    needs_module: str | None
    """An optional package imported only when the backend is built (None: torch alone)."""
    recipes: tuple[str, ...]
    build: Callable[[FP8Config, str, Eligibility], BackendParts]
    compilable: bool
    """Whether torch.compile can trace its GEMM."""
    summary: str = field(default="")
    """What it is, in a few words of the start-up line."""
    rowwise_blocks: bool = True
    """Its ``blockwise`` recipe is row-wise scales with e4m3 gradients (the torch kernels'), not 128-element
    blocks."""
