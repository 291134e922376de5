"""Cached verdicts of the encoder check: a second run builds gigatoken without the reference library, and
a changed file, a damaged entry or a folder that cannot be written only costs the check."""

from __future__ import annotations

import json
import shutil
from importlib.util import find_spec
from pathlib import Path

import pytest

from corpus.core.errors import ConfigError
from corpus.tokenizers import TokenizerConfig, select_encoder, verdicts
from corpus.tokenizers import select as selection
from corpus.tokenizers.registry import lookup
from tests.cache_keys import assert_each_field_changes_the_key

pytestmark = pytest.mark.skipif(find_spec("gigatoken") is None, reason="gigatoken is not installed")


@pytest.fixture
def reference_builds(monkeypatch) -> list:
    """Every reference tokenizer selection builds, recorded."""
    built, original = [], selection.build_tokenizer

    def counting(config, threads=None):
        built.append(config)
        return original(config, threads)

    monkeypatch.setattr(selection, "build_tokenizer", counting)
    return built


@pytest.mark.parametrize("make_config", [
    lambda f: TokenizerConfig("HuggingFaceTokenizer", model=f.cl100k_bos_dir),
    lambda f: TokenizerConfig("SentencePieceTokenizer", model=f.spm_v3),
    lambda f: TokenizerConfig("TikTokenizer", model=f.tekken),
])
def test_a_cached_verdict_builds_gigatoken_without_the_reference(tokenizer_files, conformance_texts,
                                                                  reference_builds, make_config):
    config = make_config(tokenizer_files)
    cold, cold_reason = select_encoder(config, threads=1)
    assert len(reference_builds) == 1 and "cached check" not in cold_reason
    warm, warm_reason = select_encoder(config, threads=1)
    assert len(reference_builds) == 1, "the reference library was loaded although the verdict was cached"
    assert warm.encoder_name.startswith("gigatoken ") and warm_reason == f"{cold_reason}; cached check"
    texts = [*conformance_texts, "a [REFERENCE_DOC_3] b </s> <|endoftext|>"]
    assert warm.encode_batch(texts) == cold.encode_batch(texts)
    assert warm.describe() == cold.describe()


@pytest.mark.slow  # three checks of a 100k-id tokenizer (its EOD is the point)
def test_the_key_follows_the_files_bytes(tokenizer_files, tmp_path, reference_builds):
    folder = shutil.copytree(tokenizer_files.cl100k_bos_dir, tmp_path / "tokenizer")
    config = TokenizerConfig("HuggingFaceTokenizer", model=str(folder))
    select_encoder(config)
    settings = folder / "tokenizer_config.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "eos_token": "<|fim_prefix|>"}))
    tokenizer, _ = select_encoder(config)
    assert len(reference_builds) == 2 and tokenizer.eod == 100258
    select_encoder(config.replace(hf_include_special_tokens=False))
    assert len(reference_builds) == 3  # an option that changes ids is in the key too


@pytest.mark.parametrize("damage", [
    lambda entry: entry.with_suffix(".source").write_bytes(entry.with_suffix(".source").read_bytes()[:1000]),
    lambda entry: entry.with_suffix(".source").unlink(),
    lambda entry: entry.with_suffix(".json").write_text("{not json"),
    lambda entry: entry.with_suffix(".json").write_text('{"fast": "yes"}'),
])
def test_a_damaged_entry_is_only_a_miss(tokenizer_files, conformance_texts, reference_builds, damage):
    """The shipped 8k-id tokenizer: its entry has the same parts as cl100k's and loads in a fraction of the time."""
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    first, _ = select_encoder(config)
    (entry,) = verdicts.folder().glob("*.json")
    damage(entry.with_suffix(""))
    again, reason = select_encoder(config)
    assert len(reference_builds) == 2 and "cached check" not in reason
    assert again.encode_batch(conformance_texts) == first.encode_batch(conformance_texts)


def test_a_cache_folder_that_cannot_be_written_only_costs_the_check(tokenizer_files, tmp_path, monkeypatch,
                                                                   reference_builds, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("BLENDFORGE_TOKENIZER_CHECKS_DIR", str(blocker))
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    for _ in range(2):
        tokenizer, _ = select_encoder(config)
        assert tokenizer.encoder_name.startswith("gigatoken ")
    assert len(reference_builds) == 2 and "cannot cache the tokenizer check" in caplog.text


def test_a_recorded_difference_sends_later_runs_to_the_reference(tokenizer_files):
    config = TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json)
    assert select_encoder(config)[0].encoder_name.startswith("gigatoken ")
    selection.record_difference(config, "gigatoken ids differed from the reference library at a.jsonl:3")
    tokenizer, reason = select_encoder(config)
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert reason.endswith("(fallback: gigatoken ids differed from the reference library at a.jsonl:3; cached check)")
    with pytest.raises(ConfigError, match="--encoder gigatoken: gigatoken ids differed"):
        select_encoder(config.replace(encoder="gigatoken"))


def test_verdicts_live_in_a_cache_folder_of_their_own(tokenizer_files, tmp_path, monkeypatch):
    """By default ~/.cache/blendforge/tokenizer_checks ($XDG_CACHE_HOME here), never among the index maps."""
    monkeypatch.delenv("BLENDFORGE_TOKENIZER_CHECKS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("BLENDFORGE_CACHE_DIR", str(tmp_path / "index_maps"))
    select_encoder(TokenizerConfig("HuggingFaceTokenizer", model=tokenizer_files.sample_json))
    assert list((tmp_path / "xdg" / "blendforge" / "tokenizer_checks").glob("*.json"))
    assert not (tmp_path / "index_maps").exists()


def test_every_field_of_the_key_changes_it_and_where_the_files_are_does_not(tmp_path, monkeypatch):
    """A verdict is about the tokenizer's bytes, its id-changing options, the libraries and our code: each changes
    the key; the files' place and the encoder asked for do not (a copied tokenizer reuses the check)."""
    vocab = tmp_path / "tekken.json"
    vocab.write_text('{"vocab": []}')
    other_bytes = tmp_path / "other.json"
    other_bytes.write_text('{"vocab": [1]}')
    base_config = TokenizerConfig("TikTokenizer", model=str(vocab))

    def key_of(files, code, gigatoken, reference, **options) -> str:
        versions = {"gigatoken": gigatoken, lookup(options["type"]).library: reference}
        monkeypatch.setattr(verdicts, "_code_digest", lambda: code)
        monkeypatch.setattr(verdicts, "library_version", lambda name: f"{name} {versions.get(name)}")
        return verdicts.key_for(base_config.replace(**options), files)

    options = {name: value for name, value in base_config.to_dict().items() if name not in verdicts.NOT_IN_KEY}
    base = {"files": [str(vocab)], "code": "ours", "gigatoken": "0.10", "reference": "1.0", **options}
    assert_each_field_changes_the_key(key_of, base, {
        "files": [str(other_bytes)], "code": "edited", "gigatoken": "0.11", "reference": "1.1",
        "type": "HuggingFaceTokenizer",
        "vocab_size": 4096, "tiktoken_pattern": "file", "tiktoken_num_special_tokens": 999,
        "hf_include_special_tokens": False, "eod_id": 3, "bos_id": 1})
    moved = shutil.copy(vocab, tmp_path / "moved.json")
    same = key_of(**base)
    assert key_of(**{**base, "files": [moved]}) == same
    for name, value in {"model": moved, "encoder": "gigatoken"}.items():
        assert verdicts.key_for(base_config.replace(**{name: value}), [str(vocab)]) == verdicts.key_for(
            base_config, [str(vocab)]), name


def test_the_key_follows_this_packages_source(tmp_path, monkeypatch):
    """An edited adapter or check never reuses a verdict of the old code."""
    package = tmp_path / "tokenizers"
    shutil.copytree(Path(verdicts.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(verdicts, "__file__", str(package / "verdicts.py"))
    digests = []
    for edit in (None, "select.py", "huggingface.py"):
        if edit:
            (package / edit).write_text((package / edit).read_text() + "\n# edited\n")
        verdicts._code_digest.cache_clear()
        digests.append(verdicts._code_digest())
    verdicts._code_digest.cache_clear()
    assert len(set(digests)) == 3
