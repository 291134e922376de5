"""Pools are sized by the cores a process may use, not by the machine's: a job bound to fewer cores (Slurm,
a container's cpuset, taskset) must not start a thread per core of the host."""

import os
from pathlib import Path

import pytest

from corpus.core.cores import available_cores
from tests.corpus.tokenize.support import WEB, config


@pytest.fixture
def one_core():
    """This thread bound to one of its cores for the test, then given all of them back."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    yield
    os.sched_setaffinity(0, allowed)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_a_process_bound_to_one_core_sizes_its_pools_for_one(one_core):
    assert available_cores() == 1
    default = config(Path("."), [WEB], workers=0, threads_per_worker=None)
    assert default.processes == 1 and default.threads_for(default.processes) == 1
