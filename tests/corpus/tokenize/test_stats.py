"""Run statistics: the peak RSS a run reports is its own, not its parent's."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

CHILD = "from corpus.tokenize.stats import peak_rss_mb; print(peak_rss_mb())"
# A 300 MB parent starts the child: Linux carries the parent's ru_maxrss over fork and exec.
PARENT = ("import subprocess, sys, numpy as np; big = np.ones(300_000_000, np.uint8); "
          f"sys.exit(subprocess.call([sys.executable, '-c', {CHILD!r}]))")


def test_peak_rss_is_this_process_own_not_the_parents():
    done = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, cwd=REPO, check=True)
    assert float(done.stdout) < 200, done.stdout
