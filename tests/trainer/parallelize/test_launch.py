"""``torchrun`` launching ``trainer run`` as a user would (2 CPU processes, gloo, env:// rendezvous on
127.0.0.1): data parallel with the distributed optimizer saves, and a tensor + sequence parallel run
resumes from that checkpoint and continues the same loss curve."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.trainer.parallelize.support import assert_same_curve, curve, free_port

FLAGS = ["--mock-data", "--seq-length", "16", "--preset", "tiny", "--vocab-size", "64",
         "--make-vocab-size-divisible-by", "16", "--train-iters", "6", "--micro-batch-size", "1",
         "--global-batch-size", "4", "--log-interval", "1", "--eval-iters", "0", "--lr", "0.003"]


def torchrun(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), "-m", "cli.trainer", "run", *FLAGS, *args]
    environment = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow  # six fresh interpreters (torchrun and two ranks, twice), each importing torch and the trainer
def test_torchrun_dp_zero1_then_resume_at_tp2_with_sequence_parallel(tmp_path):
    save = tmp_path / "checkpoints"
    first = torchrun("--use-distributed-optimizer", "--overlap-grad-reduce", "--save", str(save),
                     "--save-interval", "3", "--metrics-jsonl", str(tmp_path / "dp2.jsonl"))
    assert first.stdout.count("stopped at step 6 (completed)") == 1
    assert "world 2 = TP 1 × PP 1 × DP 2" in first.stderr and "backend gloo" in first.stderr
    resumed = torchrun("--tp", "2", "--sp", "--load", str(save / "iter_0000003"),
                       "--metrics-jsonl", str(tmp_path / "tp2.jsonl"))
    assert "world 2 = TP 2 × PP 1 × DP 1" in resumed.stderr
    continued = curve(tmp_path / "tp2.jsonl")
    assert [record[0] for record in continued] == [4, 5, 6]
    assert_same_curve(continued, curve(tmp_path / "dp2.jsonl")[3:])
