"""(helper) The GPU's SM clock and power while a benchmark runs, from ``nvidia-smi`` every 100 ms.

Every speed run of session 5 dipped ~6% at steps 5, 8–9 and 12–13 (~1 s apart at ~0.27 s a step), with
or without Python's garbage collector, on real or mock data. Session 6 found why with this sampler and a
trace: the GPU stayed 99% busy while the 700 W power cap (clock-event reason ``0x4``) held the SM clock at
~1,575–1,665 of 1,980 MHz, swinging with the power controller — for the baselines too (train_h200.md,
seventh run). Summarising the clock beside each run keeps that visible.
"""

from __future__ import annotations

import contextlib
import csv
import shutil
import statistics
import subprocess
from pathlib import Path
from typing import Iterator

QUERY = "clocks.sm,clocks.max.sm,power.draw,power.limit"


@contextlib.contextmanager
def sampled(path: Path) -> Iterator[None]:
    """Write ``nvidia-smi``'s samples of GPU 0 to ``path`` (CSV) while the block runs; nothing where there is
    no ``nvidia-smi``."""
    if shutil.which("nvidia-smi") is None:
        yield
        return
    with path.open("w") as sink:
        sampler = subprocess.Popen(["nvidia-smi", "-i", "0", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                    "-lms", "100"], stdout=sink, stderr=subprocess.DEVNULL)
        try:
            yield
        finally:
            sampler.terminate()
            sampler.wait(timeout=10)


def summary(path: Path) -> dict:
    """Mean and lowest SM clock (MHz), the share of samples below the maximum clock, mean and highest power
    (W) and the power limit, over the samples of :func:`sampled` taken while the GPU drew over half its
    limit (the busy part of the run); {} when there are none."""
    if not path.exists():
        return {}
    rows = []
    for fields in csv.reader(path.read_text().splitlines()):
        try:
            rows.append([float(field) for field in fields])
        except ValueError:  # "[N/A]" or a line cut by the sampler's end
            continue
    busy = [row for row in rows if len(row) == 4 and row[2] > row[3] / 2]
    if not busy:
        return {}
    clocks, powers = [row[0] for row in busy], [row[2] for row in busy]
    return {"sm_clock_mean_mhz": statistics.fmean(clocks), "sm_clock_min_mhz": min(clocks),
            "below_max_clock_share": sum(row[0] < row[1] for row in busy) / len(busy),
            "power_mean_w": statistics.fmean(powers), "power_max_w": max(powers), "power_limit_w": busy[0][3],
            "samples": len(busy)}
