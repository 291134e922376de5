"""Eight H200s: the ``8b`` preset from a blend in 3D parallelism, bf16 and FP8, in phases that
each fit one device call (< 10 minutes):

    python3 bench/parallel_h200x8.py --phase speed --precisions bf16      # tokens/s per GPU and MFU per layout
    python3 bench/parallel_h200x8.py --phase speed --precisions fp8
    python3 bench/parallel_h200x8.py --phase parity --layouts TP2xPP2xDP2 # 100 steps, checkpoint at the end
    python3 bench/parallel_h200x8.py --phase parity --layouts DP8         # the same global batch at DP 8
    python3 bench/parallel_h200x8.py --phase resume                       # DP8 and TP2xPP2xDP2 continue it
    python3 bench/parallel_h200x8.py --cpu-dry-run --phase …              # here: tiny preset on 8 CPU ranks

- ``speed``: each of ``--layouts`` (DP8 with ZeRO-1, TP2xDP4, TP2xPP2xDP2; sequence parallelism with TP)
  for ``--warmup`` + 20 steps per precision; tokens/s per GPU and MFU of the steps after warm-up, beside
  the published Llama-3-8B figures on 8 H100s (torchtitan ~8.5k tok/s/GPU FP8, Megatron-Bridge ~14.5k).
- ``parity``: ``--parity-steps`` (100) FP8 steps of global batch 64 at seq 4096 from the blend; the
  TP2xPP2xDP2 run saves one checkpoint at its last step into ``--checkpoints``; every finished layout's
  per-step loss is compared with the other's (runs are kept as JSON in ``--checkpoints`` between calls).
- ``resume``: DP8 loads that checkpoint and trains ``--resume-steps`` more; so does TP2xPP2xDP2 (the
  reference continuation); their losses are compared step by step. Nothing more is saved: an 8B
  checkpoint with optimizer state is ~100 GiB of the machine's 235 GiB disk.

Data: the blend of ``bench/train_h200.py`` (Mistral v3 ids, 32,768, trained with ``--vocab-size 128256``:
Llama-3's table, rows above 32,767 unused; epochs repeat over its 11.5M tokens). Every process runs without
NVLink multicast (``bench/torchrun_runs.py``). ``$OUT/parallel_h200x8.json`` gets every number.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run by path: the repository's packages first
from bench.timing import write_results  # noqa: E402
from bench.torchrun_runs import environment, loss_parity, torchrun_trainer  # noqa: E402
from bench.train_h200 import DATA, fp8_flags, write_blend  # noqa: E402

GPUS = 8
#: name → trainer flags (DP is what is left of the 8 GPUs).
LAYOUTS = {
    "DP8": ("--use-distributed-optimizer", "--overlap-grad-reduce"),
    "TP2xDP4": ("--tp", "2", "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce"),
    "TP2xPP2xDP2": ("--tp", "2", "--pp", "2", "--sequence-parallel", "--use-distributed-optimizer",
                    "--overlap-grad-reduce"),
}
PRECISIONS = {"bf16": (), "fp8": tuple(fp8_flags("tensorwise", "auto"))}
#: Published Llama-3-8B training rates on 8 H100s (tokens/s per GPU, FP8), for the table.
PUBLISHED = {"torchtitan (8 H100, FP8)": 8_500, "Megatron-Bridge (8 H100, FP8)": 14_500}


def precision_flags(args: argparse.Namespace, precision: str) -> tuple[str, ...]:
    """The trainer flags of ``precision``; none on the CPU dry run (FP8 needs FP8 tensor cores: the dry
    run checks the layouts and phases, not the numerics)."""
    return () if args.cpu_dry_run else PRECISIONS[precision]


def model_flags(args: argparse.Namespace, blend: Path) -> list[str]:
    """The model, data and batch of every run (the ``8b`` preset at seq 4096, or ``tiny`` on CPU)."""
    if args.cpu_dry_run:
        shape = ["--preset", "tiny", "--seq-length", "128", "--vocab-size", "32768"]
    else:
        shape = ["--preset", "8b", "--seq-length", "4096", "--vocab-size", "128256", "--bf16"]
    # NOTE: a constant LR after warm-up, so that a resume with more --train-iters keeps the same schedule
    warmup = "2" if args.cpu_dry_run else "10"
    return [*shape, "--blend", str(blend), "--micro-batch-size", "1", "--eval-iters", "0", "--lr", "1e-4",
            "--lr-warmup-iters", warmup, "--lr-decay-style", "constant", *args.extra.split()]


def speed(args: argparse.Namespace, blend: Path, scratch: Path) -> dict:
    """Tokens/s per GPU and MFU of each layout × precision after ``--warmup`` steps."""
    results = {}
    for precision in args.precisions.split(","):
        for layout in args.layouts.split(","):
            flags = [*model_flags(args, blend), "--global-batch-size", str(args.speed_batch), "--train-iters",
                     str(args.warmup + 20), *LAYOUTS[layout], *precision_flags(args, precision)]
            name = f"{layout} {precision}"
            results[name] = torchrun_trainer(name, GPUS, flags, scratch / f"{layout}_{precision}.jsonl",
                                             args.warmup, args.timeout)
    return results


def parity(args: argparse.Namespace, blend: Path, scratch: Path) -> dict:
    """FP8 runs of ``--parity-steps`` at global batch 64; TP2xPP2xDP2 keeps its last step's checkpoint."""
    checkpoints = Path(args.checkpoints)
    results = {}
    for layout in args.layouts.split(","):
        flags = [*model_flags(args, blend), "--global-batch-size", "64", "--train-iters", str(args.parity_steps),
                 *LAYOUTS[layout], *precision_flags(args, "fp8")]
        if layout == "TP2xPP2xDP2":
            flags += ["--save", str(checkpoints / "ckpt"), "--save-retain", "1"]
        results[f"parity {layout}"] = run = torchrun_trainer(f"parity {layout}", GPUS, flags,
                                                             scratch / f"parity_{layout}.jsonl", 0, args.timeout)
        (checkpoints / f"parity_{layout}.json").write_text(json.dumps(run))
    return {**results, **compare(checkpoints, "parity_TP2xPP2xDP2", "parity_DP8")}


def resume(args: argparse.Namespace, blend: Path, scratch: Path) -> dict:
    """DP8 and TP2xPP2xDP2 continue TP2xPP2xDP2's checkpoint for ``--resume-steps`` steps, nothing saved."""
    checkpoints = Path(args.checkpoints)
    results = {}
    for layout in ("DP8", "TP2xPP2xDP2"):
        flags = [*model_flags(args, blend), "--global-batch-size", "64", "--train-iters",
                 str(args.parity_steps + args.resume_steps), "--load", str(checkpoints / "ckpt"), *LAYOUTS[layout],
                 *precision_flags(args, "fp8")]
        results[f"resume {layout}"] = run = torchrun_trainer(f"resume {layout}", GPUS, flags,
                                                             scratch / f"resume_{layout}.jsonl", 0, args.timeout)
        (checkpoints / f"resume_{layout}.json").write_text(json.dumps(run))
    return {**results, **compare(checkpoints, "resume_DP8", "resume_TP2xPP2xDP2")}


def compare(folder: Path, name: str, reference: str) -> dict:
    """Per-step loss parity of two kept runs of ``folder`` (none until both have run without error)."""
    kept = [folder / f"{run}.json" for run in (name, reference)]
    runs = [json.loads(path.read_text()) for path in kept if path.exists()]
    if len(runs) < 2 or any("error" in run for run in runs):
        return {}
    check = loss_parity(*runs)
    print(f"{name} vs {reference} over {check['steps']} steps: max |d| {check['max_abs']:.4f}, max rel "
          f"{check['max_rel']:.2e}, last-5 mean rel {check['last5_mean_rel']:.2e}, final {check['final']}", flush=True)
    return {f"{name} vs {reference}": check}


def table(results: dict) -> None:
    """Tokens/s per GPU, MFU and memory of each run, then the published figures."""
    print(f"\n{'run':26} {'tok/s/GPU':>10} {'MFU':>7} {'mem GiB':>8} {'steps':>6}")
    for name, run in results.items():
        if "error" in run:
            print(f"{name:26} failed: {run['error']}")
        elif "tokens_per_s_per_gpu" in run:
            mfu = f"{100 * run['mfu']:.1f}%" if run["mfu"] is not None else "n/a"
            print(f"{name:26} {run['tokens_per_s_per_gpu']:>10,.0f} {mfu:>7} {run['peak_memory_gib']:>8.1f} "
                  f"{len(run['losses']):>6}")
    for name, rate in PUBLISHED.items():
        print(f"{name:26} {rate:>10,} (published)")


PHASES = {"speed": speed, "parity": parity, "resume": resume}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=PHASES, required=True)
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma list of {', '.join(LAYOUTS)}")
    parser.add_argument("--precisions", default="bf16,fp8", help="speed phase: comma list of bf16, fp8")
    parser.add_argument("--speed-batch", type=int, default=16, help="global batch of the speed runs")
    parser.add_argument("--warmup", type=int, default=5, help="speed runs: steps before the 20 measured ones")
    parser.add_argument("--parity-steps", type=int, default=100)
    parser.add_argument("--resume-steps", type=int, default=10)
    parser.add_argument("--checkpoints", default="/tmp/h200x8", help="checkpoint and kept runs between calls")
    parser.add_argument("--timeout", type=float, default=560.0, help="seconds one run may take")
    parser.add_argument("--extra", default="", help="trainer flags added to every run")
    parser.add_argument("--cpu-dry-run", action="store_true", help="tiny preset on 8 CPU ranks (gloo), bf16 only")
    args = parser.parse_args()
    Path(args.checkpoints).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        blend = write_blend(Path(scratch))
        try:
            results = PHASES[args.phase](args, blend, Path(scratch))
        except subprocess.TimeoutExpired as error:
            results = {args.phase: {"error": f"timed out after {error.timeout:.0f} s"}}
    table(results)
    print(json.dumps(environment()))
    write_results("parallel_h200x8", {"args": vars(args), "environment": environment(), "data": str(DATA),
                                      "results": results})


if __name__ == "__main__":
    main()
