"""corpus inspect, library side: the report against independent numpy, every check catching its
planted defect (and all of them at once), files written by megatron-core, and millions of documents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus.core.errors import ConfigError
from corpus.indexed import HEADER_SIZE, IndexedWriter, sidecar
from corpus.inspect.checks import id_space
from corpus.inspect.errors import InspectError
from corpus.inspect.run import InspectConfig, inspect
from corpus.inspect.show import DocumentRange, show_documents
from corpus.inspect.stats import length_histogram
from corpus.inspect.summary import inspect_prefix
from tests.chunks import shrink_chunks
from tests.corpus.inspect.pairs import EOD, VOCAB, checks, idx_arrays, nonempty, token_position, write_pair

# -- the report -------------------------------------------------------------------------------------


def test_report_matches_independent_numpy(pair: Path, documents) -> None:
    report = inspect_prefix(str(pair))
    lengths = np.array([sum(len(s) for s in d) for d in documents])
    assert (report.num_documents, report.num_sequences) == (len(documents), sum(len(d) for d in documents))
    assert report.num_tokens == lengths.sum() and report.bin_bytes == 2 * lengths.sum()
    assert report.dtype == "uint16" and report.version == 1
    assert report.empty_documents == int((lengths == 0).sum()) > 0
    assert report.lengths.min == lengths.min() and report.lengths.max == lengths.max()
    assert report.lengths.median == np.median(lengths) and report.lengths.p99 == np.percentile(lengths, 99)
    assert report.lengths.mean == pytest.approx(lengths.mean())
    assert report.meta["vocab_size"] == VOCAB and report.meta["num_documents"] == len(documents)
    edges, counts = report.histogram.edges, report.histogram.counts
    assert sum(counts) == len(documents)
    for low, high, count in zip(edges, edges[1:], counts):
        assert count == int(((lengths >= low) & (lengths < high)).sum())


def test_histogram_bins_are_powers_of_two() -> None:
    histogram = length_histogram(np.array([0, 1, 2, 3, 4, 7, 8, 1000]))
    assert histogram.edges == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert histogram.counts == [1, 1, 2, 2, 1, 0, 0, 0, 0, 0, 1]
    assert length_histogram(np.array([5, 6])).edges == [4, 8]  # leading empty bins dropped
    assert length_histogram(np.array([], dtype=np.int64)).counts == []


def test_empty_file(tmp_path: Path) -> None:
    write_pair(tmp_path / "empty", [])
    report = inspect_prefix(str(tmp_path / "empty"))
    assert (report.num_documents, report.num_tokens, report.lengths) == (0, 0, None)
    assert checks(tmp_path / "empty") == []


def test_file_written_by_megatron(tmp_path: Path, megatron_indexed, documents) -> None:
    """No sidecar, written by megatron-core itself: summarised and clean."""
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16)
    for sequences in documents:
        for sequence in sequences:
            builder.add_item(torch.from_numpy(sequence.astype(np.int64)))
        builder.end_document()
    builder.finalize(str(tmp_path / "m.idx"))
    reference = megatron_indexed.IndexedDataset(str(tmp_path / "m"))
    report = inspect_prefix(str(tmp_path / "m"))
    assert report.meta is None
    assert report.num_sequences == len(reference) and report.num_documents == len(reference.document_indices) - 1
    assert checks(tmp_path / "m") == [] and checks(tmp_path / "m", vocab_size=VOCAB) == []


# -- every check catches its planted defect ------------------------------------------------------


def test_clean_pair_passes(pair: Path) -> None:
    assert checks(pair) == []


def test_bad_magic_is_a_header_problem(pair: Path) -> None:
    with open(f"{pair}.idx", "r+b") as handle:
        handle.write(b"NOTANIDX!")
    [problem] = checks(pair)
    assert problem.check == "header" and "magic" in problem.message and problem.file == f"{pair}.idx"


def test_truncated_idx_is_a_header_problem(pair: Path) -> None:
    size = Path(f"{pair}.idx").stat().st_size
    with open(f"{pair}.idx", "r+b") as handle:
        handle.truncate(size - 5)
    [problem] = checks(pair)
    assert problem.check == "header" and "truncated" in problem.message


def test_truncated_bin_names_the_cut_document(pair: Path, documents) -> None:
    last = nonempty(documents)[-1]
    cut = token_position(documents, last, 0) + 1
    with open(f"{pair}.bin", "r+b") as handle:
        handle.truncate(2 * cut)
    problems = {p.check: p for p in checks(pair)}
    assert problems["bin-size"].document == last and problems["bin-size"].offset == 2 * cut
    assert "sidecar" not in problems  # the sidecar describes the index, which is intact
    assert "eod" not in problems  # skipped: structure broken, never a guess


def test_missing_bin(pair: Path) -> None:
    Path(f"{pair}.bin").unlink()
    [problem] = checks(pair)
    assert problem.check == "bin-size" and "missing" in problem.message


def test_wrong_pointer_names_sequence_document_and_offset(pair: Path, documents) -> None:
    lengths, pointers, docs = idx_arrays(pair)
    target = int(docs[nonempty(documents)[5]])  # first sequence of a document
    pointers[target] += 2
    pointers.flush()
    problems = checks(pair)
    assert [p.check for p in problems] == ["pointers", "pointers"]
    assert [p.offset for p in problems] == [HEADER_SIZE + 4 * len(lengths) + 8 * s for s in (target, target + 1)]
    assert problems[0].document == nonempty(documents)[5]
    assert f"sequence {target} starts at byte" in problems[0].message


def test_first_pointer_not_zero(pair: Path) -> None:
    _, pointers, _ = idx_arrays(pair)
    pointers[0] = 4
    pointers.flush()
    assert "sequence 0 starts at byte 4, not 0" in checks(pair)[0].message


def test_negative_length(pair: Path, documents) -> None:
    lengths, _, docs = idx_arrays(pair)
    document = nonempty(documents)[3]
    lengths[docs[document]] = -7
    lengths.flush()
    problems = checks(pair)
    negative = [p for p in problems if p.check == "lengths"]
    assert len(negative) == 1 and negative[0].document == document
    assert negative[0].offset == HEADER_SIZE + 4 * int(docs[document])
    assert {"pointers", "bin-size"} <= {p.check for p in problems}


def test_non_monotonic_document_index(pair: Path) -> None:
    _, _, docs = idx_arrays(pair)
    docs[10], docs[11] = docs[11] + 1, docs[10]
    docs.flush()
    problems = checks(pair)
    assert problems and all(p.check == "document-index" for p in problems)
    assert any(p.document in (10, 11) and "not monotonic" in p.message for p in problems)


def test_document_index_must_start_at_zero_and_end_at_count(pair: Path) -> None:
    lengths, _, docs = idx_arrays(pair)
    docs[0], docs[-1] = 1, len(lengths) - 1
    docs.flush()
    messages = [p.message for p in checks(pair) if p.check == "document-index"]
    assert any("starts at sequence 1, not 0" in m for m in messages)
    assert any(f"ends at sequence {len(lengths) - 1}, not at the sequence count {len(lengths)}" in m for m in messages)


def test_id_outside_vocabulary(pair: Path, documents) -> None:
    document = nonempty(documents)[7]
    position = token_position(documents, document, 0)
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[position] = VOCAB + 5
    tokens.flush()
    [problem] = checks(pair)
    assert problem.check == "token-ids" and problem.document == document and problem.offset == 2 * position
    assert f"id {VOCAB + 5} outside the vocabulary [0, {VOCAB}) at token 0 of the document" in problem.message


def test_vocab_size_option_overrides_sidecar(pair: Path) -> None:
    problems = checks(pair, vocab_size=500)
    assert problems and {p.check for p in problems} == {"token-ids", "sidecar"}  # ids and eod_id >= 500


def test_missing_eod(pair: Path, documents) -> None:
    document = nonempty(documents)[-2]
    end = token_position(documents, document + 1, 0) - 1
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[end] = 3
    tokens.flush()
    [problem] = checks(pair)
    assert (problem.check, problem.document, problem.offset) == ("eod", document, 2 * end)
    assert f"ends with id 3, not EOD ({EOD})" in problem.message


def test_eod_id_from_the_tokenizer_record(tmp_path: Path, documents) -> None:
    """Sidecars that record the EOD only inside their tokenizer record are still checked."""
    documents[3] = [np.array([1, 2, 3], dtype=np.uint16)]
    write_pair(tmp_path / "p", documents, {"append_eod": True, "tokenizer": {"vocab_size": VOCAB, "eod": EOD}})
    [problem] = checks(tmp_path / "p")
    assert (problem.check, problem.document) == ("eod", 3)


def test_eod_not_required_without_append_eod(tmp_path: Path, documents) -> None:
    documents[0] = [np.array([1, 2, 3], dtype=np.uint16)]
    write_pair(tmp_path / "p", documents, {"vocab_size": VOCAB, "eod_id": EOD, "append_eod": False})
    assert checks(tmp_path / "p") == []


def test_sidecar_problems(pair: Path) -> None:
    meta = sidecar.read(pair)
    sidecar.write(pair, {**meta, "num_tokens": meta["num_tokens"] + 1, "dtype": "int32"})
    messages = [p.message for p in checks(pair)]
    assert any("num_tokens" in m for m in messages) and any("dtype='int32'" in m for m in messages)
    sidecar.write(pair, {**meta, "vocab_size": 70000})
    [problem] = checks(pair)
    assert problem.check == "sidecar"
    assert "dtype uint16 cannot hold the ids of a 70000-token vocabulary" in problem.message
    Path(f"{pair}.meta.json").write_text("{not json")
    [problem] = checks(pair)
    assert problem.check == "sidecar" and "not valid JSON" in problem.message


def test_all_problems_are_reported_not_just_the_first(pair: Path, documents) -> None:
    """A broken pointer, an id beyond the vocabulary and a sidecar lie, each reported."""
    _, pointers, docs = idx_arrays(pair)
    pointers[int(docs[nonempty(documents)[2]])] += 2
    pointers.flush()
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[token_position(documents, nonempty(documents)[4], 1)] = 60000
    tokens.flush()
    meta = sidecar.read(pair)
    sidecar.write(pair, {**meta, "num_documents": 1})
    assert {p.check for p in checks(pair)} == {"pointers", "token-ids", "sidecar"}


def test_many_problems_are_capped_and_counted(pair: Path, documents) -> None:
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[:100] = VOCAB
    tokens.flush()
    problems = [p for p in checks(pair, max_problems=3) if p.check == "token-ids"]
    assert [p.count for p in problems] == [1, 1, 1, 97]
    assert [p.offset for p in problems] == [0, 2, 4, 6]
    assert problems[-1].message.startswith("97 more token-ids problem(s) not listed")


# -- showing documents ------------------------------------------------------------------------------


def test_document_range_parsing() -> None:
    assert DocumentRange.parse("4") == DocumentRange(4, 5)
    assert DocumentRange.parse("2:6") == DocumentRange(2, 6)
    assert DocumentRange.parse("3:") == DocumentRange(3, None)
    assert DocumentRange.parse(":3") == DocumentRange(0, 3)
    assert DocumentRange.parse(":") == DocumentRange(0, None)
    for bad in ("", "a", "5:2", "-1", "1:x", "3:3", "1:2:3"):
        with pytest.raises(ConfigError):
            DocumentRange.parse(bad)
    assert DocumentRange(2, None).resolve(5, "p") == range(2, 5)
    with pytest.raises(ConfigError, match="the file has 5"):
        DocumentRange(3, 9).resolve(5, "p")


def test_show_without_tokenizer_falls_back_to_ids(pair: Path, documents, caplog) -> None:
    first = nonempty(documents)[0]
    [document] = show_documents(str(pair), DocumentRange(first, first + 1), None, None)
    assert document.text is None and document.ids == [s.tolist() for s in documents[first]]
    assert "no tokenizer recorded" in caplog.text


def test_config_rejects_ids_without_show() -> None:
    with pytest.raises(InspectError, match="--show"):
        InspectConfig(datasets=("x",), ids=True)
    with pytest.raises(InspectError, match="at least one dataset"):
        InspectConfig(datasets=())
    assert InspectConfig(datasets="data/web").datasets == ("data/web",)


def test_check_lists_problems_when_no_summary_is_possible(pair: Path) -> None:
    Path(f"{pair}.bin").unlink()
    [inspection] = inspect(InspectConfig(datasets=(str(pair),), check=True))
    assert inspection.report is None and inspection.problems[0].check == "bin-size"
    assert json.dumps(inspection.to_dict())


# -- scale --------------------------------------------------------------------------------------------


def test_millions_of_documents(tmp_path: Path) -> None:
    """Two million documents: summarised and checked with vectorised numpy (a Python loop per document
    would take minutes here); a defect in the very last document is still found."""
    count = 2_000_000
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 9, size=count)
    tokens = rng.integers(0, EOD, size=int(lengths.sum())).astype(np.uint16)
    ends = np.cumsum(lengths)[lengths > 0] - 1
    tokens[ends] = EOD
    tokens[ends[-1]] = 5  # the last document lacks its EOD
    with IndexedWriter(tmp_path / "big", np.uint16) as writer:
        writer.add_documents(tokens, lengths)
        writer.finalize({"vocab_size": VOCAB, "eod_id": EOD, "append_eod": True})
    report = inspect_prefix(str(tmp_path / "big"))
    assert report.num_documents == count and report.num_tokens == lengths.sum()
    assert report.empty_documents == int((lengths == 0).sum())
    assert report.lengths.median == np.median(lengths) and report.lengths.max == 8
    assert sum(report.histogram.counts) == count
    [problem] = checks(tmp_path / "big")
    last = int(np.flatnonzero(lengths)[-1])
    assert (problem.check, problem.document, problem.offset) == ("eod", last, 2 * int(ends[-1]))


# -- chunk boundaries -------------------------------------------------------------------------------


def _planted_problems(pair: Path, documents, content: bool) -> list:
    """Every problem of ``pair`` once defects are planted at and around boundaries of chunks of 7: structural
    ones (which stop the content checks), or wrong ids and missing EODs in an intact structure."""
    write_pair(pair, documents, {"vocab_size": VOCAB, "eod_id": EOD, "append_eod": True})
    if content:
        tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
        tokens[[6, 7, 49, 700]] = VOCAB + 1
        for document in (6, 7, 13, 14, 15):  # the first and last of a chunk, and one inside
            if documents[document]:
                tokens[token_position(documents, document, sum(len(s) for s in documents[document]) - 1)] = 5
        tokens.flush()
    else:
        lengths, pointers, docs = idx_arrays(pair)
        for sequence in (7, 13, 14, 22):
            pointers[sequence] += 2
        lengths[21] = -lengths[21]
        docs[28] = docs[27] - 1  # document 27 ends before it starts
        for array in (lengths, pointers, docs):
            array.flush()
    return checks(pair, max_problems=100)


def test_the_report_and_every_check_are_the_same_in_chunks_of_seven(pair: Path, documents, monkeypatch) -> None:
    """The same problems, at the same places and in the same words, whether a scan sees the file in one chunk or
    in chunks of 7 documents, sequences or tokens; and the same report of a clean file."""
    report = inspect_prefix(str(pair))
    structure, content = (_planted_problems(pair, documents, kind) for kind in (False, True))
    assert {p.check for p in structure} >= {"pointers", "lengths", "document-index"}
    assert {p.check for p in content} == {"token-ids", "eod"}
    changed = shrink_chunks(monkeypatch, 7)
    assert {"corpus.inspect.checks.DOCUMENT_CHUNK", "corpus.inspect.stats.TOKEN_CHUNK"} <= set(changed)
    assert _planted_problems(pair, documents, False) == structure
    assert _planted_problems(pair, documents, True) == content
    write_pair(pair, documents, {"vocab_size": VOCAB, "eod_id": EOD, "append_eod": True})
    assert inspect_prefix(str(pair)) == report


def test_the_ids_a_tokenizer_gives_reach_past_its_token_count_where_a_special_id_does() -> None:
    """cl100k as a tokenizer.json with Llama-3's BOS counts 100,262 tokens but gives id 100277: its pairs are fine."""
    assert id_space(100_262, [100_257, 100_277]) == 100_278
    assert id_space(500, [3, None]) == 500 and id_space(None, [3]) is None
