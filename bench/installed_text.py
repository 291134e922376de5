"""Real text on any machine, without a network: the source files and documentation its Python and C/C++ packages
installed, as JSONL, for the tokenize benchmarks that need gigabytes (``bench/tokenize_scaling.py``).

    python -m bench.installed_text --min-bytes 2e9     # bench/.cache/installed/: sources.jsonl and the rest

Every file is taken once (by content), in path order: sources and headers (Python, Cython, C, C++, CUDA, Rust, Go,
Java, JavaScript, shell), Markdown, reStructuredText, HTML, TeX, plain-text and configuration documents of the running
Python's packages and standard library, ``/usr/include``, CUDA's headers and ``/usr/share/doc``. Records are
``{"text": <file>, "title": <path>}``. When the unique text is less than ``--min-bytes``, ``scaled.jsonl`` repeats it
whole as often as needed (the benchmark says how often: a repeated text flatters tokenizer caches); ``zst/`` holds
the same records in files of about 32 MB, each compressed with zstd. The files keep their packages' licences and are
never committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sysconfig
from pathlib import Path
from typing import Iterator

import orjson

from bench.data import CACHE, MB
from corpus.core.atomic_write import atomic_file, write_atomically

FOLDER = CACHE / "installed"
EXTENSIONS = (".py", ".pyi", ".pyx", ".pxd", ".h", ".hh", ".hpp", ".inl", ".ipp", ".tcc", ".c", ".cc", ".cpp",
              ".cxx", ".cu", ".cuh", ".rs", ".go", ".java", ".js", ".ts", ".sh", ".cmake", ".proto", ".html", ".css",
              ".tex", ".md", ".rst", ".txt", ".yaml", ".yml", ".toml", ".cfg", ".ini")
#: Larger files are generated tables more than text.
LARGEST_FILE = 8 * MB
ZST_FILE_BYTES = 32 * MB


def roots() -> list[Path]:
    """Where installed text lives on this machine (those that exist)."""
    found = {sysconfig.get_paths()[name] for name in ("purelib", "platlib", "stdlib")}
    found |= {"/usr/include", "/usr/local/cuda/include", "/usr/share/doc"}
    return sorted({Path(path).resolve() for path in found if os.path.isdir(path)})


def records() -> Iterator[bytes]:
    """JSONL lines of every installed text file, each content once."""
    seen: set[bytes] = set()
    for root in roots():
        for folder, names, files in os.walk(root):
            names.sort()
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(folder, name)
                try:
                    if os.path.islink(path) or os.path.getsize(path) > LARGEST_FILE:
                        continue
                    content = Path(path).read_bytes()
                    text = content.decode("utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                digest = hashlib.sha1(content).digest()
                if text.strip() and digest not in seen:
                    seen.add(digest)
                    yield orjson.dumps({"text": text, "title": path}) + b"\n"


def _write(target: Path, lines: Iterator[bytes]) -> int:
    written = 0
    with atomic_file(target) as out:
        for line in lines:
            out.write(line)
            written += len(line)
    return written


def build(min_bytes: int) -> dict:
    """Write the corpus into :data:`FOLDER` (unless there) and describe it."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    facts_file = FOLDER / "facts.json"
    if facts_file.exists() and json.loads(facts_file.read_text())["min_bytes"] >= min_bytes:
        return json.loads(facts_file.read_text())
    unique = FOLDER / "sources.jsonl"
    unique_bytes = _write(unique, records())
    copies = max(1, -(-min_bytes // unique_bytes))
    scaled = FOLDER / "scaled.jsonl"
    _write(scaled, (line for _ in range(copies) for line in open(unique, "rb")))
    _write_zst(scaled, FOLDER / "zst")
    facts = {"min_bytes": min_bytes, "unique_bytes": unique_bytes, "copies": copies,
             "scaled_bytes": scaled.stat().st_size, "records": sum(1 for _ in open(unique, "rb")),
             "zst_files": len(list((FOLDER / "zst").iterdir())), "roots": [str(root) for root in roots()]}
    write_atomically(facts_file, json.dumps(facts, indent=1))  # last: it says the files above are complete
    return facts


def _write_zst(source: Path, folder: Path) -> None:
    """``source`` in consecutive files of about :data:`ZST_FILE_BYTES`, zstd-compressed."""
    import zstandard

    folder.mkdir(exist_ok=True)
    compressor, index, held = zstandard.ZstdCompressor(level=3), 0, []
    size = 0
    with open(source, "rb") as lines:
        for line in lines:
            held.append(line)
            size += len(line)
            if size >= ZST_FILE_BYTES:
                write_atomically(folder / f"{index:04d}.jsonl.zst", compressor.compress(b"".join(held)))
                index, held, size = index + 1, [], 0
    if held:
        write_atomically(folder / f"{index:04d}.jsonl.zst", compressor.compress(b"".join(held)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-bytes", type=float, default=2e9, help="size of scaled.jsonl at least")
    print(json.dumps(build(int(parser.parse_args().min_bytes)), indent=1))


if __name__ == "__main__":
    main()
