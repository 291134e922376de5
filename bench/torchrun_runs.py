"""What the multi-GPU benchmarks share: one ``trainer run`` launched through ``torchrun`` exactly as users
launch it, its steady-state numbers, and per-step loss comparisons between runs.

Every process runs with ``NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1``
(the lent machines do not allow NVLink multicast). Without GPUs the same command trains on CPU ranks
(gloo), which is how these scripts are tried before a GPU machine is lent.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.step_records import steady_means

REPO = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    """A free TCP port of 127.0.0.1 for torchrun's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun_trainer(name: str, gpus: int, flags: list[str], metrics: Path, warmup: int, timeout: float) -> dict:
    """``torchrun --nproc-per-node gpus -m cli.trainer run FLAGS --metrics-jsonl metrics``: the trainer's
    log lines, then its per-step losses and gradient norms and the means of the steps after ``warmup``
    (``{"error": …}`` when it failed)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), "-m", "cli.trainer", "run", "--log-interval", "1",
               "--metrics-jsonl", str(metrics), *flags]
    print(f"\n== {name}\n$ {' '.join(command)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, env={**os.environ, **NO_MULTICAST, "PYTHONPATH": str(REPO)},
                            timeout=timeout, capture_output=True, text=True)
    print("\n".join(line for line in result.stderr.splitlines() if "trainer." in line)[-3000:], flush=True)
    if result.returncode != 0:
        said = dict.fromkeys(line for line in result.stderr.splitlines() if line.startswith("Error:"))  # the CLI's
        print(result.stdout[-2000:], result.stderr[-4000:], *said, sep="\n", flush=True)
        return {"error": f"exit {result.returncode}: {' '.join(said)[:300]}", "seconds": time.monotonic() - started}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if '"loss"' in line]
    return {**steady_means(records, warmup),
            "steps": [r["step"] for r in records], "losses": [r["loss"] for r in records],
            "grad_norms": [r["grad_norm"] for r in records], "seconds": time.monotonic() - started}


def loss_parity(run: dict, reference: dict) -> dict:
    """Per-step loss differences of ``run`` against ``reference`` over the steps both logged."""
    reference_by_step = dict(zip(reference["steps"], reference["losses"]))
    pairs = [(loss, reference_by_step[step]) for step, loss in zip(run["steps"], run["losses"])
             if step in reference_by_step]
    relative = [abs(a - b) / abs(b) for a, b in pairs]
    return {"steps": len(pairs), "max_abs": max(abs(a - b) for a, b in pairs), "max_rel": max(relative),
            "last5_mean_rel": statistics.fmean(relative[-5:]), "final": pairs[-1]}


def environment() -> dict:
    """torch, CUDA, NCCL and GPU names of this machine."""
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
