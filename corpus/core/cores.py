"""How many cores this process may use, for sizing thread pools and worker counts."""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity where the platform has one, so a Slurm binding, a
    container's cpuset or ``taskset`` counts (``os.cpu_count()`` is the machine's, and sizing pools by it
    oversubscribes a bound job)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
