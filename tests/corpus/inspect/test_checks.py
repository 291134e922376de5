"""``corpus inspect --check``'s checks, problem by problem: each planted defect is reported whole (its check, file,
words, document and byte offset, computed here from what was planted), in one chunk and across chunks of 7;
places no document holds are named by their place in the file; the cap on listed problems holds across chunks."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from corpus.indexed import HEADER_SIZE, read_header, sidecar
from corpus.indexed.errors import IndexFormatError
from corpus.inspect.checks import Problem, contents_unverified
from tests.chunks import shrink_chunks
from tests.corpus.inspect.pairs import EOD, VOCAB, checks, idx_arrays, nonempty, token_position, write_pair

#: Run a test in one chunk (the sizes as shipped) and in chunks of 7 documents, sequences and tokens.
IN_CHUNKS = pytest.mark.parametrize("chunk", [None, 7], ids=["one-chunk", "chunks-of-7"])


def in_chunks(monkeypatch, chunk: int | None) -> None:
    if chunk is not None:
        shrink_chunks(monkeypatch, chunk)


def problem(prefix: Path, check: str, suffix: str, message: str, document: int | None, offset: int | None,
            count: int = 1) -> Problem:
    """The problem ``check`` reports in ``prefix`` + ``suffix``, as ``corpus inspect --check`` lists it."""
    return Problem(str(prefix), check, f"{prefix}{suffix}", message, document, offset, count)


def of_check(problems: list[Problem], check: str) -> list[Problem]:
    return [found for found in problems if found.check == check]


def test_a_problem_reads_prefix_check_words_then_where() -> None:
    assert str(Problem("p", "eod", "p.bin", "ends badly", 3, 40)) == "p: eod: ends badly (document 3, p.bin byte 40)"
    assert str(Problem("p", "lengths", "p.idx", "negative", None, 16)) == "p: lengths: negative (p.idx byte 16)"
    assert str(Problem("p", "bin-size", "p.bin", "missing")) == "p: bin-size: missing (p.bin)"


@IN_CHUNKS
def test_document_index_problems_name_the_document_and_its_entry(pair: Path, monkeypatch, chunk) -> None:
    """A start past 0 that also steps back, steps back on and after a chunk's edge (documents 7 and 20), and an end
    short of the sequence count: each at the byte of the entry that is wrong."""
    in_chunks(monkeypatch, chunk)
    lengths, _, docs = idx_arrays(pair)
    count, last = len(lengths), len(docs) - 1
    assert docs[-2] < count - 1  # the shortened end steps back nowhere
    docs[0] = docs[1] + 1
    for document in (7, 20):
        docs[document + 1] = docs[document] - 1
    docs[-1] = count - 1
    docs.flush()
    offset = HEADER_SIZE + 12 * count + 8 * np.arange(len(docs))
    expected = [
        problem(pair, "document-index", ".idx", f"document index starts at sequence {docs[0]}, not 0", 0, offset[0]),
        *[problem(pair, "document-index", ".idx", f"not monotonic: document {d} starts at sequence {docs[d]}, "
                  f"document {d + 1} at {docs[d + 1]}", d, offset[d + 1]) for d in (0, 7, 20)],
        problem(pair, "document-index", ".idx", f"document index ends at sequence {count - 1}, not at the sequence "
                f"count {count}", None, offset[last]),
    ]
    assert of_check(checks(pair, max_problems=100), "document-index") == expected


@IN_CHUNKS
@pytest.mark.parametrize("documents_written", [295, 296])
def test_a_step_back_in_the_last_entry_is_found_whatever_the_count(tmp_path: Path, documents, monkeypatch, chunk,
                                                                   documents_written: int) -> None:
    """The last step of the document index is its own chunk's when the entries (documents + 1) are one past a
    multiple of 7, and shares one otherwise."""
    in_chunks(monkeypatch, chunk)
    prefix = tmp_path / "p"
    write_pair(prefix, documents[:documents_written])
    _, _, docs = idx_arrays(prefix)
    last = len(docs) - 2
    docs[last] = docs[last + 1] + 1
    docs.flush()
    assert [(found.document, found.message.split(":")[0]) for found in of_check(checks(prefix), "document-index")] \
        == [(last, "not monotonic")]


@pytest.mark.parametrize("one_sequence_per_document", [True, False])
def test_a_document_given_two_sequences_is_caught_only_where_the_sidecar_says_one_each(
        tmp_path: Path, monkeypatch, one_sequence_per_document: bool) -> None:
    """Joining two documents keeps the index monotonic: only the sidecar's word that each is one sequence tells."""
    shrink_chunks(monkeypatch, 7)
    rng = np.random.default_rng(2)
    documents = [[rng.integers(0, EOD, rng.integers(1, 9)).astype(np.uint16)] for _ in range(30)]
    if not one_sequence_per_document:
        documents[-1] = [documents[-1][0], np.array([EOD], dtype=np.uint16)]  # one document of two sequences
    write_pair(tmp_path / "p", documents, {"vocab_size": VOCAB})  # the writer records one_sequence_per_document
    lengths, _, docs = idx_arrays(tmp_path / "p")
    for document in (5, 13):  # inside a chunk of 7 and on its last step
        docs[document] -= 1  # its sequence and the one before: the document before holds none
    docs.flush()
    expected = [problem(tmp_path / "p", "document-index", ".idx",
                        f"document {d} holds sequences {docs[d]} to {docs[d + 1] - 1}, but the sidecar says every "
                        "document is one sequence (one_sequence_per_document): the document index was changed", d,
                        HEADER_SIZE + 12 * len(lengths) + 8 * (d + 1)) for d in (5, 13)]
    assert of_check(checks(tmp_path / "p"), "document-index") == (expected if one_sequence_per_document else [])


@IN_CHUNKS
def test_negative_lengths_are_named_at_their_entry_and_an_empty_sequence_is_none(tmp_path: Path, documents,
                                                                                  monkeypatch, chunk) -> None:
    in_chunks(monkeypatch, chunk)
    documents[0] = documents[nonempty(documents)[0]]
    documents[2] = [*documents[2], np.zeros(0, dtype=np.uint16)]  # a sequence of no tokens: allowed
    write_pair(tmp_path / "p", documents)
    assert checks(tmp_path / "p") == []
    lengths, _, docs = idx_arrays(tmp_path / "p")
    planted = (0, 7, 15)  # the first, on a chunk's edge and past one
    for sequence in planted:
        lengths[sequence] = -lengths[sequence]
    lengths.flush()
    holding = [int(np.searchsorted(docs, s, side="right")) - 1 for s in planted]
    assert of_check(checks(tmp_path / "p"), "lengths") == [
        problem(tmp_path / "p", "lengths", ".idx", f"sequence {s} has negative length {lengths[s]}", d,
                HEADER_SIZE + 4 * s) for s, d in zip(planted, holding)]


def test_a_sequence_past_the_document_index_s_end_is_in_no_document(pair: Path) -> None:
    """The index's last entry cut short leaves the last sequence outside every document: its problems name none."""
    lengths, _, docs = idx_arrays(pair)
    last = len(lengths) - 1
    assert docs[-2] <= last  # the last document holds the last sequence
    docs[-1], lengths[last] = last, -lengths[last]
    for array in (lengths, docs):
        array.flush()
    assert of_check(checks(pair), "lengths") == [
        problem(pair, "lengths", ".idx", f"sequence {last} has negative length {lengths[last]}", None,
                HEADER_SIZE + 4 * last)]


@IN_CHUNKS
def test_pointer_problems_say_where_each_sequence_should_start(tmp_path: Path, documents, monkeypatch,
                                                               chunk) -> None:
    """The first pointer off 0 (so the second is off too), and one more on a chunk's edge; document 0 holds one
    sequence, so each problem's document is its own sequence's."""
    in_chunks(monkeypatch, chunk)
    documents[0] = [np.concatenate(documents[nonempty(documents)[0]])]
    pair = tmp_path / "p"
    write_pair(pair, documents)
    lengths, pointers, docs = idx_arrays(pair)
    pointers[0], pointers[7] = 4, pointers[7] + 6
    pointers.flush()

    def wrong_start(s: int) -> Problem:
        expected = pointers[s - 1] + 2 * lengths[s - 1]
        return problem(pair, "pointers", ".idx", f"sequence {s} starts at byte {pointers[s]}, expected {expected} "
                       f"(sequence {s - 1} starts at byte {pointers[s - 1]} with {lengths[s - 1]} tokens of 2 bytes)",
                       int(np.searchsorted(docs, s, side="right")) - 1, HEADER_SIZE + 4 * len(lengths) + 8 * s)

    assert (docs[0], docs[1]) == (0, 1)  # sequence 0 is document 0's, and sequence 1 is not
    assert of_check(checks(pair), "pointers") == [
        problem(pair, "pointers", ".idx", "sequence 0 starts at byte 4, not 0", 0, HEADER_SIZE + 4 * len(lengths)),
        *[wrong_start(s) for s in (1, 7, 8)]]


@IN_CHUNKS
@pytest.mark.parametrize("sequences", [15, 16])
def test_a_wrong_last_pointer_is_found_whatever_the_count(tmp_path: Path, monkeypatch, chunk, sequences: int) -> None:
    """The last pointer's step is its own chunk's when the pointers are two past a multiple of 7 (16), and shares
    one otherwise."""
    in_chunks(monkeypatch, chunk)
    write_pair(tmp_path / "p", [[np.arange(1, 4, dtype=np.uint16)] for _ in range(sequences)])
    _, pointers, _ = idx_arrays(tmp_path / "p")
    pointers[-1] += 2
    pointers.flush()
    assert [found.offset for found in of_check(checks(tmp_path / "p"), "pointers")] == [
        HEADER_SIZE + 4 * sequences + 8 * (sequences - 1)]


def locate(documents: list[list[np.ndarray]], position: int) -> tuple[int, int]:
    """(document, token inside it) of the token at ``position`` of the pair written from ``documents``."""
    ends = np.cumsum([sum(map(len, sequences)) for sequences in documents])
    document = int(np.searchsorted(ends, position, side="right"))
    return document, position - token_position(documents, document, 0)


def outside_vocabulary(pair: Path, documents: list[list[np.ndarray]], position: int, token: int) -> Problem:
    """The token-ids problem of ``token`` at ``position``: named by its document where one holds it."""
    total = sum(len(sequence) for sequences in documents for sequence in sequences)
    document, inside = locate(documents, position) if position < total else (None, None)
    where = f"{inside} of the document" if document is not None else f"{position} of the file"
    return problem(pair, "token-ids", ".bin", f"id {token} outside the vocabulary [0, {VOCAB}) at token {where}",
                   document, 2 * position)


@IN_CHUNKS
def test_ids_outside_the_vocabulary_are_named_by_document_and_place(pair: Path, documents, monkeypatch,
                                                                     chunk) -> None:
    """The file's first token, a document's last, and ids in tokens past the end the index gives (a padded
    ``.bin``): those lie in no document, so they are named by their place in the file."""
    in_chunks(monkeypatch, chunk)
    middle = nonempty(documents)[9]
    planted = [token_position(documents, nonempty(documents)[0], 0),
               token_position(documents, middle, sum(map(len, documents[middle])) - 1)]
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    total = len(tokens)
    tokens[planted] = VOCAB + 1
    tokens.flush()
    with open(f"{pair}.bin", "ab") as handle:
        handle.write(np.array([VOCAB + 1, 3, VOCAB + 1], dtype=np.uint16).tobytes())
    assert locate(documents, planted[1]) == (middle, sum(map(len, documents[middle])) - 1)
    assert of_check(checks(pair), "token-ids") == [outside_vocabulary(pair, documents, position, VOCAB + 1)
                                                   for position in [*planted, total, total + 2]]


@IN_CHUNKS
def test_the_cap_on_listed_problems_holds_across_chunks(pair: Path, documents, monkeypatch, chunk) -> None:
    """Ids out of range spread over several chunks of 7 tokens: the first three listed, the other four counted in
    one summary that quotes the first of them."""
    in_chunks(monkeypatch, chunk)
    positions = [2, 5, 9, 16, 17, 30, 44]
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[positions] = VOCAB
    tokens.flush()
    listed = [outside_vocabulary(pair, documents, position, VOCAB) for position in positions[:4]]
    summary = f"4 more token-ids problem(s) not listed; the first: {listed[3].message}"
    assert checks(pair, max_problems=3) == [*listed[:3], Problem(**{**listed[3].__dict__, "message": summary,
                                                                     "count": 4})]


@IN_CHUNKS
def test_a_bin_of_the_wrong_size_names_the_cut_document_or_none(pair: Path, documents, monkeypatch, chunk) -> None:
    """Cut inside a document (that document named, at the cut), padded past the index's end (no document: the
    tokens past it are nobody's), or missing."""
    in_chunks(monkeypatch, chunk)
    total = sum(len(sequence) for sequences in documents for sequence in sequences)

    def wrong_size(size: int, document: int | None) -> Problem:
        return problem(pair, "bin-size", ".bin", f"size {size} bytes disagrees with the index: {total} tokens x 2 "
                       f"bytes = {2 * total} (truncated, padded or mismatched pair)", document, min(size, 2 * total))

    cut = token_position(documents, nonempty(documents)[20], 3)
    data = Path(f"{pair}.bin").read_bytes()
    for size, document in ((2 * cut, nonempty(documents)[20]), (2 * total + 6, None)):
        Path(f"{pair}.bin").write_bytes((data + bytes(6))[:size])
        assert of_check(checks(pair), "bin-size") == [wrong_size(size, document)]
    Path(f"{pair}.bin").unlink()
    assert checks(pair) == [problem(pair, "bin-size", ".bin", "missing: the .idx exists but its .bin does not", None,
                                    None)]


def rewrite_sidecar(pair: Path, **changes) -> dict:
    """Rewrite the sidecar of ``pair`` with ``changes`` (a value of None removes its key); the new one."""
    meta = {key: value for key, value in {**sidecar.read(pair), **changes}.items() if value is not None}
    Path(f"{pair}.meta.json").write_text(json.dumps(meta))
    return meta


def sidecar_problem(pair: Path, message: str) -> Problem:
    return problem(pair, "sidecar", ".meta.json", message, None, None)


def test_each_count_the_sidecar_records_wrongly_is_named_with_both_values(pair: Path) -> None:
    meta = sidecar.read(pair)
    wrong = {key: meta[key] + 1 for key in ("num_sequences", "num_documents", "num_tokens", "num_empty_documents")}
    rewrite_sidecar(pair, dtype="int32", **wrong)
    assert checks(pair) == [sidecar_problem(pair, f"records {key}={value!r} but the files hold {meta[key]!r}")
                            for key, value in {"dtype": "int32", **wrong}.items()]


def test_special_ids_must_lie_below_the_vocabulary_size_given(pair: Path) -> None:
    """An EOD or BOS id equal to the vocabulary size given on the command line is one past its last id."""
    rewrite_sidecar(pair, bos_id=EOD - 1)
    assert of_check(checks(pair, vocab_size=EOD + 1), "sidecar") == []
    assert of_check(checks(pair, vocab_size=EOD - 1), "sidecar") == [
        sidecar_problem(pair, f"{key}={value} is outside the vocabulary [0, {EOD - 1})")
        for key, value in (("eod_id", EOD), ("bos_id", EOD - 1))]


def test_append_eod_needs_an_eod_id(pair: Path) -> None:
    rewrite_sidecar(pair, eod_id=None)
    assert checks(pair) == [sidecar_problem(pair, "append_eod is true but no EOD id is recorded (eod_id)")]


@pytest.mark.parametrize("vocab_size, fits", [(1 << 16, True), ((1 << 16) + 1, False)])
def test_the_dtype_must_hold_the_vocabulary_s_last_id(pair: Path, vocab_size: int, fits: bool) -> None:
    rewrite_sidecar(pair, vocab_size=vocab_size)
    expected = [] if fits else [sidecar_problem(pair, f"dtype uint16 cannot hold the ids of a {vocab_size}-token "
                                                      "vocabulary")]
    assert checks(pair) == expected


def test_a_tokenizer_file_changed_since_the_pair_was_written_is_a_problem(pair: Path, tmp_path: Path) -> None:
    """Compared when the record names a known type and the file is here; a record of another machine's file, of an
    unknown type, or without a fingerprint says nothing. The file is hashed again once it changes."""
    model = tmp_path / "tokenizer.json"
    model.write_text('{"model": {}}')
    fingerprint = sidecar.fingerprint_files([model])
    record = {"type": "HuggingFaceTokenizer", "model": str(model), "fingerprint": fingerprint}
    rewrite_sidecar(pair, tokenizer=record)
    assert checks(pair) == []
    model.write_text('{"model": {"edited": true}}')
    os.utime(model, ns=(0, model.stat().st_mtime_ns + 1))  # a new modification time, however coarse the clock
    changed = sidecar.fingerprint_files([model])
    assert checks(pair) == [sidecar_problem(
        pair, f"tokenizer.fingerprint is {fingerprint[:12]}… but {model} is {changed[:12]}…: the tokenizer file or the "
        "record changed since the pair was written; restore the tokenizer file (or the sidecar), or re-run corpus "
        "tokenize")]
    for elsewhere in ({"model": str(tmp_path / "gone.json")}, {"type": "NoSuchTokenizer"}, {"fingerprint": None}):
        rewrite_sidecar(pair, tokenizer={key: value for key, value in {**record, **elsewhere}.items()
                                         if value is not None})
        assert checks(pair) == [], elsewhere


def logged(caplog) -> list[str]:
    """The lines the checks logged."""
    return [record.getMessage() for record in caplog.records if record.name == "corpus.inspect.checks"]


def test_a_pair_without_a_vocabulary_size_says_its_ids_went_unchecked(tmp_path: Path, documents, caplog) -> None:
    write_pair(tmp_path / "p", documents)
    with caplog.at_level(logging.INFO, logger="corpus.inspect.checks"):
        assert checks(tmp_path / "p") == []
        assert logged(caplog) == [f"{tmp_path / 'p'}: token ids not checked: no vocabulary size known (no sidecar "
                                  "record; give --tokenizer-type/--tokenizer-model)"]
        caplog.clear()
        Path(f"{tmp_path / 'p'}.bin").unlink()
        checks(tmp_path / "p")
    assert logged(caplog) == []  # no tokens to check: the missing .bin is the problem


def test_eod_is_not_checked_in_a_broken_structure_and_the_log_says_so(pair: Path, caplog) -> None:
    _, pointers, _ = idx_arrays(pair)
    pointers[3] += 2
    pointers.flush()
    with caplog.at_level(logging.INFO, logger="corpus.inspect.checks"):
        assert {found.check for found in checks(pair)} == {"pointers"}
    assert logged(caplog) == [f"{pair}: EOD not checked: the index structure is broken (see the problems above)"]


@pytest.mark.parametrize("ending_in_eod", [1, 2, 5])
def test_append_eod_false_where_every_document_ends_with_eod_is_an_edit(tmp_path: Path, documents,
                                                                        ending_in_eod: int) -> None:
    """One document may end with EOD by itself (its text ends with the EOD string), all of several do not; empty
    documents are not counted."""
    chosen = [documents[d] for d in nonempty(documents)[:ending_in_eod]]
    write_pair(tmp_path / "p", [[], *chosen, []], {"vocab_size": VOCAB, "eod_id": EOD, "append_eod": False})
    expected = [] if ending_in_eod == 1 else [problem(
        tmp_path / "p", "eod", ".bin", f"append_eod is false but all {ending_in_eod} non-empty documents end with EOD "
        f"({EOD}): the sidecar was edited; set append_eod back to true (or re-run corpus tokenize)", None, None)]
    assert checks(tmp_path / "p") == expected


def test_deep_compares_each_recorded_checksum_and_only_deep_does(pair: Path) -> None:
    """Both the tree checksum and the plain sha256 older pairs record, each named; the .idx's still agree."""
    rewrite_sidecar(pair, checksums={**sidecar.read(pair)["checksums"],
                                     "bin_sha256": sidecar.fingerprint_files([f"{pair}.bin"])})
    assert checks(pair, deep=True) == []
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[0] = (int(tokens[0]) + 1) % EOD  # still a valid id, not an EOD: only the checksums tell
    tokens.flush()
    assert checks(pair) == []
    assert checks(pair, deep=True) == [problem(
        pair, "checksum", ".bin", f"sha256 differs from the one the sidecar records ({key}): the file changed after "
        "it was written; re-run corpus tokenize (or restore the file)", None, None) for key in ("bin_sha256_tree",
                                                                                                   "bin_sha256")]


def test_contents_unverified_names_the_files_no_recorded_checksum_covers(pair: Path) -> None:
    written = sidecar.read(pair)["checksums"]
    assert contents_unverified(f"{pair}.bin") == []
    rewrite_sidecar(pair, checksums={"idx_sha256_tree": written["idx_sha256_tree"]})
    assert contents_unverified(str(pair)) == ["bin"]
    rewrite_sidecar(pair, checksums=None)
    assert contents_unverified(str(pair)) == ["bin", "idx"]


def test_a_sidecar_that_contradicts_itself_is_a_sidecar_problem(pair: Path) -> None:
    rewrite_sidecar(pair, tokenizer={"eod": EOD - 1})
    [contradiction] = sidecar.contradictions(sidecar.read(pair))
    assert checks(pair) == [sidecar_problem(pair, contradiction)]


def test_a_header_problem_is_the_pair_s_only_one(pair: Path) -> None:
    """Without a sound header no array can be located: the error of reading it, and nothing else."""
    with open(f"{pair}.idx", "r+b") as handle:
        handle.write(b"NOTANIDX!")
    with pytest.raises(IndexFormatError) as raised:
        read_header(f"{pair}.idx")
    assert checks(pair) == [Problem(str(pair), "header", raised.value.path, raised.value.problem)]


def test_the_vocabulary_size_inside_the_tokenizer_record_bounds_the_ids(pair: Path, documents) -> None:
    """Sidecars that record it only there are still checked."""
    rewrite_sidecar(pair, vocab_size=None, tokenizer={"vocab_size": VOCAB})
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[0] = VOCAB + 3
    tokens.flush()
    assert checks(pair) == [outside_vocabulary(pair, documents, 0, VOCAB + 3)]


def test_special_ids_past_the_vocabulary_size_widen_the_ids_allowed(pair: Path) -> None:
    """A tokenizer whose EOD or BOS lies past its token count (cl100k with Llama-3's BOS) gives those ids: an id is
    outside only past the highest of them."""
    rewrite_sidecar(pair, vocab_size=EOD - 9)  # the EOD every document ends with lies 9 past the vocabulary
    assert checks(pair) == []
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[0] = EOD + 5
    tokens.flush()
    rewrite_sidecar(pair, bos_id=EOD + 5)
    assert checks(pair) == []
    tokens[0] = EOD + 6
    tokens.flush()
    assert [found.message.split(" at token")[0] for found in checks(pair)] == [
        f"id {EOD + 6} outside the vocabulary [0, {EOD + 6})"]


def test_without_reading_tokens_only_the_index_and_the_sidecar_are_checked(pair: Path) -> None:
    tokens = np.memmap(f"{pair}.bin", dtype=np.uint16, mode="r+")
    tokens[:3] = VOCAB
    tokens.flush()
    meta = rewrite_sidecar(pair, num_tokens=sidecar.read(pair)["num_tokens"] + 1)
    assert {found.check for found in checks(pair)} == {"token-ids", "sidecar"}
    assert checks(pair, read_tokens=False) == [sidecar_problem(
        pair, f"records num_tokens={meta['num_tokens']} but the files hold {meta['num_tokens'] - 1}")]
