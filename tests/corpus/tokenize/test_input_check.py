"""The user's input checked against the reference library while the run proceeds: a difference stops the
run before anything is final, names the records, and sends later runs to the reference."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

from corpus.indexed import IndexedReader
from corpus.tokenize import resume_state
from corpus.tokenize.errors import EncoderMismatch
from corpus.tokenize.run import tokenize
from corpus.tokenizers import select_encoder
from corpus.tokenizers.gigatoken import GigatokenTextTokenizer
from tests.corpus.tokenize.support import config, hf_tokenizer, sample_records, write_jsonl

pytestmark = pytest.mark.skipif(find_spec("gigatoken") is None, reason="gigatoken is not installed")

PLANTED = "a record the fast encoder gets wrong"


@pytest.fixture(autouse=True)
def own_checks(tmp_path, monkeypatch):
    """A cache folder of this test's own (the spawned reference process inherits it)."""
    monkeypatch.setenv("BLENDFORGE_TOKENIZER_CHECKS_DIR", str(tmp_path / "cache"))


def _plant_a_difference(monkeypatch) -> None:
    """The fast encoder (in this process) writes one id off for texts holding PLANTED."""
    original = GigatokenTextTokenizer._encode_batch_flat

    def wrong(self, texts):
        flat, lengths = original(self, texts)
        flat = flat.astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        for index, text in enumerate(texts):
            if PLANTED in text:
                flat[starts[index]] += 1
        return flat, lengths

    monkeypatch.setattr(GigatokenTextTokenizer, "_encode_batch_flat", wrong)


@pytest.mark.parametrize("cached", [False, True], ids=["first run", "cached check, --check-input"])
def test_a_difference_stops_the_run_before_anything_is_final(tmp_path, monkeypatch, cached):
    records = sample_records(12)
    records[4] = {"text": PLANTED + " " + records[4]["text"]}
    source = write_jsonl(tmp_path / "in.jsonl", records)
    if cached:
        tokenize(config(tmp_path, [source], name="first"))  # caches the tokenizer's check
    _plant_a_difference(monkeypatch)
    run = config(tmp_path, [source], checkpoint_interval=0, check_input=cached)
    with pytest.raises(EncoderMismatch, match=rf"{source}:5 \(key text, text '{PLANTED}") as error:
        tokenize(run)
    assert "Nothing was written" in str(error.value) and "--encoder reference" in str(error.value)
    assert not list(tmp_path.glob("out_*")), "an output was renamed into place"
    assert not resume_state.state_path(run.output_prefix).exists()
    tokenizer, reason = select_encoder(hf_tokenizer())
    assert tokenizer.encoder_name.startswith("tokenizers ")
    assert f"gigatoken ids differed from the reference library at {source}:5 in an earlier run" in reason


def test_in_a_run_of_parts_a_difference_stops_every_process_and_leaves_nothing(tmp_path, monkeypatch):
    """The parts run in several processes; the first part, written by this one, is the one checked."""
    records = sample_records(12)
    records[4] = {"text": PLANTED + " " + records[4]["text"]}
    source = write_jsonl(tmp_path / "in.jsonl", records)
    _plant_a_difference(monkeypatch)
    run = config(tmp_path, [source], workers=2, min_part_bytes=source.stat().st_size // 2, check_input=True)
    with pytest.raises(EncoderMismatch, match=rf"{source}:5 \(key text"):
        tokenize(run)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache", "in.jsonl"]


def test_the_sidecar_says_what_was_checked(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", sample_records(40))
    stats = tokenize(config(tmp_path, [source], sample_records=8))
    meta = IndexedReader(f"{tmp_path}/out_text_document").meta
    assert meta["encoder"].startswith("gigatoken ")
    assert "input check: ids identical to the reference on the first 8 records" in meta["encoder_reason"]
    assert stats.encoder_reason == meta["encoder_reason"]


def test_worker_processes_are_checked_too(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", sample_records(30))
    tokenize(config(tmp_path, [source], workers=2, batch_size=4))
    assert "input check: ids identical" in IndexedReader(f"{tmp_path}/out_text_document").meta["encoder_reason"]


def test_no_check_without_the_fast_encoder(tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", sample_records(5))
    tokenize(config(tmp_path, [source], tokenizer=hf_tokenizer(encoder="reference")))
    assert "input check" not in IndexedReader(f"{tmp_path}/out_text_document").meta["encoder_reason"]


def test_a_cached_check_skips_the_input_check_unless_asked(tmp_path):
    """The first run loads the reference (its check is not cached) and checks its input beside the run; a
    later one does not load it unless --check-input asks."""
    source = write_jsonl(tmp_path / "in.jsonl", sample_records(10))
    reasons = []
    for name, check_input in (("first", False), ("second", False), ("third", True)):
        tokenize(config(tmp_path, [source], name=name, check_input=check_input))
        reasons.append(IndexedReader(f"{tmp_path}/{name}_text_document").meta["encoder_reason"])
    assert "input check: ids identical" in reasons[0] and "cached check" not in reasons[0]
    assert "cached check" in reasons[1] and "input check" not in reasons[1]
    assert "cached check" in reasons[2] and "input check: ids identical" in reasons[2]
