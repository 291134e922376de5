"""Two-GPU benchmark of ``trainer run``'s parallelism: the ``1.3b`` preset (the baselines' shape) at seq
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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the repository's packages first
from bench.step_records import add_shape_arguments  # noqa: E402
from bench.timing import write_results  # noqa: E402
from bench.torchrun_runs import NO_MULTICAST, environment, loss_parity, torchrun_trainer  # noqa: E402


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


def train(layout: Layout, args: argparse.Namespace, workdir: Path, timeout: float) -> dict:
    """Run ``layout`` through torchrun and the CLI on mock data; its per-step records and steady-state means."""
    flags = ["--mock-data", "--preset", args.preset, "--seq-length", str(args.seq_length), "--micro-batch-size",
             str(args.micro_batch_size), "--global-batch-size", str(layout.global_batch), "--train-iters",
             str(args.steps), "--eval-iters", "0", "--bf16", "--lr", "1e-4", "--lr-warmup-iters", "5",
             *layout.flags, *args.extra.split()]
    metrics = workdir / f"{layout.name.replace(' ', '_').replace('=', '')}.jsonl"
    return torchrun_trainer(layout.name, layout.gpus, flags, metrics, args.warmup, timeout)


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
            results[layout.name]["parity"] = check = loss_parity(results[layout.name], single)
            print(f"{layout.name} loss vs 1 GPU over {check['steps']} steps: max |d| {check['max_abs']:.4f}, "
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
    add_shape_arguments(parser, steps=20)
    parser.add_argument("--budget", type=float, default=450.0, help="seconds all runs together may take")
    parser.add_argument("--extra", default="", help="trainer flags added to every run, e.g. "
                        "'--fp8-format hybrid --fp8-recipe tensorwise --fp8-backend scaled_mm'")
    parser.add_argument("--layouts", default=",".join(layout.name for layout in LAYOUTS),
                        help="comma list of the runs to make (the first is the parity reference when run)")
    args = parser.parse_args()
    os.environ.update(NO_MULTICAST)
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
    write_results("parallel_h200x2", {"args": vars(args), "environment": environment(), "results": results})


if __name__ == "__main__":
    main()
