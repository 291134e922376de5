"""Where and in which precision this process computes: the device (one GPU per process under torchrun), the
compute dtype and how to enter it, and device values read on the host without waiting for queued work."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable

import torch

from corpus.core.errors import ConfigError
from trainer.config.schema import TrainingConfig


def pick_device(name: str) -> torch.device:
    """``cuda``/``cpu`` as asked; ``auto`` takes CUDA when available (GPU ``LOCAL_RANK`` under torchrun)."""
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the torch build)")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))  # torchrun: one GPU per process of a node
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} CUDA device(s) are "
                              "visible: start at most that many processes per node (torchrun --nproc-per-node)")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    return device


@dataclass(frozen=True)
class Precision:
    """The compute dtype and how to enter it (the weights' and optimizer state's dtypes are
    ``--main-params-dtype`` and ``--exp-avg[-sq]-dtype``)."""

    name: str
    device: torch.device

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the matmuls (what attention sees)."""
        return torch.bfloat16 if self.name == "bf16" else torch.float32

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to bf16 for ``bf16``; nothing for fp32."""
        if self.name == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


def pick_precision(config: TrainingConfig, device: torch.device) -> Precision:
    """bf16 autocast on CUDA and fp32 on CPU unless ``--precision``/``--bf16`` says otherwise."""
    name = config.precision
    if name == "auto":
        name = "bf16" if device.type == "cuda" else "fp32"
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # fp32 matmuls on GPU use TF32 tensor cores
    return Precision(name, device)


def fetch_later(values: torch.Tensor) -> Callable[[], list[float]]:
    """Start copying ``values`` (on any device) to the host without waiting for the GPU's queued work, and
    return the function that waits for that copy alone and gives the values: the GPU can be handed more
    work (the optimizer step) before Python looks at them."""
    if values.device.type != "cuda":
        read = values.tolist()  # host values cost no wait
        return lambda: read
    host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    host.copy_(values, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()

    def wait() -> list[float]:
        copied.synchronize()
        return host.tolist()

    return wait
