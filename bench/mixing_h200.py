"""Does mixing over time help? Fixed weights, a two-phase anneal and online mixing, same token budget, one GPU.

    python -m bench.mixing_h200 --prepare        # once, here: prose, C and Python tokenized into bench/.cache/mixing/
    python3 bench/mixing_h200.py                 # on the H200: three 125m runs of >= 50M tokens each
    python3 bench/mixing_h200.py --cpu-check     # anywhere: the same three runs at the tiny preset, a few steps

Three real sources of unequal difficulty: ``prose`` (the kernel's and Python's documentation, ``bench.data``'s
``prose``), ``c`` (kernel C, ``bench.data``'s ``code``) and ``python`` (the Python sources of the installed
packages), tokenized with Mistral's v3 SentencePiece model (32768 ids), weighted by their sizes (natural weights).
The same runs of ``--steps`` steps of ``--global-batch`` samples of 1024 tokens (the default: 800 x 64 x 1024 =
52.4M tokens) on three blends:

- ``fixed``: the natural weights throughout;
- ``anneal``: the natural weights for the first 80% of the samples, then a step to ``--anneal-weight`` on python
  (the rest split in proportion) to the end;
- ``online``: online mixing (``odm``, every ``--update-interval`` steps, floor ``--floor``) from the natural weights.

Each run evaluates every source alone on its own fixed validation samples (``--eval-samples-per-source``) every
``--eval-interval`` steps. Reported: each source's last validation loss, their unweighted mean and the worst source,
and the cost of mixing per step two ways: the online run's steady tokens/s against the fixed run's, and the host
time online mixing adds to a step (drawing a global batch's sources and one update of the mixer, timed here on this
host, as a share of the fixed run's mean step time). ``$OUT/mixing_h200.json`` holds every number; a table comes
last.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first
from bench.step_records import run_trainer, steady_means  # noqa: E402
from bench.timing import results_folder, write_results  # noqa: E402

DATA = REPO / "bench" / ".cache" / "mixing"
SOURCES = ("prose", "c", "python")
#: Python sources taken for the ``python`` source (bytes of JSONL).
PYTHON_BYTES = 30_000_000


def python_sources(target: Path, cap: int = PYTHON_BYTES) -> Path:
    """The installed packages' ``.py`` files as JSONL (each content once, in path order), up to ``cap`` bytes."""
    import sysconfig

    seen, written = set(), 0
    with open(target, "w", encoding="utf-8") as out:
        root = Path(sysconfig.get_paths()["purelib"])
        for path in sorted(root.rglob("*.py")):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not text.strip() or hash(text) in seen:
                continue
            seen.add(hash(text))
            line = json.dumps({"text": text}) + "\n"
            if written + len(line) > cap:
                break
            out.write(line)
            written += len(line)
    return target


def prepare(data: Path = DATA) -> None:
    """Build the three corpora and tokenize each into ``data`` with the 32k SentencePiece model."""
    from importlib.util import find_spec

    from bench.data import build

    data.mkdir(parents=True, exist_ok=True)
    model = Path(find_spec("mistral_common").origin).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    shutil.copy(model, data / "tokenizer.model")
    inputs = {"prose": build("prose"), "c": build("code"), "python": python_sources(data / "python.jsonl")}
    for name, path in inputs.items():
        subprocess.run([sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(path), "--output-prefix",
                        str(data / name), "--json-keys", "text", "--tokenizer-type", "SentencePieceTokenizer",
                        "--tokenizer-model", str(data / "tokenizer.model"), "--append-eod", "--quiet"], cwd=REPO,
                       check=True)


def natural_weights(data: Path) -> dict[str, float]:
    """Each source's share of all the tokens (its ``.meta.json`` count)."""
    tokens = {name: json.loads((data / f"{name}_text_document.meta.json").read_text())["num_tokens"]
              for name in SOURCES}
    total = sum(tokens.values())
    return {name: count / total for name, count in tokens.items()}


def write_blends(folder: Path, data: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The three blends over the same sources, index maps cached in ``folder``."""
    natural = natural_weights(data)
    rest = sum(weight for name, weight in natural.items() if name != "python")
    annealed = {name: (args.anneal_weight if name == "python" else (1 - args.anneal_weight) * weight / rest)
                for name, weight in natural.items()}

    def sources(weighted: bool) -> str:
        return "sources:\n" + "".join(
            f"  - {{name: {name}, prefix: {data / f'{name}_text_document'}"
            + (f", weight: {natural[name]:.6f}}}\n" if weighted else "}\n") for name in SOURCES)

    head = (f"seq_length: {args.seq_length}\nsplit: '98,2,0'\ncache_dir: {folder / 'maps'}\n"
            f"tokenizer: {{kind: sentencepiece, path: {data / 'tokenizer.model'}}}\n")
    weights = lambda mix: "{" + ", ".join(f"{n}: {w:.6f}" for n, w in mix.items()) + "}"  # noqa: E731
    texts = {
        "fixed": head + sources(True),
        "anneal": head + sources(False) + f"schedule:\n  - {{until: 0.8, weights: {weights(natural)}}}\n"
                                          f"  - {{weights: {weights(annealed)}}}\n",
        "online": head + sources(True) + f"mixing: {{kind: online, rule: odm, update_interval: {args.update_interval}, "
                                         f"floor: {args.floor}}}\n",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = folder / f"{name}.yaml"
        paths[name].write_text(text)
    return paths


def train(tag: str, blend: Path, args: argparse.Namespace) -> dict:
    """One ``trainer run`` (its log and metrics under $OUT): steady step means, per-source validation losses."""
    out = results_folder()
    flags = ["--blend", str(blend), "--preset", args.preset, "--seq-length", str(args.seq_length),
             "--micro-batch-size", str(args.micro_batch), "--global-batch-size", str(args.global_batch),
             "--train-iters", str(args.steps), "--lr", "6e-4", "--min-lr", "6e-5", "--lr-decay-style", "cosine",
             "--lr-warmup-iters", str(max(1, args.steps // 20)), "--eval-interval", str(args.eval_interval),
             "--eval-iters", str(args.eval_iters), "--eval-samples-per-source", str(args.eval_samples_per_source),
             *args.precision]
    status, records = run_trainer(flags, out / f"{tag}.jsonl", out / f"{tag}.log", args.timeout)
    steps = [r for r in records if "tokens_per_s" in r]
    evals = [r for r in records if r.get("split") == "valid" and r.get("sources")]
    if status or not steps or not evals:
        return {"failed": f"exit {status}, {len(steps)} steps, {len(evals)} evaluations (see {tag}.log)"}
    valid = {name: numbers["loss"] for name, numbers in evals[-1]["sources"].items()}
    last = steps[-1]["sources"]
    return {**steady_means(steps, min(args.warmup, len(steps) - 1)), "tokens": steps[-1]["consumed_samples"]
            * args.seq_length, "valid": valid, "mean_valid": statistics.fmean(valid.values()),
            "worst": max(valid, key=valid.get), "worst_valid": max(valid.values()),
            "final_weights": {name: numbers["weight"] for name, numbers in last.items()},
            "final_shares": {name: numbers["share"] for name, numbers in last.items()},
            "step_seconds": statistics.fmean(args.global_batch * args.seq_length / r["tokens_per_s"]
                                             for r in steps[min(args.warmup, len(steps) - 1):])}


def host_cost(blend: Path, args: argparse.Namespace) -> dict:
    """Seconds online mixing adds to a step on this host: drawing one global batch's sources (as the loader does,
    one micro-step at a time) and one mixer update (amortised over ``update_interval`` steps)."""
    from corpus.blending.datasets import SampleCounts, build_split_datasets
    from corpus.blending.schema import load_blend

    train = build_split_datasets(load_blend(blend), SampleCounts(args.steps * args.global_batch)).train
    mixer = train.online_mixer()
    names = len(train.source_names)
    steps = min(args.steps, 200)
    started = time.perf_counter()
    for step in range(1, steps + 1):
        for start in range(0, args.global_batch, args.micro_batch):
            train.draw.draw_to((step - 1) * args.global_batch + start + args.micro_batch)
        weights = mixer.after_step(step, [1000.0 + step] * names, [500.0] * names)
        if weights is not None:
            train.set_weights(weights, step * args.global_batch)
    return {"seconds_per_step": (time.perf_counter() - started) / steps, "steps_timed": steps}


CPU_CHECK = {"preset": "tiny", "seq_length": 128, "micro_batch": 4, "global_batch": 8, "steps": 12,
             "eval_interval": 6, "eval_iters": 1, "eval_samples_per_source": 8, "update_interval": 3, "warmup": 2,
             "precision": []}


def table(results: dict) -> None:
    """One row per run: each source's validation loss, their mean, the worst, tokens/s; then the mixing cost."""
    print(f"\n{'run':8} " + " ".join(f"{name:>9}" for name in SOURCES)
          + f" {'mean':>8} {'worst':>14} {'tokens':>12} {'tok/s':>10}  final weights")
    for name in ("fixed", "anneal", "online"):
        record = results.get(name)
        if record is None:
            continue
        if "failed" in record:
            print(f"{name:8} failed: {record['failed']}")
            continue
        losses = " ".join(f"{record['valid'].get(source, float('nan')):>9.4f}" for source in SOURCES)
        weights = ", ".join(f"{source} {weight:.3f}" for source, weight in record["final_weights"].items())
        worst = f"{record['worst']} {record['worst_valid']:.3f}"
        print(f"{name:8} {losses} {record['mean_valid']:>8.4f} {worst:>14} {record['tokens']:>12,} "
              f"{record['tokens_per_s']:>10,.0f}  {weights}")
    fixed, online = results.get("fixed", {}), results.get("online", {})
    if "tokens_per_s" in fixed and "tokens_per_s" in online:
        print(f"online / fixed tokens/s: {online['tokens_per_s'] / fixed['tokens_per_s']:.4f}")
    if "host" in results and "step_seconds" in fixed:
        share = results["host"]["seconds_per_step"] / fixed["step_seconds"]
        print(f"online mixing's host work per step: {1e3 * results['host']['seconds_per_step']:.3f} ms, "
              f"{100 * share:.3f}% of the fixed run's step (target <= 1%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="build and tokenize the three sources, then exit")
    parser.add_argument("--data", type=Path, default=DATA, help="folder of the tokenized sources (--prepare writes it)")
    parser.add_argument("--runs", default="fixed,anneal,online", help="comma list of fixed, anneal, online")
    parser.add_argument("--steps", type=int, default=800, help="steps per run (800 x 64 x 1024 = 52.4M tokens)")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--anneal-weight", type=float, default=0.6, help="python's weight in the anneal phase")
    parser.add_argument("--update-interval", type=int, default=20)
    parser.add_argument("--floor", type=float, default=0.05)
    parser.add_argument("--eval-interval", type=int, default=200)
    parser.add_argument("--eval-iters", type=int, default=4)
    parser.add_argument("--eval-samples-per-source", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=10, help="first steps left out of the speed means")
    parser.add_argument("--timeout", type=float, default=3000, help="seconds per trainer run")
    parser.add_argument("--cpu-check", action="store_true", help=f"tiny shapes on the CPU: {CPU_CHECK}")
    args = parser.parse_args()
    if args.prepare:
        return prepare(args.data)
    defaults = {"preset": "125m", "seq_length": 1024, "precision": ["--bf16"]}
    for key, value in {**defaults, **(CPU_CHECK if args.cpu_check else {})}.items():
        setattr(args, key, value)
    if not (args.data / "python_text_document.idx").exists():
        raise SystemExit(f"{args.data}/python_text_document.idx missing: run `python -m bench.mixing_h200 --prepare`")
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory() as scratch:
        blends = write_blends(Path(scratch), args.data, args)
        for name in args.runs.split(","):
            try:
                results[name] = train(name, blends[name], args)
            except subprocess.TimeoutExpired as error:
                results[name] = {"failed": f"timed out after {error.timeout:.0f} s"}
            write_results("mixing_h200", results)
        results["host"] = host_cost(blends["online"], args)
        write_results("mixing_h200", results)
    table(results)


if __name__ == "__main__":
    main()
