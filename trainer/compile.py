"""``--compile``: torch.compile each transformer block in place, and the fused loss's per-chunk step.

Per block rather than the whole model: one graph compiled once serves every layer (the layers share
code and shapes), compile time stays that of one block, and the embedding, the output GEMMs and the
optimizer stay eager. Inside a block Inductor fuses RMSNorm, RoPE, SwiGLU, the residual adds and the
FP8 scaling/casts around the GEMMs. The fused loss's softmax step (``trainer.cross_entropy``) compiles
into one reduction and one pass writing the gradient of the logits. ``nn.Module.compile`` keeps
parameter names, so checkpoints of a compiled run load into an eager one and back.
"""

from __future__ import annotations

import logging

import torch

from trainer.cross_entropy import compile_chunk_loss
from trainer.errors import ConfigError
from trainer.model import GPT

log = logging.getLogger(__name__)

#: Inductor's coordinate-descent search over each reduction kernel's launch parameters: the FP8 blocks'
#: amax and norm reductions ran ~2% faster per step on an H200 (bench/train_h200.md), at some compile time.
INDUCTOR_OPTIONS = {"coordinate_descent_tuning": True}


def should_compile(mode: str, device: torch.device, why_eager: str | None) -> bool:
    """Whether ``--compile mode`` compiles here: ``blocks`` always (an error when ``why_eager`` says the
    blocks must stay eager), ``auto`` on CUDA unless ``why_eager`` (logged), ``off`` never."""
    if mode == "blocks" and why_eager:
        raise ConfigError(f"--compile blocks: {why_eager}; use --compile off (or auto)")
    if mode == "auto" and device.type == "cuda" and why_eager:
        log.info("--compile auto: blocks stay eager: %s", why_eager)
    return mode == "blocks" or (mode == "auto" and device.type == "cuda" and why_eager is None)


def compile_model(model: GPT) -> None:
    """Compile every block of ``model`` in place (their state-dict keys are unchanged) and its fused loss's
    per-chunk step."""
    for layer in model.layers:
        layer.compile(options=INDUCTOR_OPTIONS)
    model.chunk_loss = compile_chunk_loss()
