"""The ``<prefix>.meta.json`` sidecar read through its schema: each key's wrong kinds named with what it wants, the
counts a sidecar of this tool must hold, what checks may still trust, facts recorded twice that disagree; and the
identities built from it (tokenizer fingerprint, options hash, token space)."""

from __future__ import annotations

import errno
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

import pytest

from corpus.core.disk import OutputError
from corpus.indexed import sidecar
from corpus.indexed.errors import SidecarError

TOKEN_ID = "a token id (an integer >= 0) or null"
COUNT = "an integer >= 0"
#: (key, values of the wrong kind, what the message says the key wants, values that pass), for every key of the schema.
SCHEMA_CASES = [
    ("tool", [1], "a string", ["another-tool"]),  # (this tool's name asks for the counts: below)
    ("tool_version", [None], "a string", ["1.2"]),
    ("tokenizer", [[]], "an object", [{}]),
    ("encoder", [1], "a string", ["Encoder"]),
    ("vocab_size", [0, -3, True, "8192", 1.0], "a positive integer", [1, 50_000]),
    ("eod_id", [-1, 1.0, False], TOKEN_ID, [0, 7, None]),
    ("bos_id", [-1, "1"], TOKEN_ID, [0, None]),
    ("json_key", [1], "a string", ["text"]),
    ("append_eod", [1, "true"], "true or false", [True, False]),
    ("options_hash", [1], "a string", ["0123abcd"]),
    ("inputs", [{}], "a list", [[], ["a.jsonl"]]),
    ("merged_from", ["a"], "a list", [[]]),
    ("dtype", [2], 'a dtype name such as "uint16"', ["uint16"]),
    ("num_sequences", [-1, 2.0], COUNT, [0, 3]),
    ("num_documents", [True, -2], COUNT, [0]),
    ("num_tokens", [1.5], COUNT, [0]),
    ("num_empty_documents", ["0"], COUNT, [0]),
    ("one_sequence_per_document", [0], "true or false", [True, False]),
    ("checksums", [["ab"], {"bin_sha256_tree": 1}, "ab"], "an object of strings", [{}, {"bin_sha256_tree": "ab"}]),
]
#: The same for the keys of the ``tokenizer`` record (null passes for each: a record may leave any out).
TOKENIZER_CASES = [
    ("type", [1], "a string", ["HuggingFaceTokenizer"]),
    ("fingerprint", [[]], "a string", ["f" * 64]),
    ("vocab_size", [0], "a positive integer", [3]),
    ("eod", [-1], TOKEN_ID, [0]),
    ("bos", ["2"], TOKEN_ID, [2]),
    ("model", [1], "a path", ["tok.json"]),
    ("vocab_file", [{}], "a path", ["vocab.json"]),
    ("merge_file", [2], "a path", ["merges.txt"]),
    ("options", [[]], "an object", [{}]),
    ("config", ["x"], "an object (the tokenizer's rebuild recipe)", [{}]),
]


def test_the_cases_cover_every_key_of_both_schemas() -> None:
    assert [key for key, *_ in SCHEMA_CASES] == list(sidecar.SCHEMA)
    assert [key for key, *_ in TOKENIZER_CASES] == list(sidecar.TOKENIZER_SCHEMA)


@pytest.mark.parametrize("key, wrong, wanted, right", SCHEMA_CASES, ids=[case[0] for case in SCHEMA_CASES])
def test_each_key_names_a_value_of_the_wrong_kind_with_what_it_wants(key: str, wrong: list, wanted: str,
                                                                     right: list) -> None:
    for value in wrong:
        assert sidecar.problems({key: value}) == [(key, f"{key}: expected {wanted}, got {json.dumps(value)}")]
    for value in right:
        assert sidecar.problems({key: value}) == []


@pytest.mark.parametrize("key, wrong, wanted, right", TOKENIZER_CASES, ids=[case[0] for case in TOKENIZER_CASES])
def test_each_key_of_the_tokenizer_record_is_checked_the_same_way(key: str, wrong: list, wanted: str,
                                                                  right: list) -> None:
    for value in wrong:
        assert sidecar.problems({"tokenizer": {key: value}}) == [
            (f"tokenizer.{key}", f"tokenizer.{key}: expected {wanted}, got {json.dumps(value)}")]
    for value in [*right, None]:
        assert sidecar.problems({"tokenizer": {key: value}}) == []


def test_a_sidecar_this_tool_wrote_must_hold_its_counts() -> None:
    """Another tool's sidecar may leave them out; one of ours lacking one was renamed or deleted."""
    counts = {"dtype": "uint16", "num_sequences": 1, "num_documents": 1, "num_tokens": 2}
    assert sidecar.problems({"tool": "blendforge", **counts}) == []
    assert sidecar.problems({"tool": "megatron-extras"}) == []
    missing = [(key, f"{key} is missing (every sidecar blendforge writes has it: renamed or deleted?)")
               for key in ("num_sequences", "num_tokens")]
    assert sidecar.problems({"tool": "blendforge", "dtype": "uint16", "num_documents": 1}) == missing
    assert sidecar.problems({"tool": "blendforge", "dtype": 16, "num_documents": 1}) == [
        ("dtype", 'dtype: expected a dtype name such as "uint16", got 16'), *missing]


def test_usable_keeps_every_value_but_the_wrong_ones() -> None:
    meta = {"vocab_size": 0, "eod_id": 3, "extra": [1], "tokenizer": {"type": 1, "model": "tok.json", "eod": 3}}
    assert sidecar.usable(meta, sidecar.problems(meta)) == {"eod_id": 3, "extra": [1],
                                                            "tokenizer": {"model": "tok.json", "eod": 3}}
    assert sidecar.usable({"tokenizer": []}, sidecar.problems({"tokenizer": []})) == {}


def test_read_names_the_file_and_every_problem_and_parse_only_bad_json(tmp_path: Path) -> None:
    prefix = tmp_path / "p"
    assert sidecar.read(prefix) is None and sidecar.parse(prefix) is None
    target = Path(f"{prefix}.meta.json")
    target.write_text(json.dumps({"vocab_size": "8", "eod_id": -1}))
    with pytest.raises(SidecarError) as raised:
        sidecar.read(prefix)
    assert str(raised.value) == (f'{target}: vocab_size: expected a positive integer, got "8"; eod_id: expected '
                                 f"{TOKEN_ID}, got -1; delete it or re-run corpus tokenize")
    assert sidecar.parse(prefix) == {"vocab_size": "8", "eod_id": -1}
    for text, said in (("{not json", "not valid JSON ("), ("[1, 2]", "expected a JSON object, got [1, 2]")):
        target.write_text(text)
        with pytest.raises(SidecarError) as raised:
            sidecar.parse(prefix)
        assert raised.value.path == str(target) and raised.value.problem.startswith(said)


def test_write_adds_the_tool_and_its_version_and_reads_back(tmp_path: Path, monkeypatch) -> None:
    sidecar.write(tmp_path / "p", {"vocab_size": 5, "tool": "overridden"})
    assert sidecar.read(tmp_path / "p") == {"tool": "overridden", "tool_version": sidecar.tool_version(),
                                            "vocab_size": 5}
    assert sidecar.tool_version() == importlib.metadata.version("blendforge")

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert sidecar.tool_version() == "0+unknown"


def test_a_sidecar_the_disk_refuses_is_an_output_error_naming_it(tmp_path: Path, monkeypatch) -> None:
    """A write's error carries no file name: the error names the sidecar, not a temporary file."""
    def full(path, text) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sidecar, "write_atomically", full)
    with pytest.raises(OutputError) as raised:
        sidecar.write(tmp_path / "p", {"vocab_size": 5})
    assert raised.value.path == f"{tmp_path / 'p'}.meta.json" and raised.value.full


#: A sidecar recording each fact of :data:`sidecar.RECORDED_TWICE` in all its places, in agreement.
AGREEING = {"vocab_size": 50, "eod_id": 1, "bos_id": 2,
            "tokenizer": {"type": "HuggingFaceTokenizer", "model": "tok.json", "vocab_size": 50, "eod": 1, "bos": 2,
                          "options": {"eod_id": 1, "bos_id": 2},
                          "config": {"type": "HuggingFaceTokenizer", "model": "tok.json"}}}
#: (the place edited, its new value, the contradiction named: the fact's first place and value, then the other's).
EDITS = [
    (("vocab_size",), 49, "vocab_size is 49 but tokenizer.vocab_size is 50"),
    (("tokenizer", "vocab_size"), 49, "vocab_size is 50 but tokenizer.vocab_size is 49"),
    (("eod_id",), 5, "eod_id is 5 but tokenizer.eod is 1; eod_id is 5 but tokenizer.options.eod_id is 1"),
    (("tokenizer", "eod"), None, "eod_id is 1 but tokenizer.eod is null"),
    (("tokenizer", "options", "eod_id"), 0, "eod_id is 1 but tokenizer.options.eod_id is 0"),
    (("bos_id",), 3, "bos_id is 3 but tokenizer.bos is 2; bos_id is 3 but tokenizer.options.bos_id is 2"),
    (("tokenizer", "options", "bos_id"), 4, "bos_id is 2 but tokenizer.options.bos_id is 4"),
    (("tokenizer", "type"), "SentencePieceTokenizer",
     'tokenizer.type is "SentencePieceTokenizer" but tokenizer.config.type is "HuggingFaceTokenizer"'),
    (("tokenizer", "config", "model"), "other.json", 'tokenizer.model is "tok.json" but tokenizer.config.model is '
                                                     '"other.json"'),
]


@pytest.mark.parametrize("place, value, said", EDITS, ids=[".".join(edit[0]) for edit in EDITS])
def test_a_fact_recorded_twice_with_two_values_is_a_contradiction(place: tuple[str, ...], value, said: str) -> None:
    edited = json.loads(json.dumps(AGREEING))
    *parents, last = place
    holder = edited
    for key in parents:
        holder = holder[key]
    holder[last] = value
    assert sidecar.contradictions(AGREEING) == []
    assert sidecar.contradictions(edited) == [
        f"{each}: the sidecar contradicts itself (edited by hand?); restore it or re-run corpus tokenize"
        for each in said.split("; ")]


def test_a_fact_recorded_once_contradicts_nothing() -> None:
    """Older sidecars lack the record's ``options`` or ``config``, and a tokenizer record may be missing."""
    assert sidecar.contradictions({"vocab_size": 50, "eod_id": 1, "tokenizer": {"eod": 1, "options": "none"}}) == []
    assert sidecar.contradictions({"eod_id": 1, "tokenizer": "HuggingFaceTokenizer"}) == []
    assert sidecar.contradictions({"tokenizer": {"eod": 1, "options": {"eod_id": 2}}}) == []


def test_a_fingerprint_is_the_sha256_of_the_files_bytes_in_order(tmp_path: Path) -> None:
    """Read a block at a time: a file longer than one block hashes as its whole bytes."""
    first, second = tmp_path / "vocab.json", tmp_path / "merges.txt"
    first.write_bytes(bytes(range(256)) * ((1 << 20) // 256) + b"tail")
    second.write_bytes(b"merges")
    both = first.read_bytes() + second.read_bytes()
    assert sidecar.fingerprint_files([first, second]) == hashlib.sha256(both).hexdigest()
    assert sidecar.fingerprint_files([]) == hashlib.sha256(b"").hexdigest()


def test_the_options_hash_is_short_stable_and_independent_of_key_order() -> None:
    options = {"json_key": "text", "append_eod": True, "path": Path("a/b")}
    digest = sidecar.options_hash(options)
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert sidecar.options_hash(dict(reversed(options.items()))) == digest
    assert sidecar.options_hash({**options, "append_eod": False}) != digest
    assert sidecar.options_hash({**options, "path": "a/b"}) == digest  # a path hashes as its text


def test_the_tokenizer_identity_is_type_fingerprint_and_options_in_any_order() -> None:
    record = {"type": "HuggingFaceTokenizer", "fingerprint": "f" * 64, "model": "a/tok.json",
              "options": {"eod_id": 1, "bos_id": 2}}
    identity = sidecar.tokenizer_identity({"tokenizer": record})
    assert identity == ("HuggingFaceTokenizer", "f" * 64, json.dumps({"bos_id": 2, "eod_id": 1}))
    moved = {**record, "model": "b/tok.json", "options": {"bos_id": 2, "eod_id": 1}}
    assert sidecar.tokenizer_identity({"tokenizer": moved}) == identity  # where the file lies is not who it is
    assert sidecar.tokenizer_identity({"tokenizer": {"type": "T"}}) == ("T", None, "{}")
    assert sidecar.tokenizer_identity(None) is None and sidecar.tokenizer_identity({"vocab_size": 5}) is None
