"""Does an encoder's memory stay flat as the corpus grows? gigatoken, gigatoken-cachefix, our gigatoken
adapter (corpus.tokenizers, which rebuilds the tokenizer past a memory budget) and HF tokenizers.

    python bench/tokenizer_memory.py --tokenizer examples/tokenizer.json --megabytes 300 \
        [--cachefix-path DIR]   # a `pip install --no-deps --target DIR gigatoken-cachefix`

Upstream gigatoken 0.10.0 memoises every pre-token it has encoded, without bound; the
``gigatoken-cachefix`` fork bounds those caches. Each encoder runs in its own fresh process over the
same real text (source files and docs, read in sorted path order, never a sample repeated: repetition
would hide cache growth), in batches, and reports its RSS after every tenth of the input, its peak RSS
and its throughput. ``--unique-words`` replaces the text by words that never repeat, the worst case
for a pre-token cache. The table printed last compares them side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

SUFFIXES = (".py", ".pyi", ".rst", ".md", ".txt", ".c", ".h", ".cpp", ".hpp", ".cuh")
BATCH_BYTES = 4 << 20


def corpus_paths(roots: list[str]) -> list[str]:
    """Text files under ``roots`` in sorted order."""
    return sorted(str(path) for root in roots for path in Path(root).rglob("*")
                  if path.suffix in SUFFIXES and path.is_file() and not path.is_symlink())


def batches(paths: list[str], limit: int):
    """Lists of documents of about BATCH_BYTES each, up to ``limit`` bytes in all."""
    batch, size, total = [], 0, 0
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        length = len(text.encode("utf-8"))
        if total + length > limit:
            break
        batch.append(text)
        size, total = size + length, total + length
        if size >= BATCH_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


def unique_word_batches(limit: int):
    """Synthetic worst case for a pre-token cache: every word is new (digests of a counter spelt in
    letters only, so that a split regex keeps each word one pre-token)."""
    import hashlib

    letters = str.maketrans("0123456789", "ghijklmnop")
    counter, total = 0, 0
    while total < limit:
        words = [hashlib.sha256(str(counter + i).encode()).hexdigest()[:12].translate(letters)
                 for i in range(BATCH_BYTES // 13)]
        counter += len(words)
        texts = [" ".join(words[start:start + 500]) for start in range(0, len(words), 500)]
        size = sum(len(text) for text in texts)
        total += size
        yield texts, size


def current_rss_mb() -> float:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def make_encoder(name: str, tokenizer_json: str):
    """A batch-encode function for ``name`` (gigatoken variants are whichever ``gigatoken`` imports)."""
    if name == "tokenizers":
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tokenizer_json)
        return lambda texts: [e.ids for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    if name == "corpus.tokenizers":
        from corpus.tokenizers import TokenizerConfig, select_encoder

        config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_json, encoder="gigatoken")
        return select_encoder(config, [], threads=int(os.environ["RAYON_NUM_THREADS"]))[0].encode_batch
    import gigatoken

    tokenizer = gigatoken.Tokenizer.from_json(Path(tokenizer_json).read_text(encoding="utf-8"))
    return lambda texts: tokenizer.encode_batch_list(texts, parallel=True)


def child(args: argparse.Namespace) -> None:
    """Encode the corpus with one encoder and print one JSON line of measurements."""
    encode = make_encoder(args.child, args.tokenizer)
    limit = args.megabytes * 1_000_000
    checkpoints, done, tokens, start = [], 0, 0, time.perf_counter()
    source = unique_word_batches(limit) if args.unique_words else batches(corpus_paths(args.corpus), limit)
    for texts, size in source:
        tokens += sum(len(ids) for ids in encode(texts))
        done += size
        if not checkpoints or done >= len(checkpoints) * limit / 10:
            checkpoints.append((round(done / 1e6, 1), round(current_rss_mb(), 1)))
    checkpoints.append((round(done / 1e6, 1), round(current_rss_mb(), 1)))
    elapsed = time.perf_counter() - start
    version = "tokenizers"
    if args.child != "tokenizers":
        import gigatoken

        version = gigatoken.__file__
    print(json.dumps({"encoder": args.child, "module": version, "megabytes": done / 1e6, "tokens": tokens,
                      "seconds": elapsed, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
                      "rss_checkpoints": checkpoints}))


def run_child(name: str, extra_path: str | None, args: argparse.Namespace) -> dict:
    """One encoder in a fresh interpreter (``extra_path`` first on sys.path for the fork)."""
    env = {**os.environ, "RAYON_NUM_THREADS": str(args.threads)}
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([extra_path, env.get("PYTHONPATH", "")])
    label = "gigatoken" if name == "gigatoken-cachefix" else name
    command = [sys.executable, __file__, "--child", label, "--tokenizer", args.tokenizer,
               "--megabytes", str(args.megabytes), "--corpus", *args.corpus]
    command += ["--unique-words"] if args.unique_words else []
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return {**json.loads(output.splitlines()[-1]), "encoder": name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default="examples/tokenizer.json", help="a byte-level BPE tokenizer.json")
    parser.add_argument("--megabytes", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--corpus", nargs="+", default=sorted({sysconfig.get_paths()["stdlib"],
                                                                sysconfig.get_paths()["purelib"]}))
    parser.add_argument("--cachefix-path", help="directory where gigatoken-cachefix is installed (--target)")
    parser.add_argument("--skip-tokenizers", action="store_true", help="skip the slow HF tokenizers run")
    parser.add_argument("--unique-words", action="store_true",
                        help="instead of real text, words that never repeat (the cache's worst case)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    runs = [("gigatoken", None)] + ([("gigatoken-cachefix", args.cachefix_path)] if args.cachefix_path else [])
    runs += [("corpus.tokenizers", None)]
    runs += [] if args.skip_tokenizers else [("tokenizers", None)]
    results = [run_child(name, path, args) for name, path in runs]
    for result in results:
        print(f"{result['encoder']}: RSS (MB) after input MB {result['rss_checkpoints']}  [{result['module']}]")
    print(f"\n{'encoder':20} {'MB':>6} {'MB/s':>7} {'RSS first':>9} {'RSS end':>8} {'peak RSS':>9}")
    for result in results:
        first, last = result["rss_checkpoints"][0][1], result["rss_checkpoints"][-1][1]
        print(f"{result['encoder']:20} {result['megabytes']:6.0f} {result['megabytes'] / result['seconds']:7.1f} "
              f"{first:9.0f} {last:8.0f} {result['peak_rss_mb']:9.0f}")


if __name__ == "__main__":
    main()
