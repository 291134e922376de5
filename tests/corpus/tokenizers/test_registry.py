"""The tokenizer registry is the extension point: a family added by its entry and its own module (here a toy
whose ids are a text's UTF-8 bytes, defined in this file) works through the real CLI — tokenize, inspect, blend —
with nothing else changed (docs/extending.md, "Adding a tokenizer family")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import corpus_blend, corpus_inspect, corpus_tokenize  # noqa: F401 - see the NOTE below
from cli.corpus import main
from corpus.indexed import IndexedReader
from corpus.tokenizers.base import TextTokenizer
from corpus.tokenizers.config import TokenizerConfig
from corpus.tokenizers.registry import TOKENIZER_TYPES, TokenizerType
from tests.corpus.blending.blend_data import EXAMPLES, example_texts

# NOTE: the commands are imported (their options built) before the family is registered, as in any process that
# registers a family after start-up: the choices of --tokenizer-type must still take it.

#: The toy's end of document: the id after the 256 byte values.
BYTES_EOD = 256


class ByteTextTokenizer(TextTokenizer):
    """A text's UTF-8 bytes are its ids; EOD is 256."""

    encoder_name = "builtin"

    def __init__(self, config: TokenizerConfig) -> None:
        super().__init__(config, vocab_size=BYTES_EOD + 1, eod=BYTES_EOD, bos=None)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(text.encode("utf-8")) for text in texts]

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < BYTES_EOD).decode("utf-8", errors="replace")

    def files(self) -> list[str]:
        return []


def build_bytes(config: TokenizerConfig, threads: int | None = None) -> ByteTextTokenizer:
    """The toy family's adapter (what a registry entry's ``adapter`` names)."""
    return ByteTextTokenizer(config)


@pytest.fixture
def byte_family(monkeypatch) -> str:
    """The toy family registered for this test only: one entry, as a new family's module would add it."""
    entry = TokenizerType("ByteTokenizer", "bytes", "no file: UTF-8 bytes are the ids", (), f"{__name__}:build_bytes")
    monkeypatch.setitem(TOKENIZER_TYPES, entry.name, entry)
    return entry.name


def _corpus(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_family_added_by_its_registry_entry_tokenizes_inspects_and_blends(byte_family: str, tmp_path: Path):
    # NOTE: --workers 1 keeps the run in this process, where the entry is registered (a spawned worker would
    # import the registry afresh; a real family's entry lives in registry.py, which every process imports).
    _corpus("tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "web"),
            "--tokenizer-type", byte_family, "--append-eod", "--workers", "1", "--quiet")
    texts = example_texts("web")
    reader = IndexedReader(str(tmp_path / "web_text_document"))
    assert [reader[i].tolist() for i in range(3)] == [[*text.encode("utf-8"), BYTES_EOD] for text in texts[:3]]
    assert len(reader) == len(texts)
    meta = json.loads((tmp_path / "web_text_document.meta.json").read_text())
    assert (meta["tokenizer"]["type"], meta["vocab_size"], meta["eod_id"]) == (byte_family, 257, BYTES_EOD)

    assert "check: no problems" in _corpus("inspect", str(tmp_path / "web_text_document"), "--check")
    shown = json.loads(_corpus("inspect", str(tmp_path / "web_text_document"), "--show", "0", "--json"))
    assert shown["documents"][0]["text"].startswith(texts[0][:40])

    blend = tmp_path / "bytes.yaml"
    blend.write_text("seq_length: 64\nsplit: '1'\ntokenizer: {type: bytes}\n"
                     "sources: [{name: web, prefix: web_text_document}]\n")
    samples = [json.loads(line) for line in _corpus("blend", str(blend), "--num-samples", "4", "--show-samples",
                                                    "0:2", "--json").splitlines()]
    assert [len(sample["tokens"]) for sample in samples] == [65, 65]
