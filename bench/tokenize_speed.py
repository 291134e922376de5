"""Tokenize throughput: the raw library ceiling (a), a Megatron-style baseline (b) and ``corpus tokenize`` (c).

    python -m bench.data                         # once: real prose and code from Debian packages
    python -m bench.tokenize_speed                     # cl100k tokenizer.json and TikTokenizer, prose and code
    python -m bench.tokenize_speed --tokenizers cl100k-hf --corpora prose --rss-corpus none
    python -m bench.tokenize_speed --corpora prose_large code_300   # at scale: start-up amortised

On the same input and cores, each in a fresh process:
(a) the reference library's batch encode on strings already in memory (its ceiling on these cores);
(b) Megatron's ``tools/preprocess_data.py`` pattern: ``json.loads`` + one-document encode per line in
    ``multiprocessing.Pool.imap(chunksize=32)``, written with megatron-core's ``IndexedDatasetBuilder``
    (per-document encode with the reference library itself, cheaper than Megatron's transformers
    wrapper, so the baseline is generous);
(c) ``corpus.tokenize.run.tokenize`` end to end (start-up, encoder check, spawned workers, writing).
MB/s are input JSONL bytes over wall time; (b) and (c) outputs are compared byte for byte. Peak RSS is
the main process's own (VmHWM) and the largest child's (``ru_maxrss``, which includes what a forked child
inherited). A short table comes last.
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

CORES = os.cpu_count() or 1
CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}


def cl100k_rank_file() -> str:
    from importlib.util import find_spec

    return str(Path(find_spec("tiktoken_ext").submodule_search_locations[0]) / "data" / "cl100k_base.tiktoken")


def cl100k_tokenizer_json() -> str:
    """cl100k as a HF tokenizer.json (transformers' TikTokenConverter, whose default split regex is the
    cl100k/Llama-3 family's), with its special tokens at their tiktoken ids; cached."""
    target = CACHE / "cl100k" / "tokenizer.json"
    if not target.exists():
        from transformers.convert_slow_tokenizer import TikTokenConverter

        data = json.loads(TikTokenConverter(vocab_file=cl100k_rank_file()).converted().to_str())
        data["added_tokens"] = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                                 "normalized": False, "special": True} for c, i in CL100K_SPECIALS.items()]
        data["model"]["vocab"].update(CL100K_SPECIALS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, ensure_ascii=False))
    return str(target)


#: Benchmark tokenizers: how to make their TokenizerConfig fields.
TOKENIZERS = {
    "cl100k-hf": lambda: {"type": "HuggingFaceTokenizer", "model": cl100k_tokenizer_json()},
    "tiktoken": lambda: {"type": "TikTokenizer", "model": cl100k_rank_file()},
}


def _config(tokenizer: dict, **changes):
    from corpus.tokenizers import TokenizerConfig

    return TokenizerConfig(**{**tokenizer, **changes})


def raw_library(tokenizer: dict, path: str, out: str, workers: int | None, threads: int | None) -> dict:
    """(a): strings decoded up front; time only the library's batch encode with every core."""
    import orjson

    from corpus.tokenizers import build_tokenizer

    texts = [orjson.loads(line)["text"] for line in open(path, "rb")]
    reference = build_tokenizer(_config(tokenizer), threads=CORES)

    def call(batch: list[str]) -> list[list[int]]:
        if hasattr(reference, "tokenizer"):  # HF tokenizers: its own rayon-parallel batch call
            return [e.ids for e in reference.tokenizer.encode_batch_fast(batch, add_special_tokens=True)]
        # tiktoken: its own threaded batch call on Megatron's Encoding
        return reference.encoding.encode_batch(batch, num_threads=CORES, allowed_special=reference.allowed_special)

    began = time.perf_counter()
    tokens = sum(len(ids) for start in range(0, len(texts), 1000) for ids in call(texts[start:start + 1000]))
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


def megatron_style(tokenizer: dict, path: str, out: str, workers: int | None, threads: int | None) -> dict:
    """(b): Pool.imap(chunksize=32) + IndexedDatasetBuilder, as Megatron's preprocess_data.py."""
    import multiprocessing
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder, get_bin_path, get_idx_path
    from corpus.indexed import token_dtype_for_vocab
    from corpus.tokenizers import build_tokenizer

    began = time.perf_counter()
    encoder = MegatronEncoder(tokenizer)
    vocab_size = build_tokenizer(_config(tokenizer, encoder="reference"), threads=1).vocab_size
    prefix = f"{out}/megatron_text_document"
    builder = IndexedDatasetBuilder(get_bin_path(prefix), dtype=token_dtype_for_vocab(vocab_size).type)
    tokens = 0
    pool = multiprocessing.Pool(workers or CORES, initializer=encoder.initializer)
    with open(path, encoding="utf-8") as lines, pool:
        for ids, lengths, _ in pool.imap(encoder.encode, lines, 32):
            builder.add_document(ids, lengths)
            tokens += len(ids)
    builder.finalize(get_idx_path(prefix))
    return {"seconds": time.perf_counter() - began, "tokens": tokens, "prefix": prefix}


def ours(tokenizer: dict, path: str, out: str, workers: int | None, threads: int | None) -> dict:
    """(c): corpus tokenize, the whole pipeline (its defaults unless workers/threads are given)."""
    from corpus.tokenize.config import TokenizeConfig
    from corpus.tokenize.run import tokenize

    began = time.perf_counter()
    parallelism = {"workers": workers} if workers is not None else {}
    stats = tokenize(TokenizeConfig(inputs=[path], output_prefix=f"{out}/ours", tokenizer=_config(tokenizer),
                                    append_eod=True, threads_per_worker=threads, quiet=True, **parallelism))
    return {"seconds": time.perf_counter() - began, "tokens": stats.counters.total_tokens,
            "prefix": f"{out}/ours_text_document", "encoder": stats.encoder, "startup": stats.startup_seconds}


METHODS = {"a": raw_library, "b": megatron_style, "c": ours}


def run_child(method: str, tokenizer: str, path: Path, out: str, workers: int | None, threads: int | None) -> dict:
    """One measurement in a fresh interpreter (clean caches, its own peak RSS)."""
    command = [sys.executable, "-m", "bench.tokenize_speed", "--child", method, "--tokenizers", tokenizer,
               "--child-input", str(path), "--child-out", out]
    command += [] if workers is None else ["--workers", str(workers)]
    command += [] if threads is None else ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{method} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["megabytes_per_second"] = path.stat().st_size / 1e6 / result["seconds"]
    result["tokens_per_second"] = result["tokens"] / result["seconds"]
    return result


def child_main(args: argparse.Namespace) -> None:
    fields = TOKENIZERS[args.tokenizers[0]]()
    result = METHODS[args.child](fields, args.child_input, args.child_out, args.workers, args.threads)
    from corpus.tokenize.stats import peak_rss_mb  # VmHWM: not the parent's, as ru_maxrss would be

    result["rss_main_mb"] = peak_rss_mb()
    result["rss_child_mb"] = peak_rss_mb(resource.RUSAGE_CHILDREN)
    print(json.dumps(result))


def same_bytes(first: str, second: str) -> bool:
    """Byte equality of two outputs, read in chunks (a 300 MB input's output must not sit in memory)."""
    return all(filecmp.cmp(first + suffix, second + suffix, shallow=False) for suffix in (".bin", ".idx"))


def compare(tokenizer: str, corpus: str, args: argparse.Namespace) -> dict:
    """(a), (b), (c) on one corpus, side by side."""
    path = build(corpus)
    with tempfile.TemporaryDirectory(prefix="bench-tokenize-") as out:
        results = {"a": run_child("a", tokenizer, path, out, None, None),
                   "b": run_child("b", tokenizer, path, out, args.baseline_workers, None),
                   "c": run_child("c", tokenizer, path, out, args.workers, args.threads)}
        identical = same_bytes(results["b"]["prefix"], results["c"]["prefix"])
    row = {"tokenizer": tokenizer, "corpus": corpus, "megabytes": path.stat().st_size / 1e6, "identical": identical,
           "c/a": results["c"]["megabytes_per_second"] / results["a"]["megabytes_per_second"],
           "c/b": results["c"]["megabytes_per_second"] / results["b"]["megabytes_per_second"], **results}
    print(json.dumps(row), flush=True)
    return row


def rss_rows(tokenizer: str, corpora: list[str], args: argparse.Namespace) -> list[dict]:
    """(c) alone on growing inputs: peak RSS must stay flat."""
    rows = []
    for corpus in corpora:
        path = build(corpus)
        with tempfile.TemporaryDirectory(prefix="bench-rss-") as out:
            result = run_child("c", tokenizer, path, out, args.workers, args.threads)
        rows.append({"tokenizer": tokenizer, "corpus": corpus, "megabytes": path.stat().st_size / 1e6, **result})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def print_tables(rows: list[dict], rss: list[dict]) -> None:
    print(f"\nversions: tokenizers {version('tokenizers')}, tiktoken {version('tiktoken')}, gigatoken "
          f"{version('gigatoken')}, megatron-core {version('megatron-core')}; {CORES} cores")
    print(f"{'tokenizer':<10} {'corpus':<7} {'MB':>6} | {'(a) MB/s':>8} {'(b) MB/s':>8} {'(c) MB/s':>8} | "
          f"{'c/a':>5} {'c/b':>6} | {'(c) tok/s':>10} {'start':>5} | {'RSS b main/child':>16} "
          f"{'RSS c main/child':>16} | same")
    for r in rows:
        a, b, c = r["a"], r["b"], r["c"]
        print(f"{r['tokenizer']:<10} {r['corpus']:<7} {r['megabytes']:>6.1f} | {a['megabytes_per_second']:>8.2f} "
              f"{b['megabytes_per_second']:>8.2f} {c['megabytes_per_second']:>8.2f} | {r['c/a']:>5.2f} "
              f"{r['c/b']:>6.2f} | {c['tokens_per_second']:>10,.0f} {c['startup']:>5.1f} | "
              f"{b['rss_main_mb']:>7.0f}/{b['rss_child_mb']:<8.0f} {c['rss_main_mb']:>7.0f}/{c['rss_child_mb']:<8.0f} "
              f"| {'yes' if r['identical'] else 'NO'}")
    for r in rss:
        print(f"RSS (c) {r['tokenizer']} {r['corpus']} {r['megabytes']:.0f} MB: main {r['rss_main_mb']:.0f} MB, "
              f"largest worker {r['rss_child_mb']:.0f} MB, {r['megabytes_per_second']:.2f} MB/s ({r['encoder']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizers", nargs="+", default=list(TOKENIZERS))
    parser.add_argument("--corpora", nargs="+", default=["prose", "code", "prose_large", "code_300"])
    parser.add_argument("--rss-corpus", nargs="+", default=["code", "code_300"],
                        help="corpora for the RSS rows of (c) with the first tokenizer ('none' to skip)")
    parser.add_argument("--baseline-workers", type=int, default=CORES, help="Pool processes of (b)")
    parser.add_argument("--workers", type=int, help="--workers of (c) (default: corpus tokenize's)")
    parser.add_argument("--threads", type=int, help="--threads-per-worker of (c) (default: corpus tokenize's)")
    parser.add_argument("--child", choices=list(METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--child-input", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)
    rows = [compare(t, c, args) for t in args.tokenizers for c in args.corpora]
    rss = [] if args.rss_corpus == ["none"] else rss_rows(args.tokenizers[0], args.rss_corpus, args)
    print_tables(rows, rss)


if __name__ == "__main__":
    main()
