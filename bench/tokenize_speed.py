"""Tokenize throughput, whole process, for each tokenizer family: ``corpus tokenize`` against its ceilings and
Megatron's baseline, and its start-up on one document.

    python -m bench.data                                   # once: real prose and code from Debian packages
    python -m bench.tokenize_speed                         # every family on ~30 MB of prose and code, then
                                                           # the first family on 105 MB of prose and 300 MB of code
    python -m bench.tokenize_speed --families llama3-json --corpora prose --scale-corpora none --methods b c d
    python -m bench.tokenize_speed --families llama3-json --corpora prose code --scale-corpora code_60 code_300 \
        --methods b c d --repeat 5                         # the targets of issue #28, medians of 5 runs

Each method runs in a fresh process on the same input and cores (the families: ``bench/tokenizer_families.py``):
(a) the reference library's batch encode on strings already in memory, every core (its ceiling);
(b) Megatron's ``tools/preprocess_data.py`` pattern: ``json.loads`` + one-document encode per line in
    ``multiprocessing.Pool.imap(chunksize=32)``, written with megatron-core's ``IndexedDatasetBuilder``
    (per-document encode with the reference library itself, cheaper than Megatron's transformers wrapper,
    so the baseline is generous);
(c) ``corpus tokenize`` with its defaults (``corpus.tokenize.run.tokenize``: start-up, encoder check, the
    check of the input against the reference, writing), as a user runs it (the encoder check cached by a
    first run of the same tokenizer, as every run after a user's first);
(d) the raw engine: gigatoken alone, loading the same file and encoding the JSONL with its own reader,
    writing nothing (where gigatoken reads the family's files);
(e) (c) with ``--check-input``: the reference library loaded beside the run to check the first records.
MB/s are input JSONL bytes over the whole process's wall time (interpreter start and imports included);
(b) and (c) outputs are compared byte for byte. Peak RSS: the main process's own (VmHWM) / the largest
child's. The start-up table runs (c) twice on a one-document file from an empty check cache (the first run
makes the encoder check, the second finds it) and prints the summary's start-up figures. The encoder checks are
cached in folders of the benchmark's own. Short tables come last.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from bench.data import CACHE, build
from bench.tokenizer_families import FAMILIES, files
from corpus.core.cores import available_cores

CORES = available_cores()


def _config(tokenizer: dict, **changes):
    from corpus.tokenizers import TokenizerConfig

    return TokenizerConfig(**{**tokenizer, **changes})


def raw_library(family: str, path: str, out: str) -> dict:
    """(a): strings decoded up front; time only the reference library's batch call with every core."""
    import orjson

    from corpus.tokenizers import build_tokenizer

    texts = [orjson.loads(line)["text"] for line in open(path, "rb")]
    reference = build_tokenizer(_config(FAMILIES[family].fields(files())), threads=CORES)
    began = time.perf_counter()
    tokens = sum(len(ids) for start in range(0, len(texts), 1000)
                 for ids in reference.encode_batch(texts[start:start + 1000]))
    return {"seconds": time.perf_counter() - began, "tokens": tokens}


class MegatronEncoder:
    """tools/preprocess_data.py's Encoder: json.loads and one document per call, in pool workers."""

    def __init__(self, tokenizer: dict) -> None:
        self.tokenizer_fields = tokenizer

    def initializer(self) -> None:
        from corpus.tokenizers import build_tokenizer

        MegatronEncoder.tokenizer = build_tokenizer(_config(self.tokenizer_fields, encoder="reference"), threads=1)

    def encode(self, json_line: str):
        text = json.loads(json_line)["text"]
        ids = MegatronEncoder.tokenizer.encode_batch([text])[0]
        if ids:
            ids = ids + [MegatronEncoder.tokenizer.eod]
        return ids, [len(ids)] if ids else [], len(json_line)


def megatron_style(family: str, path: str, out: str) -> dict:
    """(b): Pool.imap(chunksize=32) + IndexedDatasetBuilder, as Megatron's preprocess_data.py."""
    return megatron_style_run(FAMILIES[family].fields(files()), path, out, CORES)


def megatron_style_run(fields: dict, path: str, out: str, processes: int) -> dict:
    """Megatron's preprocess_data.py pattern with the tokenizer ``fields`` in ``processes`` pool workers."""
    import multiprocessing
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder, get_bin_path, get_idx_path
    from corpus.indexed import token_dtype_for_vocab
    from corpus.tokenizers import build_tokenizer

    encoder = MegatronEncoder(fields)
    vocab_size = build_tokenizer(_config(fields, encoder="reference"), threads=1).vocab_size
    prefix = f"{out}/megatron_text_document"
    builder = IndexedDatasetBuilder(get_bin_path(prefix), dtype=token_dtype_for_vocab(vocab_size).type)
    tokens = 0
    pool = multiprocessing.Pool(processes, initializer=encoder.initializer)
    with open(path, encoding="utf-8") as lines, pool:
        for ids, lengths, _ in pool.imap(encoder.encode, lines, 32):
            builder.add_document(ids, lengths)
            tokens += len(ids)
    builder.finalize(get_idx_path(prefix))
    return {"tokens": tokens, "prefix": prefix}


def ours(family: str, path: str, out: str, check_input: bool = False) -> dict:
    """(c): corpus tokenize with its defaults, the whole pipeline."""
    from corpus.tokenize.config import TokenizeConfig
    from corpus.tokenize.run import tokenize

    stats = tokenize(TokenizeConfig(inputs=[path], output_prefix=f"{out}/ours", check_input=check_input,
                                    tokenizer=_config(FAMILIES[family].fields(files())), append_eod=True, quiet=True))
    return {"tokens": stats.counters.total_tokens, "prefix": f"{out}/ours_text_document", "encoder": stats.encoder,
            "startup": stats.startup_seconds, "run_seconds": stats.seconds}


def raw_engine(family: str, path: str, out: str) -> dict:
    """(d): gigatoken alone, its own JSONL reader, nothing written."""
    import awkward
    import gigatoken

    tokenizer = FAMILIES[family].raw_engine(files())
    ids = tokenizer.encode_files(gigatoken.JsonlFileSource([path], field="text"))
    return {"tokens": int(awkward.sum(awkward.num(ids)))}


def ours_checking_input(family: str, path: str, out: str) -> dict:
    """(e): (c) with ``--check-input`` (the reference library loaded beside the run to check its first records)."""
    return ours(family, path, out, check_input=True)


METHODS = {"a": raw_library, "b": megatron_style, "c": ours, "d": raw_engine, "e": ours_checking_input}


def run_child(method: str, family: str, path: Path, out: str) -> dict:
    """One measurement in a fresh interpreter, timed from outside (start-up and imports included)."""
    command = [sys.executable, "-m", "bench.tokenize_speed", "--child", method, "--families", family,
               "--child-input", str(path), "--child-out", out]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"{method} {family} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.setdefault("seconds", seconds)  # (a) times its encode alone; the others the whole process
    result["megabytes_per_second"] = path.stat().st_size / 1e6 / result["seconds"]
    return result


def child_main(args: argparse.Namespace) -> None:
    result = METHODS[args.child](args.families[0], args.child_input, args.child_out)
    from corpus.tokenize.stats import peak_rss_mb  # VmHWM: not the parent's, as ru_maxrss would be

    result["rss_main_mb"] = peak_rss_mb()
    result["rss_child_mb"] = peak_rss_mb(resource.RUSAGE_CHILDREN)
    print(json.dumps(result))


def same_bytes(first: str, second: str) -> bool:
    """Byte equality of two outputs, read in chunks (a 300 MB input's output must not sit in memory)."""
    return all(filecmp.cmp(first + suffix, second + suffix, shallow=False) for suffix in (".bin", ".idx"))


def compare(family: str, corpus: str, methods: list[str], repeat: int = 1) -> dict:
    """The methods on one corpus, side by side ((c) once beforehand, so its encoder check is cached), each run
    ``repeat`` times in turn with the others; the run of median time stands for each."""
    path = build(corpus)
    wanted = [m for m in methods if m != "d" or FAMILIES[family].raw_engine is not None]
    with tempfile.TemporaryDirectory(prefix="bench-tokenize-") as out:
        if "c" in wanted:
            run_child("c", family, one_document(), out)
        runs: dict[str, list[dict]] = {method: [] for method in wanted}
        for _ in range(repeat):
            for method in wanted:
                runs[method].append(run_child(method, family, path, out))
        results = {method: sorted(done, key=lambda r: r["seconds"])[(len(done) - 1) // 2]
                   for method, done in runs.items()}
        identical = same_bytes(results["b"]["prefix"], results["c"]["prefix"]) if {"b", "c"} <= set(wanted) else None
    rate = {method: result["megabytes_per_second"] for method, result in results.items()}
    row = {"family": family, "corpus": corpus, "megabytes": path.stat().st_size / 1e6, "identical": identical,
           "repeat": repeat,
           **{f"c/{m}": rate["c"] / rate[m] for m in rate if m != "c" and "c" in rate}, **results}
    print(json.dumps(row), flush=True)
    return row


def startup_row(family: str) -> dict:
    """(c) twice on a one-document file, from an empty check cache: the first run's start-up (the check made)
    and the second's (the check cached), with its whole-process time."""
    path, shared = one_document(), os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as out:
        os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"] = f"{out}/checks"  # the first checks cold, the second finds it
        try:
            first = run_child("c", family, path, out)
            second = run_child("c", family, path, out)
        finally:
            os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"] = shared
    row = {"family": family, "first_startup": first["startup"], "startup": second["startup"],
           "run": second["run_seconds"], "process": second["seconds"], "encoder": second["encoder"]}
    print(json.dumps(row), flush=True)
    return row


def one_document() -> Path:
    """A one-document JSONL (the first record of the prose corpus)."""
    target = CACHE / "one_document.jsonl"
    if not target.exists():
        with open(build("prose"), "rb") as prose:
            target.write_bytes(prose.readline())
    return target


def _cell(row: dict, method: str, key: str = "megabytes_per_second", form: str = "{:8.2f}") -> str:
    return form.format(row[method][key]) if method in row else f"{'-':>{len(form.format(0))}}"


def print_tables(rows: list[dict], startups: list[dict]) -> None:
    repeats = {row["repeat"] for row in rows}
    print(f"\nversions: tokenizers {version('tokenizers')}, tiktoken {version('tiktoken')}, sentencepiece "
          f"{version('sentencepiece')}, gigatoken {version('gigatoken')}, megatron-core {version('megatron-core')}; "
          f"{CORES} cores, load average {os.getloadavg()[0]:.1f}; each rate the median of "
          f"{'/'.join(map(str, sorted(repeats))) or 1} runs")
    rates = " ".join(f"{f'({m}) MB/s':>8}" for m in METHODS)
    print(f"{'family':<20} {'corpus':<11} {'MB':>6} | {rates} | "
          f"{'c/a':>5} {'c/b':>6} {'c/d':>5} {'c/e':>5} | {'start':>5} | {'RSS c':>5} {'RSS d':>5} | same | "
          "encoder (c)")
    for r in rows:
        ratios = " ".join(f"{r[key]:{width}.2f}" if key in r else f"{'-':>{width}}"
                          for key, width in (("c/a", 5), ("c/b", 6), ("c/d", 5), ("c/e", 5)))
        same = {True: "yes", False: "NO", None: "-"}[r["identical"]]
        print(f"{r['family']:<20} {r['corpus']:<11} {r['megabytes']:>6.1f} | {_cell(r, 'a')} {_cell(r, 'b')} "
              f"{_cell(r, 'c')} {_cell(r, 'd')} | {ratios} | {_cell(r, 'c', 'startup', '{:5.2f}')} | "
              f"{_cell(r, 'c', 'rss_main_mb', '{:5.0f}')} {_cell(r, 'd', 'rss_main_mb', '{:5.0f}')} | {same:<4} | "
              f"{r.get('c', {}).get('encoder', '-')}")
    if startups:
        print(f"\n{'one document':<20} | {'start-up, cold':>17} {'cached':>8} | {'run':>5} {'process':>7} | "
              "encoder")
        for s in startups:
            print(f"{s['family']:<20} | {s['first_startup']:>17.2f} {s['startup']:>8.2f} | {s['run']:>5.2f} "
                  f"{s['process']:>7.2f} | {s['encoder']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--corpora", nargs="+", default=["prose", "code"], help="for every family ('none' to skip)")
    parser.add_argument("--scale-corpora", nargs="+", default=["prose_large", "code_300"],
                        help="for the first family only ('none' to skip)")
    parser.add_argument("--methods", nargs="+", default=list("abcd"), choices=list(METHODS))
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each method, in turn with the others; the median run is reported")
    parser.add_argument("--no-startup", action="store_true", help="skip the one-document start-up table")
    parser.add_argument("--child", choices=list(METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--child-input", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)
    files()  # build the tokenizer files once, outside any timed process
    # NOTE: a cache folder of this run's own (children inherit it): the first run of each family checks cold.
    os.environ["BLENDFORGE_TOKENIZER_CHECKS_DIR"] = tempfile.mkdtemp(prefix="bench-tokenize-checks-")
    corpora, scale = ([] if names == ["none"] else names for names in (args.corpora, args.scale_corpora))
    plan = [(f, c) for f in args.families for c in corpora] + [(args.families[0], c) for c in scale]
    rows = [compare(family, corpus, args.methods, args.repeat) for family, corpus in plan]
    startups = [] if args.no_startup else [startup_row(family) for family in args.families]
    print_tables(rows, startups)


if __name__ == "__main__":
    main()
