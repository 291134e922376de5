"""Seeds and the state of every random number generator (Python, numpy, torch CPU and CUDA): captured into
checkpoints and restored on resume, part of what makes a resumed run equal an uninterrupted one."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> tuple[dict, dict]:
    """Every generator's state, checkpointable: (JSON-able Python/numpy states, torch state tensors)."""
    version, words, gauss = random.getstate()
    kind, keys, position, has_gauss, cached = np.random.get_state()
    plain = {"python": [version, list(words), gauss],
             "numpy": [kind, keys.tolist(), int(position), int(has_gauss), float(cached)]}
    tensors = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        tensors["torch_cuda"] = torch.cuda.get_rng_state(device)
    return plain, tensors


def set_rng_state(plain: dict, tensors: dict, device: torch.device) -> None:
    """Restore what :func:`rng_state` captured."""
    version, words, gauss = plain["python"]
    random.setstate((version, tuple(words), gauss))
    kind, keys, position, has_gauss, cached = plain["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    if device.type == "cuda" and "torch_cuda" in tensors:
        torch.cuda.set_rng_state(tensors["torch_cuda"], device)
