"""Index-map build speed: ours vs megatron-core's BlendedMegatronDatasetBuilder, side by side.

    PYTHONPATH=. python bench/index_maps.py [--samples 10000000] [--shards 1000] [--workdir /tmp/bench-maps]

(a) two sources x ``--samples`` samples, cache cold; (b) one glob source over ``--shards`` shard
prefixes (megatron-core gets the same prefixes, weighted by size), cold and warm; (c) a fresh
process asking for one sample from a warm cache (``corpus blend … --show-samples 0:1``).
Each measurement runs in a fresh process (imports counted apart), the two sides alternated
``--repeat`` times with the fastest kept; split "100,0,0" for both sides so both build exactly
the train maps. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run by path: the repository's packages first

from bench._blend_fixtures import MegatronTokenizer, init_gloo, write_source  # noqa: E402


def _worker_ours(blend: Path, samples: int) -> dict:
    start = time.perf_counter()
    from corpus.blending.datasets import SampleCounts, build_split_datasets
    from corpus.blending.schema import load_blend

    imported, cpu = time.perf_counter(), time.process_time()
    datasets = build_split_datasets(load_blend(blend), SampleCounts(samples))
    return {"import_s": imported - start, "build_s": time.perf_counter() - imported,
            "cpu_s": time.process_time() - cpu, "length": len(datasets.train)}


def _worker_megatron(spec: Path, samples: int) -> dict:
    start = time.perf_counter()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    imported, cpu = time.perf_counter(), time.process_time()
    blend = json.loads(spec.read_text())
    init_gloo(spec.parent)
    config = GPTDatasetConfig(random_seed=1234, sequence_length=blend["seq_length"],
                              blend=(blend["prefixes"], blend["weights"]),
                              split="100,0,0", tokenizer=MegatronTokenizer(), reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
                              path_to_cache=blend["cache"])
    train = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()[0]
    return {"import_s": imported - start, "build_s": time.perf_counter() - imported,
            "cpu_s": time.process_time() - cpu, "length": len(train)}


def _run(kind: str, path: Path, samples: int, env: dict | None = None) -> dict:
    """One measurement in a fresh process; adds the whole process's wall time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--worker", kind, str(path), str(samples)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    if done.returncode:
        raise SystemExit(f"{kind} worker failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": time.perf_counter() - start}


def _write_blends(workdir: Path, name: str, sources: list[tuple[str, list[str], float, str]],
                  seq_length: int) -> tuple[Path, Path]:
    """Our blend file and megatron's spec for the same sources (megatron takes every prefix)."""
    ours = workdir / f"{name}.yaml"
    entries = "\n".join(f"  - {{name: {name}, prefix: '{spec}', weight: {weight}}}"
                        for name, _, weight, spec in sources)
    ours.write_text(f"seq_length: {seq_length}\nseed: 1234\nsplit: '100,0,0'\ncache_dir: {name}-cache\n"
                    f"sources:\n{entries}\n")
    prefixes, weights = [], []
    for _, shard_prefixes, weight, _ in sources:
        sizes = [os.path.getsize(p + ".bin") for p in shard_prefixes]
        prefixes += shard_prefixes
        weights += [weight * s / sum(sizes) for s in sizes]
    spec = workdir / f"{name}.megatron.json"
    spec.write_text(json.dumps({"prefixes": prefixes, "weights": weights, "seq_length": seq_length,
                                "cache": str(workdir / f"{name}-megatron-cache")}))
    return ours, spec


def _fresh(cache: Path) -> None:
    shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--shard-samples", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--seq-length", type=int, default=1024)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/blendforge-bench-maps"))
    parser.add_argument("--repeat", type=int, default=3, help="runs per side, alternated; the fastest is kept")
    args = parser.parse_args()
    work = args.workdir
    web = str(write_source(work / "web", 100_000, 500, seed=1))
    code = str(write_source(work / "code", 60_000, 400, seed=2))
    shards = [str(write_source(work / "shards" / f"part-{i:05d}", 300, 200, seed=100 + i)) for i in range(args.shards)]
    two, two_spec = _write_blends(work, "two", [("web", [web], 0.7, web), ("code", [code], 0.3, code)], args.seq_length)
    many, many_spec = _write_blends(work, "many", [("shards", shards, 1.0, str(work / "shards" / "part-*"))],
                                    args.seq_length)
    stamp = time.time_ns()  # a first process ever: no compiled C kernels and no numba cache yet
    first_process = {"NUMBA_CACHE_DIR": str(work / f"numba-{stamp}"),
                     "BLENDFORGE_KERNEL_CACHE_DIR": str(work / f"kernels-{stamp}")}
    _fresh(work / "two-cache")
    first_ever = _run("ours", two, args.samples, first_process)
    rows = [("(a) 2 sources, cold, first process ever (kernels compile)", first_ever, None)]
    sides = {"two": (lambda: _run("ours", two, args.samples), lambda: _run("megatron", two_spec, args.samples)),
             "many": (lambda: _run("ours", many, args.shard_samples),
                      lambda: _run("megatron", many_spec, args.shard_samples))}
    rows.append(("(a) 2 sources, cold", *_best(args.repeat, work, "two", *sides["two"], cold=True)))
    rows.append((f"(b) {args.shards} shards, cold", *_best(args.repeat, work, "many", *sides["many"], cold=True)))
    rows.append((f"(b) {args.shards} shards, warm", *_best(args.repeat, work, "many", *sides["many"], cold=False)))
    one_sample = min((_cli_one_sample(two, args.samples) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
    rows.append(("(c) one sample, warm cache (corpus blend --show-samples 0:1)", one_sample, None))
    _print(rows, args)


def _best(repeat: int, work: Path, name: str, ours, theirs, cold: bool) -> tuple[dict, dict]:
    """Alternate the two sides ``repeat`` times (the machine is shared: noise hits both) and keep
    each side's fastest figures. Cold: each run starts with its side's cache deleted; warm: both
    caches are filled once first."""
    caches = (work / f"{name}-cache", work / f"{name}-megatron-cache")
    if not cold:
        ours(), theirs()
    mine, other = [], []
    for _ in range(repeat):
        for run, cache, results in ((ours, caches[0], mine), (theirs, caches[1], other)):
            if cold:
                _fresh(cache)
            results.append(run())

    def fastest(runs: list[dict]) -> dict:
        return {key: min(run[key] for run in runs) for key in ("build_s", "cpu_s", "wall_s")}

    return fastest(mine), fastest(other)


def _cli_one_sample(blend: Path, samples: int) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli.corpus", "blend", str(blend), "--num-samples", str(samples),
                           "--show-samples", "0:1", "--json"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert done.returncode == 0 and json.loads(done.stdout)["index"] == 0, done.stderr
    return {"wall_s": time.perf_counter() - start, "build_s": None, "cpu_s": None}


def _print(rows: list, args: argparse.Namespace) -> None:
    print(f"\nsamples (a): {args.samples:,}  samples (b): {args.shard_samples:,}  seq_length {args.seq_length}  "
          f"python {sys.version.split()[0]}  cpus {os.cpu_count()}  load {os.getloadavg()[0]:.1f}  "
          f"best of {args.repeat}")
    print("build: seconds after imports (wall, and CPU of all threads); process: whole process wall, imports included")
    header = ["case", "ours build", "ours cpu", "ours process", "mcore build", "mcore cpu", "mcore process",
              "build x", "cpu x", "process x"]
    print(f"{header[0]:<58}" + "".join(f"{h:>14}" for h in header[1:]))
    for name, ours, theirs in rows:
        cells = [ours.get("build_s"), ours.get("cpu_s"), ours["wall_s"]]
        cells += [theirs["build_s"], theirs["cpu_s"], theirs["wall_s"]] if theirs else [None] * 3
        ratios = ([theirs[k] / ours[k] for k in ("build_s", "cpu_s", "wall_s")] if theirs else [None] * 3)
        text = [f"{c:.2f}" if c is not None else "-" for c in cells] + [f"{r:.1f}" if r else "-" for r in ratios]
        print(f"{name:<58}" + "".join(f"{t:>14}" for t in text))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker = {"ours": _worker_ours, "megatron": _worker_megatron}[sys.argv[2]]
        print(json.dumps(worker(Path(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
