"""Two-GPU benchmark of ``trainer run``'s parallelism: the ``1.3b`` preset (DESIGN §7's shape) at seq
4096 on ``--mock-data``, bf16, micro-batch 4, launched with ``torchrun`` on NCCL exactly as users do.

    python -m bench.parallel_h200x2          # in the repo, on a machine with 2 GPUs (NVLink); about 5 minutes
    python -m bench.parallel_h200x2 --layouts "1 GPU,TP=2,PP=2" \
        --extra "--fp8-format hybrid --fp8-recipe tensorwise --fp8-backend scaled_mm"   # FP8 through TP and PP

Runs, one after another, each for ``--steps`` steps (the first ``--warmup`` left out of the means):

| run | GPUs | layout | global batch | micro-batches per GPU and step |
|---|---|---|---|---|
| 1 GPU | 1 | — | 16 | 4 |
| DP=2 | 2 | DP 2, ``--overlap-grad-reduce`` | 16 | 2 |
| DP=2 weak | 2 | DP 2, ``--overlap-grad-reduce`` | 32 | 4 |
| TP=2 | 2 | TP 2, ``--sequence-parallel`` | 16 | 4 |
| PP=2 | 2 | PP 2 (1F1B) | 16 | 4 |

and prints tokens/s per GPU for each, the DP=2 scaling ratio against one GPU (same micro-batch and the
same accumulation per GPU: "DP=2 weak" / "1 GPU"; and at the same global batch), and the loss parity of
DP=2, TP=2 and PP=2 against one GPU (same global batch, same data, same initial weights: the per-step
losses differ only by bf16 rounding of other reduction orders). A short table comes last;
``$OUT/parallel_h200x2.json`` (or /tmp) gets every number.

Every process runs with ``NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1``
(the lent machines do not allow NVLink multicast).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass(frozen=True)
class Layout:
    """One benchmarked run."""

    name: str
    gpus: int
    flags: tuple[str, ...]
    global_batch: int
    parity: bool  # compared step by step with the one-GPU run (same global batch)


LAYOUTS = (
    Layout("1 GPU", 1, (), 16, False),
    Layout("DP=2", 2, ("--overlap-grad-reduce",), 16, True),
    Layout("DP=2 weak", 2, ("--overlap-grad-reduce",), 32, False),
    Layout("TP=2", 2, ("--tensor-model-parallel-size", "2", "--sequence-parallel"), 16, True),
    Layout("PP=2", 2, ("--pipeline-model-parallel-size", "2"), 16, True),
)


def free_port() -> int:
    """A free TCP port of 127.0.0.1 for torchrun's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train(layout: Layout, args: argparse.Namespace, workdir: Path, timeout: float) -> dict:
    """Run ``layout`` through torchrun and the CLI; its per-step records and steady-state means."""
    metrics = workdir / f"{layout.name.replace(' ', '_').replace('=', '')}.jsonl"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(layout.gpus),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               "-m", "cli.trainer", "run", "--mock-data", "--preset", args.preset,
               "--seq-length", str(args.seq_length), "--micro-batch-size", str(args.micro_batch_size),
               "--global-batch-size", str(layout.global_batch), "--train-iters", str(args.steps),
               "--log-interval", "1", "--eval-iters", "0", "--bf16", "--lr", "1e-4", "--lr-warmup-iters", "5",
               "--metrics-jsonl", str(metrics), *layout.flags, *args.extra.split()]
    print(f"\n== {layout.name}\n$ {' '.join(command)}", flush=True)
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO, env={**os.environ, **NO_MULTICAST, "PYTHONPATH": str(REPO)},
                            timeout=timeout, capture_output=True, text=True)
    print("\n".join(line for line in result.stderr.splitlines() if "trainer." in line)[-3000:], flush=True)
    if result.returncode != 0:
        print(result.stdout[-2000:], result.stderr[-4000:], sep="\n", flush=True)
        return {"error": f"exit {result.returncode}", "seconds": time.monotonic() - started}
    records = [json.loads(line) for line in metrics.read_text().splitlines() if '"loss"' in line]
    steady = records[args.warmup:]
    mean = lambda key: statistics.fmean(r[key] for r in steady) if key in steady[0] else None  # noqa: E731
    return {"tokens_per_s": mean("tokens_per_s"), "tokens_per_s_per_gpu": mean("tokens_per_s_per_gpu"),
            "mfu": mean("mfu"), "peak_memory_gib": max(r.get("peak_memory_gib", 0.0) for r in steady),
            "losses": [r["loss"] for r in records], "grad_norms": [r["grad_norm"] for r in records],
            "seconds": time.monotonic() - started}


def parity(run: dict, reference: dict) -> dict:
    """Per-step loss differences against the reference run (same global batch and data)."""
    pairs = list(zip(run["losses"], reference["losses"]))
    relative = [abs(a - b) / abs(b) for a, b in pairs]
    return {"max_abs": max(abs(a - b) for a, b in pairs), "max_rel": max(relative),
            "last5_mean_rel": statistics.fmean(relative[-5:]), "final": (pairs[-1][0], pairs[-1][1])}


def environment() -> dict:
    """torch, CUDA, NCCL and GPU names of this machine."""
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}


def report(results: dict[str, dict], micro_batch: int) -> None:
    """The ratios, then the short table."""
    single = results.get("1 GPU", {"error": "not run"})
    ok = lambda name: "error" not in results.get(name, {"error": "not run"}) and "error" not in single  # noqa: E731
    by_name = {layout.name: layout for layout in LAYOUTS}
    per_gpu = lambda name: by_name[name].global_batch // (micro_batch * by_name[name].gpus)  # noqa: E731
    for name in ("DP=2 weak", "DP=2"):
        label = (f"micro-batch {micro_batch}; {per_gpu(name)} vs {per_gpu('1 GPU')} micro-batches per GPU and step, "
                 f"global batch {by_name[name].global_batch}")
        if ok(name):
            ratio = results[name]["tokens_per_s"] / single["tokens_per_s"]
            results[name]["scaling_vs_1gpu"] = ratio
            print(f"DP=2 scaling vs 1 GPU ({label}): {ratio:.3f}x  (target >= 1.97x)")
    for layout in LAYOUTS:
        if layout.parity and ok(layout.name):
            results[layout.name]["parity"] = check = parity(results[layout.name], single)
            print(f"{layout.name} loss vs 1 GPU over {len(single['losses'])} steps: max |d| {check['max_abs']:.4f}, "
                  f"max rel {check['max_rel']:.2e}, last-5 mean rel {check['last5_mean_rel']:.2e}, final "
                  f"{check['final'][0]:.4f} vs {check['final'][1]:.4f}")
    print(f"\n{'run':11} {'GPUs':>4} {'batch':>5} {'tok/s':>9} {'tok/s/GPU':>10} {'MFU':>6} {'mem GiB':>8} "
          f"{'x 1 GPU':>8} {'loss max rel':>13}")
    for layout in (layout for layout in LAYOUTS if layout.name in results):
        run = results[layout.name]
        if "error" in run:
            print(f"{layout.name:11} {layout.gpus:>4} {layout.global_batch:>5} failed: {run['error']}")
            continue
        ratio = run["tokens_per_s"] / single["tokens_per_s"] if ok(layout.name) else float("nan")
        mfu = f"{100 * run['mfu']:.1f}%" if run["mfu"] is not None else "n/a"
        rel = f"{run['parity']['max_rel']:.2e}" if "parity" in run else "-"
        print(f"{layout.name:11} {layout.gpus:>4} {layout.global_batch:>5} {run['tokens_per_s']:>9,.0f} "
              f"{run['tokens_per_s_per_gpu']:>10,.0f} {mfu:>6} {run['peak_memory_gib']:>8.1f} {ratio:>8.2f} {rel:>13}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="1.3b")
    parser.add_argument("--seq-length", type=int, default=4096)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the means")
    parser.add_argument("--budget", type=float, default=450.0, help="seconds all runs together may take")
    parser.add_argument("--extra", default="", help="trainer flags added to every run, e.g. "
                        "'--fp8-format hybrid --fp8-recipe tensorwise --fp8-backend scaled_mm'")
    parser.add_argument("--layouts", default=",".join(layout.name for layout in LAYOUTS),
                        help="comma list of the runs to make (the first is the parity reference when run)")
    args = parser.parse_args()
    os.environ.update(NO_MULTICAST)
    out = Path(os.environ.get("OUT", tempfile.gettempdir()))
    results: dict[str, dict] = {}
    deadline = time.monotonic() + args.budget
    with tempfile.TemporaryDirectory() as scratch:
        for layout in (layout for layout in LAYOUTS if layout.name in args.layouts.split(",")):
            timeout = deadline - time.monotonic()
            try:
                results[layout.name] = train(layout, args, Path(scratch), timeout) if timeout > 10 else \
                    {"error": "no time left in --budget"}
            except subprocess.TimeoutExpired:
                results[layout.name] = {"error": f"timed out (--budget {args.budget:.0f} s)"}
    print(f"\n{json.dumps(environment())}")
    report(results, args.micro_batch_size)
    (out / "parallel_h200x2.json").write_text(json.dumps({"args": vars(args), "environment": environment(),
                                                          "results": results}, indent=1))


if __name__ == "__main__":
    main()
