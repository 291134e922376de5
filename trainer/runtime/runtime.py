"""Process-level concerns of a run: device and precision, seeds and RNG state, preemption signals, when
Python collects garbage.

The random state of every generator (Python, numpy, torch CPU and CUDA) is captured into checkpoints
and restored on resume, which is part of what makes a resumed run equal an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch

from trainer.config.schema import TrainingConfig
from trainer.errors import ConfigError

log = logging.getLogger(__name__)


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


@dataclass
class StopRequest:
    """Why the loop should save and stop early: SIGTERM (preemption), ``--exit-duration-in-mins`` or
    ``--exit-interval``."""

    deadline: float | None
    interval: int | None
    reason: str | None = None
    _previous: dict = field(default_factory=dict)

    def check(self, step: int) -> str | None:
        """The reason to stop after ``step``, or None to go on."""
        if self.reason is None and self.deadline is not None and time.monotonic() >= self.deadline:
            self.reason = "--exit-duration-in-mins reached"
        if self.reason is None and self.interval and step % self.interval == 0:
            self.reason = f"--exit-interval {self.interval} reached"
        return self.reason


@contextlib.contextmanager
def stop_on_signals(config: TrainingConfig) -> Iterator[StopRequest]:
    """Turn SIGTERM/SIGUSR1 into a :class:`StopRequest` the loop polls between steps (so the step in
    flight finishes and a checkpoint is written); restores the previous handlers on exit."""
    minutes = config.exit_duration_in_mins
    request = StopRequest(None if minutes is None else time.monotonic() + 60.0 * minutes, config.exit_interval)

    def handler(number: int, frame: object) -> None:
        request.reason = f"received {signal.Signals(number).name}"
        log.warning("%s: finishing this step, saving a checkpoint, then exiting", request.reason)

    if threading.current_thread() is threading.main_thread():  # signal handlers can only be set there
        for number in (signal.SIGTERM, signal.SIGUSR1):
            request._previous[number] = signal.signal(number, handler)
    try:
        yield request
    finally:
        for number, previous in request._previous.items():
            signal.signal(number, previous)


class GarbageCollection:
    """``--manual-gc``: Python's automatic collector stays off while the loop runs; :meth:`after_step` and
    :meth:`before_pause` collect at the points the flags name.

    Why (Megatron's reason for the flag): the loop waits for the GPU each step (loss, gradient norm), so a
    collection stalls the step it falls in, on a different step on each rank, and under data parallelism
    every rank waits for the slowest. On one H200 it changed nothing measurable (bench/train_h200.md)."""

    def __init__(self, config: TrainingConfig) -> None:
        self.enabled, self.interval = config.manual_gc, config.manual_gc_interval

    def after_step(self, step: int) -> None:
        """Collect after step ``step`` when it is a multiple of ``--manual-gc-interval``."""
        if self.enabled and self.interval and step % self.interval == 0:
            gc.collect()

    def before_pause(self) -> None:
        """Collect before an evaluation or a checkpoint, which wait anyway."""
        if self.enabled:
            gc.collect()


@contextlib.contextmanager
def garbage_collection(config: TrainingConfig) -> Iterator[GarbageCollection]:
    """The run's :class:`GarbageCollection`; the automatic collector is off inside under ``--manual-gc``
    (restored on exit)."""
    collection = GarbageCollection(config)
    was_enabled = gc.isenabled()
    if collection.enabled:
        gc.collect()
        gc.disable()
        log.info("garbage collection: manual (every %s)", f"{collection.interval} steps" if collection.interval
                 else "evaluation and checkpoint")
    try:
        yield collection
    finally:
        if was_enabled:
            gc.enable()
