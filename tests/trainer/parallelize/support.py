"""Running the trainer on several CPU processes (gloo) inside a test, and comparing metrics files.

Ranks are started with ``torch.multiprocessing`` on a free port of 127.0.0.1, one intra-op thread each (the
machine has 2 cores for every rank of every test). Each rank is a fresh interpreter (``spawn``): a rank forked
from the test process inherits the state of every native library the session used before (OpenMP's idle
workers among them), and forked ranks have died of heap corruption ("malloc(): unaligned tcache chunk
detected"); a spawned rank starts clean. A fresh rank imports torch and the trainer again (~6 s of CPU), so a
group of ranks runs several training runs in a row over one process group, which saves the start-up of 2–8
processes per run.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.trainer.conftest import read_metrics, tiny_overrides

#: Stated tolerance of TP/PP/DP runs against one process (fp32 on CPU): only the order of floating-point
#: reductions differs (sums split over ranks, other bucket sizes), so per-step losses and gradient norms
#: agree to this relative error over 20 steps.
RELATIVE_TOLERANCE = 1e-4

#: A 4-layer model every layout of the tests can split: 4 query heads and 2 KV heads (TP 2 keeps whole KV
#: groups), 4 layers (PP 2 with 2 virtual stages), vocabulary 96 padded to a multiple of 16 × TP (so
#: TP 1 and TP 2 build the same model, with no padding rows).
MODEL = {"num_layers": 4, "hidden_size": 32, "num_attention_heads": 4, "num_query_groups": 2, "ffn_hidden_size": 64,
         "vocab_size": 96, "make_vocab_size_divisible_by": 16}


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker(rank: int, world: int, port: int, jobs: list) -> None:
    from trainer.config.loading import load_config
    from trainer.run.loop import train

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=2))  # a rank left waiting fails the test soon
    try:
        for job in jobs:
            if isinstance(job, dict):
                train(load_config(None, job))
            else:
                function, arguments = job
                function(**arguments)
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, jobs: list) -> None:
    """Run each job in turn on ``world`` fresh CPU ranks: a dict of flag-style overrides is trained with
    ``trainer.run.loop.train``; a ``(function, kwargs)`` pair (an importable function) is called."""
    mp.start_processes(_worker, args=(world, free_port(), jobs), nprocs=world, start_method="spawn")


def layout_overrides(folder: Path, steps: int = 20, **parallel) -> dict:
    """The runs compared across layouts: 20 steps of global batch 8 (micro-batch 1, so 8 micro-batches at
    DP 1 and 2 at DP 4), clipping at 0.8 (active in the first steps only), an evaluation at step 10."""
    return tiny_overrides(folder, model=MODEL, training={"train_iters": steps, "micro_batch_size": 1,
                                                         "global_batch_size": 8},
                          optim={"clip_grad": 0.8}, logging={"eval_interval": 10}, parallel=parallel)


def curve(path: Path) -> list[tuple]:
    """(step, loss, grad norm) per training record and (step, split, eval loss) per evaluation."""
    return [(r["step"], r["loss"], r["grad_norm"]) if "loss" in r else (r["step"], r["split"], r["eval_loss"])
            for r in read_metrics(path)]


def assert_same_curve(actual: list[tuple], expected: list[tuple], rel: float = RELATIVE_TOLERANCE) -> None:
    """Same steps and kinds of records, every number within ``rel`` of the reference's."""
    assert [record[:1] for record in actual] == [record[:1] for record in expected]
    for got, want in zip(actual, expected):
        for x, y in zip(got[1:], want[1:]):
            if isinstance(y, float):
                assert abs(x - y) <= rel * abs(y), f"{got} vs reference {want}"
            else:
                assert x == y, f"{got} vs reference {want}"
