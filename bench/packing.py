"""Best-fit packing (``packing: best_fit``) vs OLMo-core's packer and vs the concatenating maps, side by side.

    python -m bench.packing [--documents 10000000] [--olmo-python .venv-olmo/bin/python] [--windows 20000]

Documents: the token counts of real text — ``bench/.cache``'s prose_large and code_300 (``python -m bench.data``)
tokenized with Mistral's v3 SentencePiece model (32768 ids) — drawn with replacement up to ``--documents`` per
corpus. Index maps depend on document lengths only, so each corpus becomes an ``.idx`` of those lengths beside a
sparse ``.bin`` of the matching size. Samples hold 4096 tokens on every side (OLMo-core's packer takes a power of
two: ours runs with ``add_extra_token_to_sequence: false``). Each measurement runs in a fresh process:

- ours, best_fit: ``build_split_datasets`` of a one-source ``packing: best_fit`` blend, cache cold (one epoch);
- ours, concat: the same blend with ``packing: concat`` (Megatron's maps), cache cold, the same sample count;
- OLMo-core: ``olmo_core.data.utils.InstancePacker(4096).pack_documents`` (its OBFD, over all documents at once)
  on the same documents cut the same way (its ``fragment`` strategy), in the venv of ``--olmo-python``; only the
  packing call is timed (its document scan of ``.npy`` token files is left out).

Padding is the share of sample tokens that is padding (concat has none). Prints a table last; ratios are
ours best_fit's build time over the other side's.
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

import numpy as np

from corpus.core.atomic_write import atomic_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CACHE = REPO / "bench" / ".cache"
CORPORA = {"prose": "prose_large.jsonl", "code": "code_300.jsonl"}
CAPACITY = 4096


def real_lengths(work: Path, corpus: str) -> np.ndarray:
    """Tokens per document of ``corpus`` (tokenized once into ``work`` with ``corpus tokenize``)."""
    from importlib.util import find_spec

    from corpus.indexed import IndexedReader, exists

    prefix = work / "real" / corpus
    if not exists(f"{prefix}_text_document"):
        model = Path(find_spec("mistral_common").origin).parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(CACHE / CORPORA[corpus]),
                        "--output-prefix", str(prefix), "--json-keys", "text", "--tokenizer-type",
                        "SentencePieceTokenizer", "--tokenizer-model", str(model), "--append-eod", "--quiet"],
                       cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return np.array(IndexedReader(f"{prefix}_text_document").sequence_lengths)


def write_lengths(prefix: Path, lengths: np.ndarray) -> None:
    """A Megatron ``.idx`` (uint16 tokens, one sequence per document) and a sparse ``.bin`` of its size (kept
    when the pair already holds these lengths)."""
    from corpus.indexed import IndexedReader, exists

    if exists(prefix) and np.array_equal(IndexedReader(prefix).sequence_lengths, lengths):
        return
    count = len(lengths)
    pointers = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * 2, out=pointers[1:])
    with open(prefix.with_suffix(".bin"), "wb") as handle:
        handle.truncate(int(lengths.sum(dtype=np.int64)) * 2)
    with atomic_file(prefix.with_suffix(".idx")) as handle:  # last: the pair exists once its index does
        handle.write(b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([8]))
        handle.write(np.array([count, count + 1], "<u8").tobytes())
        handle.write(lengths.astype("<i4").tobytes() + pointers.tobytes())
        handle.write(np.arange(count + 1, dtype="<i8").tobytes())


def _worker_ours(blend: Path, samples: int) -> dict:
    from corpus.blending.datasets import SampleCounts, build_split_datasets
    from corpus.blending.report import dry_run
    from corpus.blending.schema import load_blend

    config = load_blend(blend)
    start, cpu = time.perf_counter(), time.process_time()
    train = build_split_datasets(config, SampleCounts(samples)).train
    build, cpu = time.perf_counter() - start, time.process_time() - cpu
    row = dry_run(config, SampleCounts(samples))[0].rows[0]  # warm now: the padding of the samples taken
    assert row.epochs == 1, "the sample count asks for one epoch of either map"
    return {"build_s": build, "cpu_s": cpu, "samples": len(train), "epochs": row.epochs,
            "padding": row.padding or 0.0, "cut": row.documents_cut, "short_cut": row.short_documents_cut}


def _worker_olmo(lengths_file: Path, _samples: int) -> dict:
    from olmo_core.data.utils import InstancePacker

    lengths = np.load(lengths_file).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pieces = (lengths - 1) // CAPACITY + 1
    first = np.repeat(starts, pieces) + CAPACITY * (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces,
                                                                                         pieces))
    ends = np.minimum(first + CAPACITY, np.repeat(starts + lengths, pieces))
    documents = np.stack([first, ends], axis=1).astype(np.uint64)
    start, cpu = time.perf_counter(), time.process_time()
    instances, _, tokens = InstancePacker(CAPACITY).pack_documents(documents)
    build, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"build_s": build, "cpu_s": cpu, "samples": len(instances), "epochs": 1,
            "padding": 1 - tokens / (len(instances) * CAPACITY), "cut": int(np.count_nonzero(pieces > 1)),
            "short_cut": 0}


def _run(python: str, kind: str, path: Path, samples: int) -> dict:
    """One measurement in a fresh process; adds the whole process's wall time."""
    start = time.perf_counter()
    done = subprocess.run([python, __file__, "--worker", kind, str(path), str(samples)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if done.returncode:
        raise SystemExit(f"{kind} worker failed:\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - start}


def _blend(prefix: Path, corpus: str, packing: str, window: int) -> Path:
    path = prefix.parent / f"{corpus}-{packing}-{window}.yaml"
    path.write_text(f"seq_length: {CAPACITY}\nseed: 1234\nsplit: '100,0,0'\npacking: {packing}\n"
                    f"packing_window: {window}\ncache_dir: {path.stem}-cache\n"
                    f"samples: {{add_extra_token_to_sequence: false}}\n"
                    f"sources:\n  - {{name: {corpus}, prefix: '{prefix}'}}\n")
    return path


def measure(args: argparse.Namespace, corpus: str) -> list[tuple[str, dict]]:
    """Every side on one corpus, each side ``--repeat`` times alternated, the fastest kept."""
    work = args.workdir
    real = real_lengths(work, corpus)
    lengths = np.random.default_rng(1).choice(real, size=args.documents).astype(np.int32)
    prefix = work / f"{corpus}-{args.documents}_text_document"
    write_lengths(prefix, lengths)
    np.save(work / f"{corpus}-lengths.npy", lengths)
    samples = int(0.98 * (int(lengths.sum(dtype=np.int64)) // CAPACITY))  # one epoch of either map
    sides = [(f"ours best_fit (window {w})", sys.executable, "ours", _blend(prefix, corpus, "best_fit", w))
             for w in args.windows]
    sides.append(("ours concat (Megatron's maps)", sys.executable, "ours", _blend(prefix, corpus, "concat", 1)))
    if args.olmo_python != "none":
        sides.append(("OLMo-core InstancePacker (OBFD)", args.olmo_python, "olmo", work / f"{corpus}-lengths.npy"))
    best: dict[str, dict] = {}
    for round_number in range(args.repeat):
        for name, python, kind, path in sides:
            if kind == "olmo" and round_number:
                continue  # tens of times slower than ours: one run tells the ratio
            if kind == "ours":
                shutil.rmtree(work / f"{path.stem}-cache", ignore_errors=True)
            result = _run(python, kind, path, samples)
            if name not in best or result["build_s"] < best[name]["build_s"]:
                best[name] = result
    print(f"{corpus}: {len(real):,} real documents, mean {real.mean():.0f} tokens, {np.mean(real > CAPACITY):.1%} "
          f"longer than {CAPACITY}; drawn {args.documents:,} ({int(lengths.sum(dtype=np.int64)):,} tokens)",
          flush=True)
    return [(f"{corpus}: {name}", best[name]) for name, *_ in sides]


def _print(rows: list[tuple[str, dict]], args: argparse.Namespace) -> None:
    print(f"\n{args.documents:,} documents per corpus, samples of {CAPACITY} tokens, best of {args.repeat}; "
          f"python {sys.version.split()[0]}, cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    print(f"{'case':<52} {'build s':>8} {'cpu s':>8} {'process s':>10} {'samples':>11} {'padding':>9} "
          f"{'cut':>9} {'short cut':>9} {'ours/this':>9}")
    print("(build: the timed call; process: the whole worker, imports and, for ours, the padding count after the "
          "build; cut: documents split across samples by packing; short cut: those of at most one sample's length; "
          "ours/this: our best_fit build time over this row's)")
    ours = {}
    for name, result in rows:
        corpus = name.split(":")[0]
        if "best_fit" in name and corpus not in ours:
            ours[corpus] = result["build_s"]
        ratio = ours[corpus] / result["build_s"] if corpus in ours else None
        print(f"{name:<52} {result['build_s']:>8.2f} {result['cpu_s']:>8.2f} {result['process_s']:>10.2f} "
              f"{result['samples']:>11,} {result['padding']:>9.4%} {_count(result['cut']):>9} "
              f"{_count(result['short_cut']):>9} {ratio if ratio is not None else float('nan'):>9.2f}")


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=10_000_000, help="documents per corpus")
    parser.add_argument("--corpora", default="prose,code", help=f"comma list of {', '.join(CORPORA)}")
    parser.add_argument("--windows", type=lambda text: [int(w) for w in text.split(",")], default=[20_000],
                        help="packing_window values of our best_fit side (comma list; the first is the ratios' base)")
    parser.add_argument("--olmo-python", default=str(REPO / ".venv-olmo" / "bin" / "python"),
                        help="a Python with ai2-olmo-core installed (its own venv), or none")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each of our sides, alternated, the fastest kept (OLMo-core's: one)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/blendforge-bench-packing"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = [row for corpus in args.corpora.split(",") for row in measure(args, corpus)]
    _print(rows, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker = {"ours": _worker_ours, "olmo": _worker_olmo}[sys.argv[2]]
        print(json.dumps(worker(Path(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
