"""The GPU's SM clock and power while a benchmark runs, from ``nvidia-smi`` every 100 ms.

At the speed shape an H200 runs at its 700 W power cap: the SM clock swings below its maximum with the power
controller and some steps run several percent slower than their neighbours, for the baselines as for the trainer
(bench/RESULTS.md). The clock's summary beside each run's rate shows whether two runs compared ran at the same
clock.
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
