"""Regenerate the shipped quickstart sample: examples/web.jsonl, examples/code.jsonl, examples/tokenizer.json.

    python examples/make_sample.py                      # downloads python3.11-doc with apt-get
    python examples/make_sample.py --doc-sources DIR --stdlib DIR --out examples

Prose: the reStructuredText sources of the Python 3.11 documentation (Debian package python3.11-doc,
``/usr/share/doc/python3.11/html/_sources``), one document per page, ``{"text", "title"}``.
Code: CPython 3.11 standard-library modules (``lib/python3.11/*.py``), one document per file, ``{"text"}``.
Both are under the PSF License Version 2 (see examples/README.md). Files are taken in a fixed order up
to a size budget, so the output depends only on the inputs. The tokenizer is a byte-level BPE trained
with HF ``tokenizers`` on both files (the cl100k-family split regex, ``<|endoftext|>`` as id 0).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sysconfig
import tempfile
from pathlib import Path

PROSE_SECTIONS = ("tutorial", "faq", "howto", "using", "reference", "library")
PROSE_BUDGET = 1_600_000
CODE_BUDGET = 1_200_000
VOCAB_SIZE = 8192
EOD = "<|endoftext|>"
# The pre-tokenizer regex of the cl100k / Llama-3 family (HF ports carry it).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
HEADING = re.compile(r"^[ \t]*(?P<title>\S[^\n]*)\n(?P<line>[=*#\-~^\"]{3,})[ \t]*$", re.MULTILINE)


def download_doc_sources(workdir: str) -> str:
    """Fetch python3.11-doc with apt-get and unpack it; returns its ``_sources`` directory."""
    subprocess.run(["apt-get", "download", "python3.11-doc"], cwd=workdir, check=True)
    deb = sorted(glob.glob(os.path.join(workdir, "python3.11-doc_*.deb")))[-1]
    subprocess.run(["dpkg-deb", "-x", deb, os.path.join(workdir, "root")], check=True)
    return os.path.join(workdir, "root/usr/share/doc/python3.11/html/_sources")


def page_title(text: str, fallback: str) -> str:
    """The first reST heading of a page (its title), else ``fallback``."""
    match = HEADING.search(text)
    return match.group("title").strip() if match else fallback


def take_until(paths: list[str], budget: int) -> list[tuple[str, str]]:
    """(path, text) of the files in order while their UTF-8 size stays within ``budget``."""
    taken, used = [], 0
    for path in paths:
        text = Path(path).read_text(encoding="utf-8")
        size = len(text.encode("utf-8"))
        if used + size > budget:
            continue
        taken.append((path, text))
        used += size
    return taken


def prose_documents(sources: str) -> list[dict]:
    """Documentation pages, section by section, as ``{"text", "title"}``."""
    paths = [path for section in PROSE_SECTIONS
             for path in sorted(glob.glob(os.path.join(sources, section, "**/*.rst.txt"), recursive=True))]
    return [{"text": text, "title": page_title(text, os.path.relpath(path, sources))}
            for path, text in take_until(paths, PROSE_BUDGET)]


def code_documents(stdlib: str) -> list[dict]:
    """Standard-library modules in name order as ``{"text"}``."""
    return [{"text": text} for _, text in take_until(sorted(glob.glob(os.path.join(stdlib, "*.py"))), CODE_BUDGET)]


def write_jsonl(path: Path, documents: list[dict]) -> None:
    """One JSON object per line, UTF-8, written under a temporary name then renamed."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(json.dumps(document, ensure_ascii=False) + "\n")
    os.replace(partial, path)


def train_tokenizer(texts: list[str], path: Path) -> None:
    """A byte-level BPE of VOCAB_SIZE ids with EOD as its one special token, saved to ``path``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[EOD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    partial = path.with_name(path.name + ".partial")
    tokenizer.save(str(partial))
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc-sources", help="python3.11-doc's html/_sources directory (default: apt-get download)")
    parser.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="a CPython 3.11 lib/python3.11")
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)), help="output directory")
    args = parser.parse_args()
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as workdir:
        sources = args.doc_sources or download_doc_sources(workdir)
        prose, code = prose_documents(sources), code_documents(args.stdlib)
    write_jsonl(out / "web.jsonl", prose)
    write_jsonl(out / "code.jsonl", code)
    train_tokenizer([d["text"] for d in prose] + [d["text"] for d in code], out / "tokenizer.json")
    print(f"wrote {len(prose)} prose and {len(code)} code documents and a {VOCAB_SIZE}-id tokenizer to {out}")


if __name__ == "__main__":
    main()
