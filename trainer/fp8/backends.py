"""FP8 backends behind one registry, chosen once at start-up and logged in one line.

``--fp8-format`` turns FP8 on; ``--fp8-backend`` picks the implementation of the transformer GEMMs:

| name | what | recipes |
|---|---|---|
| ``te`` | Transformer Engine ``te.Linear`` per weight | delayed, tensorwise (current scaling), blockwise |
| ``torchao`` | ``torchao.float8`` | tensorwise, blockwise (as torchao's row-wise recipe) |
| ``scaled_mm`` | our ``torch._scaled_mm`` autograd functions | delayed, tensorwise, blockwise (as row-wise scales) |

``auto`` takes, of the backends that import and run the recipe asked for, the fastest on this project's
benchmarks (:data:`FASTEST_FIRST`); ``torch`` does the same without Transformer Engine. A named backend is obeyed,
and a recipe it cannot run is refused with the backends that can: the recipe is never changed behind the user's
back. Every backend keeps the embedding and the output layer in bf16 and applies
:class:`~trainer.fp8.scaling.Eligibility` to the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from corpus.core.errors import ConfigError
from corpus.core.optional import missing
from trainer.config.schema import FP8Config
from trainer.fp8 import scaled_mm, te_gemm, torchao_gemm
from trainer.fp8.scaling import FORMATS, Eligibility
from trainer.fp8.spec import BackendParts, FP8Backend
from trainer.model.layers import GEMMS

log = logging.getLogger(__name__)

#: FP8 tensor cores: Ada (8.9), Hopper (9.0) and later.
MIN_CAPABILITY = (8, 9)


@dataclass(frozen=True)
class FP8Engine:
    """What a run uses: the local GEMM (registered in ``GEMMS`` as ``gemm_name``), whether torch.compile
    can trace it, the one-line description logged at start, and the backend's other parts."""

    gemm_name: str
    compilable: bool = True
    description: str = "bf16"
    parts: BackendParts = BackendParts(F.linear)


#: Every backend, by name: each module declares its own entry (``BACKEND``).
BACKENDS: dict[str, FP8Backend] = {backend.name: backend for backend in (te_gemm.BACKEND, torchao_gemm.BACKEND,
                                                                        scaled_mm.BACKEND)}

#: Backends, fastest first at the 1.3b speed shape on one H200 (bench/RESULTS.md: the trainer FP8 rows and "the
#: te FP8 backend"): scaled_mm's fused casts and compiled blocks beat torchao's, and TE's modules keep the blocks
#: from compiling. Blockwise has not been measured; it keeps the same order (the compiled backends first).
FASTEST_FIRST: tuple[str, ...] = ("scaled_mm", "torchao", "te")

#: Names that pick the fastest backend of a list that imports and runs the recipe; ``torch``: torch-native ones only.
ALIASES: dict[str, tuple[str, ...]] = {"auto": FASTEST_FIRST,
                                       "torch": tuple(name for name in FASTEST_FIRST if name != "te")}

RECIPE_TEXT = {"delayed": "delayed scaling (amax history {history} steps, {algo})",
               "tensorwise": "current per-tensor scaling", "blockwise": "128-element block scaling"}


def missing_module(backend: FP8Backend) -> str | None:
    """Why ``backend`` cannot be imported here (None when it can)."""
    return None if backend.needs_module is None else missing(backend.needs_module)


def check_hardware(device: torch.device) -> None:
    """Refuse FP8 where there are no FP8 tensor cores, saying what to do instead."""
    if device.type != "cuda":
        raise ConfigError(f"--fp8-format needs a CUDA GPU with FP8 tensor cores (compute capability 8.9+: Ada, Hopper, "
                          f"Blackwell); this run is on {device.type}. Drop --fp8-format to train in bf16/fp32")
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        raise ConfigError(f"--fp8-format needs compute capability 8.9+ (Ada, Hopper, Blackwell); "
                          f"{torch.cuda.get_device_name(device)} has {capability[0]}.{capability[1]}. Drop "
                          "--fp8-format "
                          "to train in bf16")


def _runs(backend: FP8Backend, recipe: str) -> str | None:
    """Why ``backend`` cannot run ``recipe`` here (None when it can)."""
    if recipe not in backend.recipes:
        return f"{backend.name} has no {recipe} recipe"
    return missing_module(backend)


def _who_can(recipe: str) -> str:
    """The backends that run ``recipe``, fastest first, each marked when it does not import here."""
    ranked = [*FASTEST_FIRST, *(name for name in BACKENDS if name not in FASTEST_FIRST)]
    able = [BACKENDS[name] for name in ranked if recipe in BACKENDS[name].recipes]
    return ", ".join(backend.name + ("" if missing_module(backend) is None else " (not installed here)")
                     for backend in able)


def resolve_backend(name: str, recipe: str) -> tuple[FP8Backend, str]:
    """The backend ``--fp8-backend name`` means here for ``--fp8-recipe recipe``, and why it was taken (for the
    start-up line). An alias takes the fastest candidate that imports and runs the recipe; a named backend is
    taken as asked or refused with the backends that can run the recipe."""
    if name in ALIASES:
        passed_over = []
        for candidate in (BACKENDS[backend] for backend in ALIASES[name]):
            reason = _runs(candidate, recipe)
            if reason is None:
                why = f"--fp8-backend {name}: the fastest for the {recipe} recipe (bench/RESULTS.md)"
                return candidate, why + (f"; passed over: {'; '.join(passed_over)}" if passed_over else "")
            passed_over.append(reason)
        raise ConfigError(f"--fp8-backend {name} --fp8-recipe {recipe}: no backend here runs it "
                          f"({'; '.join(passed_over)}); backends that can: {_who_can(recipe)}")
    if name not in BACKENDS:
        raise ConfigError(f"--fp8-backend {name!r}: unknown; choose one of {', '.join([*ALIASES, *BACKENDS])}")
    backend = BACKENDS[name]
    if recipe not in backend.recipes:
        raise ConfigError(f"--fp8-backend {name} cannot run --fp8-recipe {recipe}; backends that can: "
                          f"{_who_can(recipe)}. Choose one of them (or --fp8-backend auto), or another --fp8-recipe "
                          f"({', '.join(backend.recipes)})")
    reason = missing_module(backend)
    if reason:
        raise ConfigError(f"--fp8-backend {name}: {reason}; install it or use --fp8-backend auto")
    return backend, f"--fp8-backend {name}"


def select_fp8(config: FP8Config, device: torch.device, plain_gemm: str) -> FP8Engine:
    """The run's FP8 engine (``plain_gemm`` without ``--fp8-format``), its GEMM registered in ``GEMMS``."""
    if config.fp8_format is None:
        return FP8Engine(plain_gemm)
    recipe = config.fp8_recipe
    backend, why = resolve_backend(config.fp8_backend, recipe)  # first: a wrong combination is wrong on any device
    check_hardware(device)
    eligible = Eligibility(config.fp8_min_dim)
    parts = backend.build(config, recipe, eligible)
    name = f"fp8_{backend.name}"
    GEMMS[name] = parts.gemm
    forward_dtype, grad_dtype = FORMATS[config.fp8_format]
    recipe_text = RECIPE_TEXT[recipe].format(history=config.fp8_amax_history_len, algo=config.fp8_amax_compute_algo)
    if recipe == "blockwise" and backend.rowwise_blocks:
        grad_dtype = forward_dtype  # row-wise FP8 kernels take e4m3 operands only
        recipe_text = "row-wise scales (the torch backends' block scaling)"
    description = (f"FP8 {config.fp8_format} ({str(forward_dtype)[6:]} forward, {str(grad_dtype)[6:]} gradients), "
                   f"recipe {recipe}: {recipe_text}; backend {backend.name} ({backend.summary}; {why}); GEMMs with "
                   f"widths >= {config.fp8_min_dim} and every dimension a multiple of 16, embedding and output layer "
                   "in bf16") + (f"; {parts.note}" if parts.note else "")
    log.info("precision: %s", description)
    return FP8Engine(name, backend.compilable, description, parts)
