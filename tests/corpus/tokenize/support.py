"""Shared helpers of the tokenize pipeline tests: real sample text, the shipped tokenizer, byte comparison."""

from __future__ import annotations

import errno
import importlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from corpus.tokenize.config import TokenizeConfig
from corpus.tokenizers import TokenizerConfig
from tests.conftest import REPO

WEB = REPO / "examples" / "web.jsonl"
CODE = REPO / "examples" / "code.jsonl"
TOKENIZER = REPO / "examples" / "tokenizer.json"


def hf_tokenizer(**changes) -> TokenizerConfig:
    """The byte-level BPE shipped with the quickstart (gigatoken takes it)."""
    return TokenizerConfig(**{"type": "HuggingFaceTokenizer", "model": str(TOKENIZER), **changes})


def config(tmp: Path, inputs: list, name: str = "out", **changes) -> TokenizeConfig:
    """A quiet config writing ``tmp/name``; in-process encoding unless ``workers`` is given."""
    options = dict(json_keys=["text"], append_eod=True, workers=0, quiet=True, tokenizer=hf_tokenizer(),
                   sample_records=16)
    options.update(changes)
    return TokenizeConfig(inputs=[str(p) for p in inputs], output_prefix=str(tmp / name), **options)


def kill_when(command: list[str], ready: Callable[[], bool], timeout: float = 120) -> None:
    """Start ``command`` (this checkout first on its import path) and SIGKILL its whole process group once
    ``ready()`` is true; it must not have finished by then."""
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and process.poll() is None and not ready():
            time.sleep(0.002)
        assert process.poll() is None, f"finished before the kill point:\n{process.stderr.read().decode()}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def output_bytes(prefix: str | Path, keys: list[str]) -> dict[str, bytes]:
    """The ``.bin`` and ``.idx`` bytes of every key's output."""
    return {f"{key}{suffix}": Path(f"{prefix}_{key}_document{suffix}").read_bytes()
            for key in keys for suffix in (".bin", ".idx")}


def sample_records(limit: int | None = None) -> list[dict]:
    """Real records: the example prose then the example code."""
    records = [json.loads(line) for path in (WEB, CODE) for line in path.read_text().splitlines()]
    return records[:limit]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path


class _FullDiskFile:
    """A file whose writes fail with ENOSPC once the disk's budget is spent (delegates everything else)."""

    def __init__(self, handle, disk: "FullDisk") -> None:
        self._handle, self._disk = handle, disk

    def write(self, data) -> int:
        size = len(data.encode()) if isinstance(data, str) else memoryview(data).nbytes  # bytes, arrays included
        self._disk.spend(self._handle.name, size)
        return self._handle.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.close()

    def __getattr__(self, name):
        return getattr(self._handle, name)


class FullDisk:
    """``open`` for the writers' modules that fills up: once ``budget`` bytes were written to files whose name
    ends with ``suffix`` (or, for a file written whole, whose temporary name holds that: ``.x.meta.json.<pid>.…``),
    the next write to such a file raises ``OSError(ENOSPC)``, as a full disk does. The same for root (CI) as for
    anyone: no mount, no chmod."""

    MODULES = ("corpus.indexed.writer", "corpus.indexed.partial_files", "corpus.core.atomic_write",
               "corpus.tokenize.outputs")

    def __init__(self, suffix: str, budget: int) -> None:
        self.suffix, self.budget, self.failures = suffix, budget, 0

    def spend(self, name: str, size: int) -> None:
        name = Path(name).name
        if name.endswith(self.suffix) or name.startswith(".") and f"{self.suffix}." in name:
            if size > self.budget:
                self.failures += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.budget -= size

    def open(self, file, mode="r", *args, **kwargs):
        handle = open(file, mode, *args, **kwargs)
        return _FullDiskFile(handle, self) if any(flag in mode for flag in "wa+") else handle

    def install(self, monkeypatch) -> "FullDisk":
        for name in self.MODULES:
            monkeypatch.setattr(importlib.import_module(name), "open", self.open, raising=False)
        return self
