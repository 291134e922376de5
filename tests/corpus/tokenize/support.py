"""Shared helpers of the tokenize pipeline tests: real sample text, the shipped tokenizer, byte comparison."""

from __future__ import annotations

import json
from pathlib import Path

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
