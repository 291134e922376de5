"""Token files and blend files for the blend tests: random tokens (any shape, empty documents
included) and the shipped sample text encoded with the shipped tokenizer, as the quickstart does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml

from corpus.indexed import IndexedWriter
from tests.conftest import run_cli

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EOD = 0
VOCAB = 1000


def tokenizer_record(kind: str = "HuggingFaceTokenizer", fingerprint: str = "f" * 64, path: str = "tok.json") -> dict:
    """A sidecar ``tokenizer`` record as ``corpus tokenize`` writes it."""
    return {"type": kind, "path": path, "fingerprint": fingerprint, "options": {}}


def write_random(prefix: Path, num_docs: int, seed: int, *, dtype: type = np.uint16, max_len: int = 60,
                 empty_share: float = 0.05, meta: dict | None | bool = True) -> Path:
    """A pair of ``num_docs`` random documents ending in EOD, some with no sequence at all."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len, num_docs)
    lengths[rng.random(num_docs) < empty_share] = 0
    tokens = rng.integers(1, VOCAB, int(lengths.sum()))
    ends = np.cumsum(lengths)[lengths > 0] - 1
    tokens[ends] = EOD
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedWriter(prefix, np.dtype(dtype)) as writer:
        writer.add_documents(tokens.astype(dtype), lengths)
        record = {"tokenizer": tokenizer_record(), "vocab_size": VOCAB, "eod_id": EOD} if meta is True else meta or None
        writer.finalize(record)
    return prefix


#: The sources :func:`write_three_sources` writes, in blend order.
THREE_SOURCES = ("web", "code", "py")


def write_three_sources(root: Path) -> Path:
    """Three sources of unequal size (400, 200 and 90 random documents) under ``root/data/``: the blends whose mix
    moves (schedules, online mixing) are tested over them."""
    for number, (name, documents) in enumerate(zip(THREE_SOURCES, (400, 200, 90))):
        write_random(root / "data" / name, documents, seed=number + 1)
    return root


def web_and_code(folder: Path, code_documents: int) -> Path:
    """Two random sources in ``folder``: ``web`` (300 documents) and ``code``, as :func:`weighted_blend` names them."""
    write_random(folder / "web", 300, seed=1)
    write_random(folder / "code", code_documents, seed=2)
    return folder


def weighted_blend(web: float, code: float, **fields: object) -> dict:
    """A blend of :func:`web_and_code`'s sources with these weights, cached in ``cache/``, and ``fields``."""
    return {**fields, "cache_dir": "cache", "sources": [{"name": "web", "prefix": "web", "weight": web},
                                                         {"name": "code", "prefix": "code", "weight": code}]}


def write_blend(path: Path, data: dict) -> Path:
    """Write a blend file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def example_texts(name: str) -> list[str]:
    """The ``text`` of every record of the shipped sample ``examples/<name>.jsonl`` (real prose or code)."""
    with open(EXAMPLES / f"{name}.jsonl", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def write_example(prefix: Path, name: str, start: int = 0, stop: int | None = None) -> Path:
    """Documents ``[start, stop)`` of ``examples/<name>.jsonl`` encoded with ``examples/tokenizer.json``
    (+ EOD), with the sidecar ``corpus tokenize`` writes: what the README's quickstart produces."""
    from corpus.tokenizers import TokenizerConfig, build_tokenizer

    tokenizer = build_tokenizer(TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json")))
    documents = [ids + [tokenizer.eod] for ids in tokenizer.encode_batch(example_texts(name)[start:stop])]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with IndexedWriter(prefix, np.uint16) as writer:
        writer.add_documents(np.concatenate([np.asarray(d, np.uint16) for d in documents]), [len(d) for d in documents])
        writer.finalize({"tokenizer": tokenizer.describe(), "vocab_size": tokenizer.vocab_size, "eod_id": tokenizer.eod,
                         "bos_id": tokenizer.bos, "json_key": "text"})
    return prefix


def tokenize_web(folder: Path) -> Path:
    """examples/web.jsonl through `corpus tokenize --append-eod` with the shipped tokenizer, as a user makes data
    (its sidecar promises EOD endings, which the checks then hold it to); the pair's prefix."""
    run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(folder / "web"),
            "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(EXAMPLES / "tokenizer.json"),
            "--append-eod", "--quiet")
    return folder / "web_text_document"
