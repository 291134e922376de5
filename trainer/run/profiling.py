"""``--profile``: trace steps [start, end) with torch.profiler (a Chrome trace file), or open CUDA's
profiler range for ``nsys profile --capture-range=cudaProfilerApi`` as Megatron does."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.distributed as dist

from corpus.core.errors import ConfigError
from trainer.config.schema import ProfileConfig

log = logging.getLogger(__name__)


class StepProfiler:
    """Called around every step; active only for the configured range."""

    def __init__(self, config: ProfileConfig, tensorboard_dir: str | None, device: torch.device) -> None:
        self.config = config
        self.directory = Path(config.profile_dir or tensorboard_dir or "profile")
        self.device = device
        self.active: torch.profiler.profile | bool | None = None
        if config.profile and not config.use_pytorch_profiler and device.type != "cuda":
            raise ConfigError("--profile without --use-pytorch-profiler drives nsys through CUDA; on CPU add "
                              "--use-pytorch-profiler")

    def before_step(self, step: int) -> None:
        """Start profiling when ``step`` (1-based) is the first of the range."""
        if not self.config.profile or step != self.config.profile_step_start:
            return
        if self.config.use_pytorch_profiler:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.active = torch.profiler.profile(activities=activities, record_shapes=True, with_stack=False)
            self.active.__enter__()
        else:
            torch.cuda.cudart().cudaProfilerStart()
            self.active = True

    def after_step(self, step: int) -> None:
        """Stop (and write the trace) after the last step of the range, or when the run ends early."""
        if self.active is None or step < self.config.profile_step_end - 1:
            return
        self.stop(step)

    def stop(self, last_step: int) -> None:
        """End an open profiling range now."""
        if self.active is None:
            return
        if isinstance(self.active, torch.profiler.profile):
            self.active.__exit__(None, None, None)
            self.directory.mkdir(parents=True, exist_ok=True)
            multi = dist.is_initialized() and dist.get_world_size() > 1
            rank = f"_rank{dist.get_rank()}" if multi else ""  # one file per torchrun process
            trace = self.directory / f"trace_steps_{self.config.profile_step_start}-{last_step}{rank}.json"
            self.active.export_chrome_trace(str(trace))
            log.info("profiler trace of steps %d-%d: %s", self.config.profile_step_start, last_step, trace)
        else:
            torch.cuda.cudart().cudaProfilerStop()
        self.active = None
