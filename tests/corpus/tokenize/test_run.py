"""The tokenize pipeline: Megatron's output, identical whatever the parallelism, bad-input policy,
sidecar, sharding, the autotuner's sample entry point."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.core.errors import ConfigError
from corpus.indexed import IndexedReader
from corpus.indexed.merge import merge
from corpus.readers import expand_inputs
from corpus.tokenize.errors import BadRecordError
from corpus.tokenize.run import tokenize
from corpus.tokenize.shards import _file_groups, resolve_shard
from corpus.tokenizers import build_tokenizer
from tests.conftest import REPO
from tests.corpus.tokenize.support import (
    CODE,
    TOKENIZER,
    WEB,
    config,
    hf_tokenizer,
    output_bytes,
    sample_records,
    write_jsonl,
)


def bos_tokenizer(tmp_path: Path) -> tuple[str, int]:
    """The example tokenizer with a post-processor that puts <|endoftext|> first, as a BOS
    (so an empty text encodes to [BOS] and must be written as [BOS, EOD])."""
    spec = json.loads(TOKENIZER.read_text())
    bos = next(t for t in spec["added_tokens"] if t["content"] == "<|endoftext|>")
    spec["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": bos["content"], "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B",
                                                                                              "type_id": 1}}],
                              "special_tokens": {bos["content"]: {"id": bos["content"], "ids": [bos["id"]],
                                                                  "tokens": [bos["content"]]}}}
    path = tmp_path / "bos_tokenizer.json"
    path.write_text(json.dumps(spec))
    return str(path), bos["id"]


def megatron_style(indexed_dataset, prefix: Path, tokenizer, texts: list[str], append_eod: bool) -> None:
    """What Megatron's preprocess_data.py writes: per document ids, EOD only on a non-empty list."""
    builder = indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for ids in tokenizer.encode_batch(texts):
        ids = list(ids) + ([tokenizer.eod] if ids and append_eod else [])
        builder.add_document(ids, [len(ids)] if ids else [])
    builder.finalize(f"{prefix}.idx")


@pytest.mark.parametrize("bos", [False, True])
def test_output_is_megatron_builders_bytes_and_megatron_reads_it(tmp_path, megatron_indexed, bos):
    records = [{"text": "", "title": "empty text"}, *sample_records(20), {"text": "  ", "title": ""}]
    records = [{**r, "title": r.get("title", "code")} for r in records]
    source = write_jsonl(tmp_path / "in.jsonl", records)
    model, bos_id = bos_tokenizer(tmp_path)
    tokenizer = hf_tokenizer(model=model) if bos else hf_tokenizer()
    stats = tokenize(config(tmp_path, [source], json_keys=["text", "title"], tokenizer=tokenizer, batch_size=4))
    reference = build_tokenizer(tokenizer)
    for key in ("text", "title"):
        texts = [r[key] for r in records]
        megatron_style(megatron_indexed, tmp_path / f"megatron_{key}", reference, texts, append_eod=True)
        assert output_bytes(tmp_path / "out", [key]) == {
            f"{key}{s}": (tmp_path / f"megatron_{key}{s}").read_bytes() for s in (".bin", ".idx")}
        dataset = megatron_indexed.IndexedDataset(str(tmp_path / f"out_{key}_document"))
        assert len(dataset.document_indices) == len(records) + 1
    first = IndexedReader(tmp_path / "out_text_document")
    if bos:  # "" encodes to [BOS] alone: written as [BOS, EOD]
        assert first.get(0).tolist() == [bos_id, reference.eod]
    else:  # "" encodes to nothing: a document without a sequence and without EOD
        assert first.document_indices[1] == 0
    assert stats.counters.records_written == len(records) and stats.counters.records_skipped == 0
    assert stats.encoder.startswith("gigatoken")  # its flat path, post-processor affixes included


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    folder = tmp_path_factory.mktemp("baseline")
    tokenize(config(folder, [WEB, CODE], batch_size=1000))
    return output_bytes(folder / "out", ["text"])


@pytest.mark.parametrize("workers, batch_size, threads", [(0, 1, 1), (1, 7, 1), (2, 3, 2), (2, 1000, 1)])
def test_output_is_identical_whatever_workers_batch_size_and_threads(tmp_path, baseline, workers, batch_size, threads):
    tokenize(config(tmp_path, [WEB, CODE], workers=workers, batch_size=batch_size, threads_per_worker=threads))
    assert output_bytes(tmp_path / "out", ["text"]) == baseline


def test_reference_encoder_gives_the_same_bytes_as_the_fast_path(tmp_path, baseline):
    stats = tokenize(config(tmp_path, [WEB, CODE], tokenizer=hf_tokenizer(encoder="reference")))
    assert stats.encoder.startswith("tokenizers")
    assert output_bytes(tmp_path / "out", ["text"]) == baseline


def bad_corpus(tmp_path: Path) -> list[Path]:
    good = sample_records(6)
    first = write_jsonl(tmp_path / "a.jsonl", [{**r, "title": "t"} for r in good[:3]])
    second = tmp_path / "b.jsonl"
    second.write_bytes(b'{"text": "fine", "title": "x"}\n{"text": "broken\n{"text": 7, "title": "x"}\n'
                       b'{"text": "no title"}\n{"text": "caf\xe9", "title": "x"}\n{"text": "last", "title": "y"}\n')
    third = tmp_path / "c.jsonl.gz"
    third.write_bytes(gzip.compress(b"".join(json.dumps({**r, "title": "z"}).encode() + b"\n" for r in good[3:]))[:-30])
    return [first, second, third]


def test_fail_stops_at_the_first_bad_record_and_leaves_no_output(tmp_path):
    inputs = bad_corpus(tmp_path)
    with pytest.raises(BadRecordError, match=r"b\.jsonl:2: malformed JSON"):
        tokenize(config(tmp_path, inputs, json_keys=["text", "title"], batch_size=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "b.jsonl", "c.jsonl.gz"]


def test_skip_lists_every_bad_record_and_keeps_keys_aligned(tmp_path):
    inputs = bad_corpus(tmp_path)
    stats = tokenize(config(tmp_path, inputs, json_keys=["text", "title"], on_error="skip", batch_size=2))
    skipped = [json.loads(line) for line in (tmp_path / "out.skipped.jsonl").read_text().splitlines()]
    assert [(Path(s["file"]).name, s["line"]) for s in skipped] == [
        ("b.jsonl", 2), ("b.jsonl", 3), ("b.jsonl", 4), ("b.jsonl", 5), ("c.jsonl.gz", 3)]
    reasons = [s["reason"] for s in skipped]
    assert "malformed JSON" in reasons[0] and "is a JSON number" in reasons[1] and "missing key 'title'" in reasons[2]
    assert "invalid UTF-8" in reasons[3] and "truncated gz stream" in reasons[4]
    written = 3 + 2 + 2
    assert (stats.counters.records_read, stats.counters.records_written, stats.counters.records_skipped) == (12,
                                                                                                             written, 5)
    for key in ("text", "title"):
        assert IndexedReader(tmp_path / f"out_{key}_document").num_documents == written
    titles = IndexedReader(tmp_path / "out_title_document")
    assert [titles.document(d)[0].tolist()[:-1] for d in (3, 4)] == build_tokenizer(hf_tokenizer()).encode_batch(["x",
                                                                                                                  "y"])


def test_a_clean_run_removes_a_stale_skipped_list(tmp_path):
    (tmp_path / "out.skipped.jsonl").write_text('{"old": true}\n')
    stats = tokenize(config(tmp_path, [WEB], on_error="skip"))
    assert stats.skipped_file is None and not (tmp_path / "out.skipped.jsonl").exists()


def test_sidecar_records_tokenizer_encoder_inputs_and_options(tmp_path):
    tokenize(config(tmp_path, [WEB], json_keys=["text", "title"]))
    meta = IndexedReader(tmp_path / "out_title_document").meta
    assert meta["json_key"] == "title" and meta["append_eod"] is True
    assert meta["encoder"].startswith("gigatoken") and meta["tokenizer"]["type"] == "HuggingFaceTokenizer"
    assert meta["inputs"] == [{"path": str(WEB), "size": WEB.stat().st_size, "start": 0, "end": WEB.stat().st_size}]
    assert meta["eod_id"] == build_tokenizer(hf_tokenizer()).eod and meta["vocab_size"] > 0
    assert meta["options_hash"] == IndexedReader(tmp_path / "out_text_document").meta["options_hash"]
    assert meta["num_documents"] == meta["records"]["written"] == 67


def shard_inputs(tmp_path: Path, layout: str) -> list[Path]:
    records = [{"text": r["text"], "title": "t"} for r in sample_records()]
    if layout == "one jsonl":
        return [write_jsonl(tmp_path / "all.jsonl", records)]
    if layout == "one gz":
        path = tmp_path / "all.jsonl.gz"
        path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
        return [path]
    if layout == "one parquet":
        pq.write_table(pa.Table.from_pylist(records), tmp_path / "all.parquet", row_group_size=10)
        return [tmp_path / "all.parquet"]
    return [write_jsonl(tmp_path / f"part{i}.jsonl", records[i::7]) for i in range(7)]


@pytest.mark.parametrize("layout", ["one jsonl", "one gz", "one parquet", "many files"])
@pytest.mark.parametrize("shards", [3, 8])
def test_shards_concatenated_are_the_unsharded_output(tmp_path, layout, shards, monkeypatch):
    from corpus.readers import lines

    monkeypatch.setattr(lines, "RAW_BLOCK", 4096)  # many compressed blocks: gz records split between shards
    inputs = shard_inputs(tmp_path, layout)
    tokenize(config(tmp_path, inputs, name="whole", batch_size=5))
    for index in range(shards):
        tokenize(config(tmp_path, inputs, name="part", batch_size=5, shard_index=index, num_shards=shards))
    parts = sorted(str(p)[: -len(".idx")] for p in tmp_path.glob("part-*-of-*_text_document.idx"))
    assert len(parts) == shards
    sizes = [IndexedReader(p).num_documents for p in parts]
    assert sum(sizes) == IndexedReader(tmp_path / "whole_text_document").num_documents
    assert sum(1 for s in sizes if s) > 1
    merge(parts, str(tmp_path / "merged_text_document"))
    assert output_bytes(tmp_path / "merged", ["text"]) == output_bytes(tmp_path / "whole", ["text"])


@pytest.mark.parametrize("environ, expected", [
    ({}, (0, 1, "default")),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "RANK": "1", "WORLD_SIZE": "2"}, (3, 8, "SLURM_PROCID/SLURM_NTASKS")),
    ({"RANK": "1", "WORLD_SIZE": "2"}, (1, 2, "RANK/WORLD_SIZE")),
])
def test_shard_defaults_come_from_slurm_then_torchrun(environ, expected):
    shard = resolve_shard(None, None, environ)
    assert (shard.index, shard.count, shard.source) == expected
    assert resolve_shard(0, 4, environ).count == 4


@pytest.mark.parametrize("index, count", [(4, 4), (-1, 2), (0, 0), (1, None)])
def test_impossible_shards_are_refused(index, count):
    with pytest.raises(ConfigError):
        resolve_shard(index, count, {})


def test_whole_files_are_balanced_by_size(tmp_path):
    sizes = [50, 10, 10, 10, 10, 10, 1, 1]
    for i, size in enumerate(sizes):
        (tmp_path / f"f{i}.jsonl").write_bytes(b"x" * size)
    files = expand_inputs([str(tmp_path / "*.jsonl")])
    groups = _file_groups(files, 3)
    assert [g for group in groups for g in group] == list(range(8)) and all(groups)
    assert groups[0] == [0]


def test_stats_json_is_written(tmp_path):
    tokenize(config(tmp_path, [WEB], stats_json=str(tmp_path / "stats.json")))
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["counters"]["records_written"] == 67 and stats["tokens_per_second"] > 0


@pytest.mark.slow
def test_a_50_mb_document_is_written_whole_in_bounded_memory(tmp_path):
    """Both encoders cut it into pieces (corpus/tokenizers/long_texts.py) and write the same bytes; the
    reference library alone used to need 5.8 GB for it."""
    texts = [r["text"] for r in sample_records()]
    joined = "\n".join(texts)
    document = (joined * (50_000_000 // len(joined) + 1))[:50_000_000]
    source = write_jsonl(tmp_path / "big.jsonl", [{"text": document}, {"text": "after the big one"}])
    reference = build_tokenizer(hf_tokenizer())
    outputs = []
    for encoder in ("auto", "reference"):
        prefix = tmp_path / encoder
        # A process of its own: its peak RSS must not include this test session's.
        subprocess.run([sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(source), "--output-prefix",
                        str(prefix), "--encoder", encoder, "--tokenizer-type", "HuggingFaceTokenizer",
                        "--tokenizer-model", str(TOKENIZER), "--append-eod", "--quiet", "--stats-json",
                        str(tmp_path / f"{encoder}.json")], check=True, cwd=REPO)
        reader = IndexedReader(f"{prefix}_text_document")
        head = reference.encode_batch([document[:200_000]])[0][:-10]
        assert reader.num_documents == 2 and reader.get(0)[: len(head)].tolist() == head
        assert reader.get(1).tolist() == reference.encode_batch(["after the big one"])[0] + [reference.eod]
        stats = json.loads((tmp_path / f"{encoder}.json").read_text())
        assert stats["peak_rss_mb"] < 1000, (encoder, stats["peak_rss_mb"])
        outputs.append(output_bytes(prefix, ["text"]))
    assert outputs[0] == outputs[1]
