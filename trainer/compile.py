"""``--compile``: torch.compile each transformer block in place.

Per block rather than the whole model: one graph compiled once serves every layer (the layers share
code and shapes), compile time stays that of one block, and the embedding, the fused loss and the
optimizer stay eager. Inside a block Inductor fuses RMSNorm, RoPE, SwiGLU, the residual adds and the
FP8 scaling/casts around the GEMMs. ``nn.Module.compile`` keeps parameter names, so checkpoints of a
compiled run load into an eager one and back.
"""

from __future__ import annotations

import logging

import torch

from trainer.errors import ConfigError

log = logging.getLogger(__name__)


def should_compile(mode: str, device: torch.device, why_eager: str | None) -> bool:
    """Whether ``--compile mode`` compiles here: ``blocks`` always (an error when ``why_eager`` says the
    blocks must stay eager), ``auto`` on CUDA unless ``why_eager`` (logged), ``off`` never."""
    if mode == "blocks" and why_eager:
        raise ConfigError(f"--compile blocks: {why_eager}; use --compile off (or auto)")
    if mode == "auto" and device.type == "cuda" and why_eager:
        log.info("--compile auto: blocks stay eager: %s", why_eager)
    return mode == "blocks" or (mode == "auto" and device.type == "cuda" and why_eager is None)


def compile_blocks(layers: torch.nn.ModuleList) -> None:
    """Compile every block of ``layers`` in place (their state-dict keys are unchanged)."""
    for layer in layers:
        layer.compile()
