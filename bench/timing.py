"""How the benchmarks time GPU work and where they write their numbers: one module, so that every figure in
bench/RESULTS.md was taken the same way.

- :func:`seconds_per_call`: wall clock between two device synchronisations around back-to-back calls (host and
  GPU together, as a training loop sees a step): the baselines' steps and the chip's ceilings;
- :func:`median_ms` / :func:`per_call_microseconds`: CUDA events around rounds of back-to-back calls, the median
  round (the chip's clock drifts within a run; the median ignores a slow round);
- :func:`kernel_microseconds`: the GPU time of named kernels in a torch.profiler trace (a kernel alone, without
  the Python around its launch);
- :func:`warm_up`: a busy GPU first, since an idle chip starts at a low clock and the first shape timed would
  pay for the ramp;
- :func:`results_folder` / :func:`write_results`: ``$OUT`` (what a GPU machine sends back), else the temporary
  folder.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from corpus.core.atomic_write import write_atomically


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing to wait for without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def seconds_per_call(call: Callable[[], object], calls: int, warmup: int) -> tuple[float, object]:
    """Mean wall-clock seconds of one of ``calls`` back-to-back ``call()``s after ``warmup`` untimed ones
    (compilation, allocator growth), synchronised before and after; and the last call's result."""
    for _ in range(warmup):
        call()
    synchronize()
    started = time.perf_counter()
    result = None
    for _ in range(calls):
        result = call()
    synchronize()
    return (time.perf_counter() - started) / calls, result


def median_ms(action: Callable[[], None], repeats: int) -> float:
    """Median milliseconds of ``action`` over ``repeats`` CUDA-event-timed calls, after three warm-ups."""
    for _ in range(3):
        action()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        action()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def per_call_microseconds(call: Callable[[], object], calls: int = 20, rounds: int = 5) -> float:
    """GPU µs of one ``call()`` among ``calls`` back-to-back ones (so its launch overlaps the previous call's
    work, as in a step): the :func:`median_ms` of ``rounds`` such rounds, per call."""
    return median_ms(lambda: [call() for _ in range(calls)], rounds) / calls * 1000


def kernel_microseconds(call: Callable[[], object], names: tuple[str, ...], calls: int = 20) -> float:
    """GPU µs per ``call()`` of the kernels (and device copies) whose names contain one of ``names``, the mean
    over ``calls`` calls traced by torch.profiler after three warm-ups."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        trace.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    total = sum(e["dur"] for e in events
                if e.get("cat") in ("kernel", "gpu_memcpy") and any(n in e["name"] for n in names))
    return total / calls


def warm_up(seconds: float = 2.0) -> None:
    """Keep the GPU copying for ``seconds``: an idle chip starts at a low clock, and whatever is timed first
    would run slower than the same work later in the run."""
    source = torch.empty(2**30, device="cuda", dtype=torch.uint8)
    target = torch.empty_like(source)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(10):
            target.copy_(source)
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > seconds * 1000:
            return


def results_folder() -> Path:
    """Where a benchmark writes its files: ``$OUT`` when set (the folder a GPU machine sends back), else the
    system's temporary folder."""
    folder = Path(os.environ.get("OUT") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(name: str, results: object) -> Path:
    """Every number of a benchmark as ``<results_folder()>/<name>.json`` (written whole, then renamed, so that a
    run killed at its time limit leaves the previous file, not half of one); returns its path."""
    target = results_folder() / f"{name}.json"
    write_atomically(target, json.dumps(results, indent=1, default=str))
    return target
