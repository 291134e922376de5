"""One-H200 speed, FP8 parity and memory benchmark of ``trainer run`` on real text, beside the baselines.

    python -m bench.train_h200 --prepare           # once, anywhere: fetch ~39 MB of prose, tokenize it (32k vocab)
    python3 bench/train_h200.py --phases baseline,speed     # on one H200: ours beside the baselines
    python3 bench/train_h200.py --phases parity,8b
    python3 bench/train_h200.py --phases telemetry          # per-source telemetry on vs off, same job
    python3 bench/train_h200.py --phases telemetry --telemetry-shape tiny --data DIR   # the same on a CPU

Phases (each trains through the CLI exactly as users launch it, on a blend of the tokenized prose):
- ``speed``: the baselines' shape (``1.3b``, seq 4096, micro-batch 4, vocab 32768), one run per
  ``--speed-runs`` entry (``bf16``, ``fp8:BACKEND:RECIPE``; ``+bf16-weights`` for bf16 weights and moments as
  the baselines keep them, ``+fp32-grads`` after it for their gradients summed in fp32, ``+transpose-fused``
  for FP8's transposed copies written by Inductor's producing kernels, ``+transpose-kernel`` for all of them by
  our tiled kernel (the default: fc1's and QKV's gradients' by our SwiGLU and RoPE kernels), ``+manual-gc`` for
  Python's collector off during the steps (``--manual-gc``); ``@N`` for
  micro-batch N, reported apart),
  torch.compile per block where the backend allows and the fused loss on (the CUDA defaults);
  steady-state tokens/s, MFU and peak memory over the steps after ``--warmup``, every step's rate, and the
  GPU's SM clock and power meanwhile (``bench/gpu_clocks.py``: a throttled clock shows there);
- ``baseline``: ``bench/baselines/torch_gpt.py`` (plain PyTorch: eager, compiled, compiled + torchao FP8) and,
  when Transformer Engine imports, ``bench/baselines/te_gpt.py``, in the same job; ratios ours/best baseline per
  precision;
- ``parity``: ``125m`` for ``--parity-steps`` steps in bf16 and FP8 on the same samples (no token seen
  twice; ``--parity-weights bf16``: both with bf16 weights and moments), validation loss every
  ``--parity-eval-interval`` steps over fixed ``--eval-iters``; the largest relative gap after warm-up
  (target: within 2%); both curves are written to ``$OUT``; ``--parity-recipe`` picks the FP8 run's recipe
  (delayed: amax history 1024, max, as the TE baseline's ``DelayedScaling()``);
- ``8b``: the Llama-3-8B shape (vocab 128256) on one GPU with bf16 Adam moments, full activation
  recompute and the fused chunked loss; tokens/s and peak memory;
- ``telemetry``: the speed shape in bf16 (``--telemetry-shape tiny``: the tiny preset on the CPU) on the prose
  as four sources of a quarter each, ``--log-per-source on`` and ``off`` in ``--telemetry-rounds``
  alternating rounds; the ratio of their steady-state tokens/s (target: telemetry costs <= 1% of the step).
A short table comes last; ``$OUT/train_h200.json`` holds every number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first
from bench import gpu_clocks  # noqa: E402
from bench.step_records import steady_means  # noqa: E402
from bench.timing import results_folder, write_results  # noqa: E402

DATA = REPO / "bench" / ".cache" / "h200"
BASELINES = REPO / "bench" / "baselines"
SPEED_SHAPE = ["--preset", "1.3b", "--seq-length", "4096", "--micro-batch-size", "4", "--global-batch-size", "4"]


#: Delayed scaling as the TE baseline runs it (``DelayedScaling()``'s defaults; Megatron's LLaMA-3 8B FP8 example).
DELAYED = ["--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]


def fp8_flags(recipe: str, backend: str) -> list[str]:
    """The trainer flags of an FP8 run (hybrid format: e4m3 forward, e5m2 gradients)."""
    return ["--fp8-format", "hybrid", "--fp8-recipe", recipe, "--fp8-backend", backend,
            *(DELAYED if recipe == "delayed" else [])]


def prepare(data: Path = DATA) -> None:
    """Fetch the prose corpus (bench/data.py) and tokenize it with Mistral's v3 SentencePiece model
    (32768 ids: the baselines' vocabulary) into ``data`` (``bench/.cache/h200/``)."""
    from importlib.util import find_spec

    from bench.data import build

    data.mkdir(parents=True, exist_ok=True)
    model = Path(find_spec("mistral_common").origin).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    shutil.copy(model, data / "tokenizer.model")
    subprocess.run([sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(build("prose")), "--output-prefix",
                    str(data / "prose"), "--json-keys", "text", "--tokenizer-type", "SentencePieceTokenizer",
                    "--tokenizer-model", str(data / "tokenizer.model"), "--append-eod"], cwd=REPO, check=True)


def write_blend(folder: Path, data: Path = DATA, sources: int = 1) -> Path:
    """A blend over the tokenized prose, index maps cached in ``folder``: one source, or the same file as
    ``sources`` sources of equal weight (the same tokens, so only the per-source bookkeeping differs)."""
    blend = folder / ("prose.yaml" if sources == 1 else f"prose_{sources}.yaml")
    names = ["prose"] if sources == 1 else [f"prose_{index}" for index in range(sources)]
    listed = "".join(f"  - {{name: {name}, prefix: {data / 'prose_text_document'}, weight: 1.0}}\n" for name in names)
    blend.write_text(f"seq_length: 4096\nsplit: '97,3,0'\ncache_dir: {folder / 'maps'}\n"
                     f"tokenizer: {{kind: sentencepiece, path: {data / 'tokenizer.model'}}}\nsources:\n{listed}")
    return blend


def train(tag: str, flags: list[str], folder: Path, warmup: int, timeout: float, keep_metrics: bool = False,
          blend: Path | None = None) -> dict:
    """One ``trainer run`` on ``blend`` (default: ``folder``'s prose.yaml; its log, and with ``keep_metrics`` its
    metrics, in :func:`results_folder`); steady-state means of its step records and its evaluations."""
    out = results_folder()
    metrics = (out if keep_metrics else folder) / f"{tag}.jsonl"
    command = [sys.executable, "-m", "cli.trainer", "run", "--blend", str(blend or folder / "prose.yaml"),
               "--log-interval", "1", "--metrics-jsonl", str(metrics), *flags]
    print("$", " ".join(command), flush=True)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    clocks = folder / f"{tag}.gpu.csv"
    with open(out / f"{tag}.log", "w") as log, gpu_clocks.sampled(clocks):
        done = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": path}, stdout=log,
                              stderr=subprocess.STDOUT, timeout=timeout)
    records = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    steps = [r for r in records if "tokens_per_s" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if r.get("split") == "valid"]
    if done.returncode or len(steps) <= warmup:
        return {"failed": f"exit {done.returncode}, {len(steps)} steps (see {tag}.log)", "evals": evals}
    return {**steady_means(steps, warmup), "first_loss": steps[0]["loss"], "last_loss": steps[-1]["loss"],
            "step_rates": [round(r["tokens_per_s"]) for r in steps], "gpu": gpu_clocks.summary(clocks), "evals": evals}


#: ``+bf16-weights``: the baselines' memory scheme (bf16 weights and Adam moments, no fp32 copy), ours with
#: stochastic rounding.
BF16_WEIGHTS = ["--main-params-dtype", "bf16", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]


#: ``--speed-runs`` suffixes: ``+NAME`` → (tag suffix, trainer flags). ``fp32-grads`` goes with ``bf16-weights``.
RUN_SUFFIXES = {"bf16-weights": ("_bf16w", BF16_WEIGHTS),
                "fp32-grads": ("_fp32g", ["--accumulate-allreduce-grads-in-fp32"]),
                "transpose-fused": ("_tf", ["--fp8-transpose", "fused"]),
                "transpose-kernel": ("_tk", ["--fp8-transpose", "kernel"]),
                "manual-gc": ("_mgc", ["--manual-gc"])}


def parse_run(spec: str) -> tuple[str, list[str]]:
    """One ``--speed-runs`` entry, ``bf16`` or ``fp8:BACKEND:RECIPE``, optionally ``+SUFFIX``es of
    :data:`RUN_SUFFIXES`, then ``@MICRO_BATCH`` (e.g. ``fp8:te:delayed``, ``bf16+bf16-weights@8``,
    ``bf16+bf16-weights+fp32-grads``): its tag and its trainer flags beyond the common ones."""
    run, _, micro_batch = spec.partition("@")
    precision, *suffixes = run.split("+")
    tag = "ours_" + precision.replace(":", "_")
    flags: list[str] = []
    for suffix in suffixes:
        if suffix not in RUN_SUFFIXES:
            raise SystemExit(f"--speed-runs {spec!r}: unknown suffix +{suffix}; known: "
                             f"{', '.join('+' + name for name in RUN_SUFFIXES)}")
        tag += RUN_SUFFIXES[suffix][0]
        flags += RUN_SUFFIXES[suffix][1]
    if "fp32-grads" in suffixes and "bf16-weights" not in suffixes:
        raise SystemExit(f"--speed-runs {spec!r}: +fp32-grads only changes runs with +bf16-weights (fp32 weights "
                         "have fp32 gradients already)")
    if precision.startswith("fp8"):
        _, backend, recipe = precision.split(":")
        flags += fp8_flags(recipe, backend)
    if micro_batch:
        tag += f"_mb{micro_batch}"
        flags += ["--micro-batch-size", micro_batch, "--global-batch-size", micro_batch]
    return tag, flags


#: Seconds one speed run may take: a cold FP8 compile of the 1.3b blocks alone took ~3 minutes on the H200.
SPEED_RUN_TIMEOUT = 420


def speed(args: argparse.Namespace, folder: Path) -> dict:
    """Ours at the baselines' shape and micro-batch (and, tagged ``_mbN``, at a larger micro-batch)."""
    common = [*SPEED_SHAPE, "--train-iters", str(args.steps), "--eval-iters", "0", "--lr", "1e-4", "--bf16"]
    runs = {}
    for spec in args.speed_runs.split(","):
        tag, flags = parse_run(spec)
        runs[tag] = train(tag, [*common, *flags], folder, args.warmup, SPEED_RUN_TIMEOUT)
    return runs


def baselines(args: argparse.Namespace, folder: Path) -> dict:
    """The plain-PyTorch baseline (and the TE one when TE imports) in this job: their training records."""
    results = {}
    scripts = [(args.baseline, "baseline.json")] if args.baseline != "none" else []
    te_imports = subprocess.run([sys.executable, "-c", "import transformer_engine.pytorch"]).returncode == 0
    if args.te_baseline != "none" and te_imports:
        scripts.append((args.te_baseline, "te_baseline.json"))
    for script, output in scripts:
        clocks = folder / f"{output[:-5]}.gpu.csv"
        with gpu_clocks.sampled(clocks):
            subprocess.run([sys.executable, script], env={**os.environ, "OUT": str(folder)}, timeout=330)
        results[f"{output[:-5]}_gpu"] = gpu_clocks.summary(clocks)  # every run of the script together
        if (folder / output).exists():
            loaded = json.loads((folder / output).read_text())
            results.update({key: value for key, value in loaded.items() if isinstance(value, dict)})
            results[f"{output[:-5]}_all"] = loaded  # the chip's ceilings and failures too
    return results


def parity(args: argparse.Namespace, folder: Path) -> dict:
    """125m in bf16 and FP8 on the same samples; relative gap of the validation losses after warm-up."""
    common = ["--preset", "125m", "--seq-length", "1024", "--micro-batch-size", "24", "--global-batch-size", "24",
              "--train-iters", str(args.parity_steps), "--lr", "6e-4", "--min-lr", "6e-5", "--lr-decay-style", "cosine",
              "--lr-warmup-iters", str(args.parity_steps // 10), "--eval-interval", str(args.parity_eval_interval),
              "--eval-iters", str(args.eval_iters), "--bf16", "--compile", args.aux_compile,
              *(BF16_WEIGHTS if args.parity_weights == "bf16" else [])]
    runs = {"parity_bf16": train("parity_bf16", common, folder, args.warmup, 160, keep_metrics=True),
            "parity_fp8": train("parity_fp8", [*common, *fp8_flags(args.parity_recipe, args.fp8_backend)], folder,
                                args.warmup, 160, keep_metrics=True)}
    bf16, fp8 = (dict(runs[name]["evals"]) for name in ("parity_bf16", "parity_fp8"))
    gaps = {step: fp8[step] / bf16[step] - 1 for step in bf16 if step in fp8}
    after = [abs(gap) for step, gap in gaps.items() if step > args.parity_steps // 10]
    runs["parity_gap"] = {"per_eval": gaps, "max_abs_after_warmup": max(after) if after else None}
    return runs


def eight_b(args: argparse.Namespace, folder: Path) -> dict:
    """The 8b preset on one GPU with the memory scheme of trainer/README.md."""
    flags = ["--preset", "8b", "--vocab-size", "128256", "--seq-length", "4096", "--micro-batch-size", "1",
             "--global-batch-size", "1", "--train-iters", str(args.eight_b_steps), "--eval-iters", "0", "--lr", "1e-4",
             "--bf16", "--recompute-granularity", "full", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16",
             "--compile", args.aux_compile]
    return {"8b_bf16": train("8b_bf16", flags, folder, 2, 240)}


#: ``--telemetry-shape``: the speed shape in bf16 on the GPU, or the tiny preset on the CPU (accumulating two
#: micro-batches, so the per-source sums add up over micro-batches as in real runs).
TELEMETRY_SHAPES = {"1.3b": [*SPEED_SHAPE, "--bf16"],
                    "tiny": ["--preset", "tiny", "--seq-length", "256", "--micro-batch-size", "4",
                             "--global-batch-size", "8", "--device", "cpu"]}


def telemetry(args: argparse.Namespace, folder: Path) -> dict:
    """``--log-per-source on`` against ``off`` on four sources, in alternating rounds of one run each; the ratio
    of the means of their steady-state tokens/s."""
    blend = write_blend(folder, args.data, sources=4)
    common = [*TELEMETRY_SHAPES[args.telemetry_shape], "--train-iters", str(args.steps), "--eval-iters", "0",
              "--lr", "1e-4"]
    runs = {f"telemetry_{mode}_{round_}": train(f"telemetry_{mode}_{round_}", [*common, "--log-per-source", mode],
                                                folder, args.warmup, SPEED_RUN_TIMEOUT, blend=blend)
            for round_ in range(args.telemetry_rounds) for mode in ("on", "off")}
    rates = {mode: [record["tokens_per_s"] for tag, record in runs.items()
                    if tag.startswith(f"telemetry_{mode}_") and record.get("tokens_per_s")] for mode in ("on", "off")}
    if rates["on"] and rates["off"]:
        on, off = statistics.fmean(rates["on"]), statistics.fmean(rates["off"])
        runs["telemetry_cost"] = {"on_tokens_per_s": on, "off_tokens_per_s": off, "ratio": on / off,
                                  "rounds": rates}
    return runs


PHASES = {"speed": speed, "baseline": baselines, "parity": parity, "8b": eight_b, "telemetry": telemetry}


def clock_line(gpu: dict) -> str:
    """One line of :func:`bench.gpu_clocks.summary`."""
    return (f"SM clock {gpu['sm_clock_mean_mhz']:.0f} MHz mean, {gpu['sm_clock_min_mhz']:.0f} min, "
            f"{100 * gpu['below_max_clock_share']:.0f}% of busy samples below max; power {gpu['power_mean_w']:.0f} W "
            f"mean, {gpu['power_max_w']:.0f} max of {gpu['power_limit_w']:.0f}")


def table(results: dict) -> None:
    """Tokens/s, MFU, memory and ours/best-baseline ratios, one row per run."""
    base = {"bf16": [v["tok_s"] for k, v in results.items() if k.endswith("bf16") and "tok_s" in v],
            "fp8": [v["tok_s"] for k, v in results.items() if "fp8" in k and "tok_s" in v]}
    print(f"\n{'run':24} {'tok/s':>9} {'MFU':>7} {'mem GiB':>8}  note")
    for name, record in results.items():
        if "tok_s" in record:  # a baseline record
            print(f"{'baseline ' + name:24} {record['tok_s']:>9,} {100 * record['mfu_vs_989']:>6.1f}% "
                  f"{record['mem_GB']:>8.1f}")
        elif record.get("tokens_per_s"):
            kind = "fp8" if "fp8" in name else "bf16"
            best = max(base[kind]) if base[kind] and name.startswith("ours") else None
            note = f"{record['tokens_per_s'] / best:.2f}x best {kind} baseline ({best:,})" if best else ""
            note += " (larger micro-batch: reported apart, not the target ratio)" if "_mb" in name else ""
            if record.get("peak_memory_gib_all_steps", 0) > record["peak_memory_gib"]:
                note += f" (first steps: {record['peak_memory_gib_all_steps']:.1f} GiB)"
            print(f"{name:24} {record['tokens_per_s']:>9,.0f} {100 * (record['mfu'] or 0):>6.1f}% "
                  f"{record['peak_memory_gib']:>8.1f}  {note}")
            if record.get("gpu"):
                print(f"{'':24} {clock_line(record['gpu'])}")
        elif name.endswith("_gpu") and record:
            print(f"{name[:-4] + ' (every run)':24} {clock_line(record)}")
        elif "failed" in record:
            print(f"{name:24} failed: {record['failed']}")
    cost = results.get("telemetry_cost")
    if cost:
        print(f"per-source telemetry: on {cost['on_tokens_per_s']:,.0f} / off {cost['off_tokens_per_s']:,.0f} tok/s "
              f"= {cost['ratio']:.4f}x (cost {100 * (1 - cost['ratio']):.2f}% of the step; target <= 1%)")
    gap = results.get("parity_gap", {}).get("max_abs_after_warmup")
    if gap is not None:
        print(f"parity: FP8 vs bf16 validation loss, largest gap after warm-up {100 * gap:.2f}% (target <= 2%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="fetch and tokenize the data, then exit")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the tokenized prose (--prepare writes it)")
    parser.add_argument("--telemetry-shape", choices=tuple(TELEMETRY_SHAPES), default="1.3b",
                        help="shape of the telemetry phase: the speed shape (GPU) or tiny (CPU)")
    parser.add_argument("--telemetry-rounds", type=int, default=2, help="alternating on/off rounds of that phase")
    parser.add_argument("--phases", default="speed,baseline,parity,8b", help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--baseline", default=str(BASELINES / "torch_gpt.py"),
                        help="the plain-PyTorch baseline script (writes $OUT/baseline.json), or none")
    parser.add_argument("--te-baseline", default=str(BASELINES / "te_gpt.py"),
                        help="the Transformer Engine baseline script (run when TE imports; writes "
                        "$OUT/te_baseline.json), or none")
    parser.add_argument("--fp8-backend", default="auto", help="backend of the parity runs")
    parser.add_argument("--parity-recipe", default="tensorwise", choices=("delayed", "tensorwise"),
                        help="--fp8-recipe of the parity run")
    parser.add_argument("--speed-runs", default="fp8:scaled_mm:delayed+bf16-weights,bf16+bf16-weights",
                        help="comma list of bf16 | fp8:BACKEND:RECIPE, each optionally followed by "
                        f"{' '.join('+' + name for name in RUN_SUFFIXES)}, then @MICRO_BATCH (reported apart)")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the means (compilation)")
    parser.add_argument("--parity-steps", type=int, default=300)
    parser.add_argument("--parity-weights", choices=("fp32", "bf16"), default="fp32",
                        help="both parity runs with fp32 master weights, or bf16 weights and moments (+bf16-weights)")
    parser.add_argument("--parity-eval-interval", type=int, default=25)
    parser.add_argument("--eval-iters", type=int, default=8)
    parser.add_argument("--eight-b-steps", type=int, default=8)
    parser.add_argument("--aux-compile", default="off", choices=("auto", "off"),
                        help="--compile of the parity and 8b runs (off: no compile time on a short device lease)")
    args = parser.parse_args()
    if args.prepare:
        return prepare(args.data)
    results: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write_blend(folder, args.data)
        for phase in args.phases.split(","):
            try:
                results.update(PHASES[phase](args, folder))
            except subprocess.TimeoutExpired as error:
                results[phase] = {"failed": f"timed out after {error.timeout:.0f} s"}
            write_results("train_h200", {"args": vars(args), "results": results})
    table(results)


if __name__ == "__main__":
    main()
