"""Every blend mistake is a UserError naming the file, the line, the key and the fix."""

from __future__ import annotations

import contextlib
import logging
import signal
from pathlib import Path

import numpy as np
import pytest

from corpus.blending.datasets import SampleCounts, build_split_datasets
from corpus.blending.resolve import blend_tokenizer, resolve_blend
from corpus.blending.schema import (
    BlendConfig,
    apply_overrides,
    blend_from_data_path,
    blend_from_dict,
    dump_blend,
    load_blend,
)
from corpus.core.errors import ConfigError, UserError
from tests.conftest import run_cli
from tests.corpus.blending.blend_data import EXAMPLES, tokenizer_record, write_random

GOOD = """\
seq_length: 16
seed: 7
split: "90,10,0"
cache_dir: cache
sources:
  - {name: web, prefix: data/web, weight: 0.7}
  - {name: code, prefix: "data/code/*_doc", weight: 0.3}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_random(tmp_path / "data" / "web", 200, seed=1)
    for shard in range(3):
        write_random(tmp_path / "data" / "code" / f"c{shard}_doc", 30, seed=10 + shard)
    return tmp_path


def _blend(folder: Path, text: str) -> Path:
    path = folder / "blend.yaml"
    path.write_text(text)
    return path


def test_a_blend_without_split_is_split_as_megatron_splits_by_default(folder: Path) -> None:
    """Omitting split means Megatron's 969,30,1, exactly as if it were written (same samples, same fingerprint)."""
    implicit = resolve_blend(load_blend(_blend(folder, GOOD.replace('split: "90,10,0"\n', ""))))
    assert implicit.config.split is None and implicit.config.effective_split == "969,30,1"
    explicit = resolve_blend(load_blend(_blend(folder, GOOD.replace('"90,10,0"', '"969,30,1"'))))
    assert implicit.fingerprint == explicit.fingerprint
    counts = SampleCounts(100, 10)
    assert (build_split_datasets(implicit, counts).valid.tokens_of(3).tolist()
            == build_split_datasets(explicit, counts).valid.tokens_of(3).tolist())


def test_the_good_blend_loads_with_typed_fields(folder: Path) -> None:
    config = load_blend(_blend(folder, GOOD))
    assert isinstance(config, BlendConfig) and config.seq_length == 16 and config.sources[1].weight == 0.3
    resolved = resolve_blend(config)
    code = resolved.sources["train"][1]
    assert code.info.num_shards == 3 and code.info.num_sequences == len(code.lengths)
    assert resolved.vocab_size == 1000 and resolved.eod_id == 0 and resolved.tokenizer["type"] == "HuggingFaceTokenizer"
    assert (folder / "cache").is_dir()  # relative cache_dir is relative to the blend's folder


SCHEMA_ERRORS = [
    # (replace this, with that, line, key, words of the fix)
    ("seed: 7", "seed: 7\ncolour: red", 3, "colour", "known keys"),
    ("weight: 0.3}", "weight: 0.3, wieght: 1}", 7, "sources[1].wieght", "known keys"),
    ("seq_length: 16\n", "", 1, "seq_length", "missing required key"),
    ("{name: web, ", "{", 6, "sources[0].name", "missing required key"),
    ("weight: 0.7", "weight: heavy", 6, "sources[0].weight", "expected a number"),
    ("seq_length: 16", "seq_length: 1.5", 1, "seq_length", "expected an integer"),
    ("weight: 0.3", "weight: 0", 7, "sources[1].weight", "give a weight > 0"),
    ("weight: 0.3", "weight: -2", 7, "sources[1].weight", "give a weight > 0"),
    (", weight: 0.3}", "}", 7, "sources[1].weight", "give every source a weight, or none"),
    ("name: code", "name: web", 7, "sources[1].name", "must be unique"),
    ('split: "90,10,0"', 'split: "ninety,ten"', 3, "split", "up to three shares"),
    ('split: "90,10,0"', 'split: "0,0,0"', 3, "split", "at least one > 0"),
    ('split: "90,10,0"', 'split: "1,1,1,1"', 3, "split", "up to three shares"),
    ("seq_length: 16", "seq_length: 1", 1, "seq_length", "at least 2"),
    ("seed: 7", "seed: -1", 2, "seed", "2**32"),
    ("seed: 7", "seed: 7\nmax_epochs: 0", 3, "max_epochs", ">= 1"),
    ("seed: 7", "seed: 7\ntokenizer: {kind: wordpiece, path: t.json}", 3, "tokenizer.kind", "use one of"),
    ("seed: 7", "seed: 7\ntokenizer: {kind: huggingface}", 3, "tokenizer.path", "needs a path"),
    ("seed: 7", "seed: 7\nsamples: {eod_mask: true}", 3, "samples.eod_mask", "known keys"),
    (GOOD[GOOD.index("sources:"):], "sources: []\n", 5, "sources", "at least one"),
    ("seq_length: 16", "seq_length: [16", 1, "", "not valid YAML"),
]


@pytest.mark.parametrize("old,new,line,key,fix", SCHEMA_ERRORS, ids=[e[3] + ":" + e[4] for e in SCHEMA_ERRORS])
def test_schema_errors_name_file_line_key_and_fix(folder: Path, old: str, new: str, line: int, key: str,
                                                  fix: str) -> None:
    assert old in GOOD
    path = _blend(folder, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError) as caught:
        load_blend(path)
    message = str(caught.value)
    assert isinstance(caught.value, UserError)
    assert message.startswith(f"{path}:"), message
    assert fix in message, message
    if key:
        assert f": {key}: " in message, message
    assert caught.value.line is not None and abs(caught.value.line - line) <= 1, message


def test_per_split_lists_reject_split_and_unknown_split_names(folder: Path) -> None:
    per_split = ("seq_length: 16\nsources:\n  train: [{name: web, prefix: data/web}]\n  dev: [{name: web, prefix: "
                 "data/web}]\n")
    with pytest.raises(ConfigError, match=r"blend.yaml:4: sources.dev: unknown split 'dev'"):
        load_blend(_blend(folder, per_split))
    with pytest.raises(ConfigError, match="'split' cannot be used with per-split source lists"):
        load_blend(_blend(folder, per_split.replace("  dev: [{name: web, prefix: data/web}]\n",
                                                    "") + "split: '1,0,0'\n"))


def test_missing_file_and_non_mapping(folder: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: no such file"):
        load_blend(folder / "nope.yaml")
    with pytest.raises(ConfigError, match="expected a mapping of"):
        load_blend(_blend(folder, "- just a list\n"))


def test_overrides_are_validated(folder: Path) -> None:
    config = load_blend(_blend(folder, GOOD), seq_length=64, eod_mask_loss=True, seed=None)
    assert config.seq_length == 64 and config.samples.eod_mask_loss and config.seed == 7
    with pytest.raises(ConfigError, match="seq_length: expected an integer"):
        apply_overrides(config, seq_length="long")
    with pytest.raises(ConfigError, match="seq_length: seq_length 1 must be at least 2"):
        apply_overrides(config, seq_length=1)
    with pytest.raises(ConfigError, match="cannot override 'sources'"):
        apply_overrides(config, sources=())
    assert apply_overrides(config, cache_dir="maps").cache_dir == str(Path.cwd() / "maps")


def _resolve_error(folder: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        resolve_blend(load_blend(_blend(folder, text)))
    return str(caught.value)


def test_missing_idx_names_key_and_command(folder: Path) -> None:
    message = _resolve_error(folder, GOOD.replace("data/web,", "data/webb,"))
    assert "blend.yaml:6: sources[0].prefix:" in message and "data/webb.idx: no such file" in message
    assert "corpus tokenize" in message
    message = _resolve_error(folder, GOOD.replace("*_doc", "*_text_document"))
    assert "sources[1].prefix" in message and "glob matched no .idx files" in message


def test_missing_bin(folder: Path) -> None:
    (folder / "data" / "code" / "c1_doc.bin").unlink()
    message = _resolve_error(folder, GOOD)
    assert "sources[1].prefix" in message and "c1_doc.bin: no such file" in message and "1 of 3 shards" in message


def test_corrupt_idx_is_named(folder: Path) -> None:
    idx = folder / "data" / "web.idx"
    idx.write_bytes(idx.read_bytes()[:-5])
    message = _resolve_error(folder, GOOD)
    assert "sources[0].prefix" in message and "web: header: truncated: header declares" in message
    assert "web.idx): this pair is damaged and is not read; list every problem with corpus inspect --check" in message


def test_dtype_mismatch_between_sources(folder: Path) -> None:
    write_random(folder / "data" / "wide", 50, seed=3, dtype=np.int32)
    message = _resolve_error(folder, GOOD.replace("data/code/*_doc", "data/wide"))
    assert "sources[1].prefix" in message and "token dtype int32 differs from sources[0]" in message


def test_tokenizer_mismatch_between_sources(folder: Path) -> None:
    other = {"tokenizer": tokenizer_record(fingerprint="e" * 64), "vocab_size": 1000, "eod_id": 0}
    write_random(folder / "data" / "other", 50, seed=3, meta=other)
    message = _resolve_error(folder, GOOD.replace("data/code/*_doc", "data/other"))
    assert "sources[1].prefix" in message and "re-tokenize" in message


def test_tokenizer_mismatch_between_shards_of_a_glob(folder: Path) -> None:
    other = {"tokenizer": tokenizer_record(kind="TikTokenizer"), "vocab_size": 1000, "eod_id": 0}
    write_random(folder / "data" / "code" / "c9_doc", 30, seed=3, meta=other)
    message = _resolve_error(folder, GOOD)
    assert "sources[1].prefix" in message and "shards were tokenized differently" in message and "c9_doc" in message


def test_expected_tokenizer_is_checked_against_the_sidecars(folder: Path) -> None:
    tokenizer_file = folder / "tok.json"
    tokenizer_file.write_text("{}")
    text = GOOD + "tokenizer: {kind: sentencepiece, path: tok.json}\n"
    assert "tokenizer.kind" in _resolve_error(folder, text) and "HuggingFaceTokenizer" in _resolve_error(folder, text)
    message = _resolve_error(folder, text.replace("sentencepiece", "huggingface"))
    assert "blend.yaml:8: tokenizer.path:" in message and "not the tokenizer" in message
    message = _resolve_error(folder, text.replace("tok.json", "missing.json").replace("sentencepiece", "huggingface"))
    assert "tokenizer.path" in message and "no such tokenizer file" in message


def _sentencepiece_data(folder: Path, kind: str) -> str:
    """A blend over one source whose sidecar records ``kind`` (of the sentencepiece family) and names no file."""
    meta = {"tokenizer": {**tokenizer_record(kind=kind), "fingerprint": None}, "vocab_size": 1000, "eod_id": 0}
    write_random(folder / "data" / "spm", 40, seed=5, meta=meta)
    (folder / "spm.model").write_bytes(b"a model")
    return ("seq_length: 16\nsplit: '1'\nsources: [{name: s, prefix: data/spm}]\n"
            "tokenizer: {kind: KIND, path: spm.model}\n")


def test_an_exact_tokenizer_type_must_match_the_sidecars_and_a_family_takes_all_its_types(folder: Path) -> None:
    text = _sentencepiece_data(folder, "GPTSentencePieceTokenizer")
    message = _resolve_error(folder, text.replace("KIND", "SentencePieceTokenizer"))
    assert "tokenizer.kind" in message
    assert "tokenized with GPTSentencePieceTokenizer, not SentencePieceTokenizer" in message
    for accepted in ("GPTSentencePieceTokenizer", "sentencepiece"):
        resolve_blend(load_blend(_blend(folder, text.replace("KIND", accepted))))


def test_a_tokenizer_path_whose_files_cannot_be_read_names_the_key(folder: Path) -> None:
    (folder / "empty").mkdir()
    message = _resolve_error(folder, GOOD + "tokenizer: {kind: huggingface, path: empty}\n")
    assert "blend.yaml:8: tokenizer.path:" in message and "tokenizer.json" in message


def test_sources_without_sidecar_are_accepted_with_a_warning(folder: Path, caplog) -> None:
    write_random(folder / "data" / "megatron", 80, seed=4, meta=None)
    with caplog.at_level(logging.WARNING):
        resolved = resolve_blend(load_blend(_blend(folder, GOOD.replace("data/code/*_doc", "data/megatron"))))
    assert resolved.sources["train"][1].info.missing_sidecars == 1
    assert "no .meta.json" in caplog.text and "sources[1]" in caplog.text


def test_eod_needed_but_unknown(folder: Path) -> None:
    write_random(folder / "data" / "bare", 80, seed=4, meta=None)
    text = "seq_length: 16\nsplit: '1'\nsamples: {eod_mask_loss: true}\nsources: [{name: b, prefix: data/bare}]\n"
    message = _resolve_error(folder, text)
    assert "samples.eod_id" in message and "set samples.eod_id" in message
    assert resolve_blend(load_blend(_blend(folder, text.replace("true}", "true, eod_id: 0}")))).eod_id == 0


def test_eod_of_megatron_files_comes_from_the_named_tokenizer(folder: Path) -> None:
    write_random(folder / "data" / "bare", 80, seed=4, meta=None)
    text = ("seq_length: 16\nsplit: '1'\nsamples: {eod_mask_loss: true}\nsources: [{name: b, prefix: data/bare}]\n"
            f"tokenizer: {{kind: huggingface, path: {EXAMPLES / 'tokenizer.json'}}}\n")
    assert resolve_blend(load_blend(_blend(folder, text))).eod_id == 0  # the tokenizer's <|endoftext|>
    bare = text[: text.index("tokenizer:")]
    assert resolve_blend(load_blend(_blend(folder, bare)), tokenizer_eod=7).eod_id == 7  # e.g. trainer run's flags
    assert "--tokenizer-type on trainer run" in _resolve_error(folder, bare)


def _build_error(folder: Path, text: str, counts: SampleCounts, required=("train",)) -> str:
    with pytest.raises(ConfigError) as caught:
        build_split_datasets(load_blend(_blend(folder, text)), counts, required)
    return str(caught.value)


def test_requested_split_without_share(folder: Path) -> None:
    text = GOOD.replace('"90,10,0"', '"100,0,0"')
    message = _build_error(folder, text, SampleCounts(100, 20), required=("train", "valid"))
    assert "blend.yaml:3: split:" in message and "no share" in message and "ask for 0" in message
    lenient = build_split_datasets(load_blend(_blend(folder, text)), SampleCounts(100, 20))
    assert lenient.valid is None and len(lenient.train) >= 100


def test_per_split_blend_without_the_requested_list(folder: Path) -> None:
    text = "seq_length: 16\ncache_dir: cache\nsources:\n  train: [{name: web, prefix: data/web}]\n"
    message = _build_error(folder, text, SampleCounts(10, 5), required=("train", "valid"))
    assert "sources:" in message and "add a 'valid' list" in message


def test_more_samples_than_one_epoch_without_weights(folder: Path) -> None:
    text = GOOD.replace(", weight: 0.7", "").replace(", weight: 0.3", "")
    message = _build_error(folder, text, SampleCounts(100_000))
    assert "one epoch each" in message and "give every source a weight" in message
    capped = build_split_datasets(load_blend(_blend(folder, text)), SampleCounts(100, 100_000)).valid
    assert len(capped) == sum(m.length for m in capped.plan.members) < 100_000  # megatron-core's cap


def test_max_epochs_refuses_repetition(folder: Path) -> None:
    message = _build_error(folder, GOOD.replace("weight: 0.3}", "weight: 0.3, max_epochs: 1}"), SampleCounts(5000))
    assert "sources[1].max_epochs" in message and "read" in message and "raise max_epochs" in message
    message = _build_error(folder, GOOD + "max_epochs: 2\n", SampleCounts(5000))
    assert "blend.yaml:8: max_epochs:" in message


def test_weights_need_a_sample_count(folder: Path) -> None:
    from corpus.blending.plan import plan_split

    resolved = resolve_blend(load_blend(_blend(folder, GOOD)))
    with pytest.raises(ConfigError, match="pass --num-samples"):
        plan_split(resolved, "train", None)


@contextlib.contextmanager
def _no_hang(seconds: int = 120):
    previous = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the build hung"))
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_source_with_an_empty_share_is_left_out_and_never_hangs(folder: Path, caplog) -> None:
    """megatron-core loops forever here (a split share with no documents)."""
    write_random(folder / "data" / "tiny", 3, seed=5, empty_share=0)
    text = GOOD.replace("data/code/*_doc", "data/tiny")
    with _no_hang(), caplog.at_level(logging.WARNING):
        datasets = build_split_datasets(load_blend(_blend(folder, text)), SampleCounts(200, 30))
    assert [m.name for m in datasets.valid.plan.members] == ["web"] and datasets.valid.plan.excluded == ("code",)
    assert {datasets.valid.source_name(i) for i in range(len(datasets.valid))} == {"web"}
    assert "1 source(s) contribute nothing to valid" in caplog.text and "sources[1] (code" in caplog.text
    only_tiny = "seq_length: 16\nsplit: '90,10,0'\nsources: [{name: t, prefix: data/tiny, weight: 1}]\n"
    assert "every source's valid share is empty" in _build_error(folder, only_tiny, SampleCounts(10, 5))


def test_data_path_spelling_and_dump_round_trip(folder: Path, monkeypatch) -> None:
    monkeypatch.chdir(folder)
    config = blend_from_data_path(["0.7", "data/web", "0.3", "data/code/*_doc"], "90,10,0", seq_length=16)
    assert [s.weight for s in config.sources] == [0.7, 0.3]
    dump_blend(config, folder / "saved.yaml")
    again = load_blend(folder / "saved.yaml")
    assert resolve_blend(again).fingerprint == resolve_blend(config).fingerprint
    assert [s.weight for s in blend_from_data_path(["data/web"], "1", 16).sources] == [None]


@pytest.mark.parametrize("block", ["{type: huggingface, model: tok.json}", "{kind: huggingface, path: tok.json}"])
def test_a_saved_blend_names_its_tokenizer_file_wherever_it_is_saved(folder: Path, block: str) -> None:
    """The tokenizer's file is relative to the blend's folder: saved elsewhere, the blend names it absolutely."""
    (folder / "tok.json").write_text("{}")
    (folder / "blend.yaml").write_text(GOOD + f"tokenizer: {block}\n")
    elsewhere = folder / "saved" / "blend.yaml"
    elsewhere.parent.mkdir()
    dump_blend(load_blend(folder / "blend.yaml"), elsewhere)
    saved = load_blend(elsewhere).tokenizer
    assert saved.files == {"model": str(folder / "tok.json")}


def test_many_tiny_shards_with_split_99_1_0(folder: Path, caplog) -> None:
    """The case that hangs megatron-core: many small shards, split "99,1,0". As one glob source the
    shards are one file and valid gets its 1%; listed one by one, the shards whose valid share is
    empty are left out with one warning."""
    for shard in range(120):  # every tenth shard is large enough for a 1% share of its own
        write_random(folder / "tiny" / f"s{shard:04d}", 60 if shard % 10 == 0 else 4, seed=100 + shard, empty_share=0)
    glob_blend = {"seq_length": 8, "split": "99,1,0", "sources": [{"name": "tiny", "prefix": "tiny/s*", "weight": 1}]}
    listed = {**glob_blend, "sources": [{"name": f"s{i}", "prefix": f"tiny/s{i:04d}", "weight": 1} for i in range(120)]}
    with _no_hang(), caplog.at_level(logging.WARNING):
        one = build_split_datasets(blend_from_dict(glob_blend, base_dir=folder), SampleCounts(500, 20))
        assert one.valid.plan.members[0].end - one.valid.plan.members[0].begin == 12  # 1% of 1,152 sequences
        assert "contribute nothing" not in caplog.text
        many = build_split_datasets(blend_from_dict(listed, base_dir=folder), SampleCounts(500, 20))
    assert len(many.valid.plan.members) == 12 and len(many.valid.plan.excluded) == 108
    assert {many.valid.source_name(i) for i in range(len(many.valid))} == {f"s{i}" for i in range(0, 120, 10)}
    assert caplog.text.count("contribute nothing to valid") == 1 and "and 103 more" in caplog.text


def _tokenized(folder: Path, config_flags: list[str]) -> None:
    """examples/web.jsonl through `corpus tokenize` into folder/web_text_document with the tokenizer ``config_flags``
    name, as a user makes data."""
    run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(folder / "web"),
            *config_flags, "--append-eod", "--quiet")


def test_the_tokenizer_block_takes_tokenizer_configs_keys_and_its_older_spelling(tmp_path: Path) -> None:
    """`tokenizer:` names the tokenizer with TokenizerConfig's keys (what corpus tokenize's flags set); the older
    {kind, path} stays accepted, and a block spelling both is refused."""
    shipped = str(EXAMPLES / "tokenizer.json")
    _tokenized(tmp_path, ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", shipped])
    head = "seq_length: 16\nsplit: '1'\nsources: [{name: web, prefix: web_text_document}]\n"
    for block in (f"{{type: HuggingFaceTokenizer, model: {shipped}}}", f"{{type: huggingface, model: {shipped}}}",
                  f"{{kind: huggingface, path: {shipped}}}"):
        resolved = resolve_blend(load_blend(_blend(tmp_path, head + f"tokenizer: {block}\n")))
        assert blend_tokenizer(resolved).model == shipped
    other = tmp_path / "other.json"
    other.write_text(Path(shipped).read_text().replace("<|endoftext|>", "<|end|>"))
    message = _resolve_error(tmp_path, head + f"tokenizer: {{type: HuggingFaceTokenizer, model: {other}}}\n")
    assert "blend.yaml:4: tokenizer.model:" in message and "not the tokenizer" in message
    both = f"tokenizer: {{type: huggingface, kind: huggingface, model: {shipped}}}\n"
    message = _resolve_error(tmp_path, head + both)
    assert "tokenizer.kind: give type or kind (its older spelling), not both" in message


def test_a_tokenizer_of_two_files_is_named_and_checked_in_a_blend(tmp_path: Path, tokenizer_files) -> None:
    """GPT-2's vocab.json + merges.txt: the blend names both files (TokenizerConfig's keys), their fingerprint is the
    one corpus tokenize recorded, and Megatron files without sidecars take the tokenizer from the blend."""
    vocab, merges = tokenizer_files.gpt2_vocab, tokenizer_files.gpt2_merges
    _tokenized(tmp_path, ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab, "--merge-file", merges])
    head = "seq_length: 16\nsplit: '1'\nsources: [{name: web, prefix: web_text_document}]\n"
    named = head + f"tokenizer: {{type: GPT2BPETokenizer, vocab_file: {vocab}, merge_file: {merges}}}\n"
    resolve_blend(load_blend(_blend(tmp_path, named)))
    resolve_blend(load_blend(_blend(tmp_path, named.replace("GPT2BPETokenizer", "gpt2"))))
    swapped = head + f"tokenizer: {{type: GPT2BPETokenizer, vocab_file: {merges}, merge_file: {vocab}}}\n"
    assert "not the tokenizer" in _resolve_error(tmp_path, swapped)
    (tmp_path / "web_text_document.meta.json").unlink()  # as Megatron writes it: the blend's tokenizer is the one
    resolved = resolve_blend(load_blend(_blend(tmp_path, named)))
    assert blend_tokenizer(resolved).type == "GPT2BPETokenizer" and resolved.eod_id is not None
