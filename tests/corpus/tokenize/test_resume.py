"""Interrupted runs: ``--resume`` after an exception, after ``kill -9`` at several points and during
finalization ends with exactly the bytes of an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import corpus.indexed.writer
import corpus.tokenize.part
from corpus.core.disk import OutputError
from corpus.tokenize.errors import ResumeError
from corpus.tokenize.resume_state import state_path
from corpus.tokenize.run import tokenize
from tests.conftest import REPO
from tests.corpus.tokenize.support import CODE, TOKENIZER, WEB, FullDisk, config, kill_when, output_bytes

KEYS = ["text", "title"]
INPUTS = [WEB, CODE]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    stats = tokenize(config(folder, INPUTS, json_keys=["text"], on_error="skip", batch_size=3))
    return output_bytes(folder / "out", ["text"]), stats.counters


def interrupt_after(monkeypatch, batches: int, checkpoint_every: int) -> None:
    """Stop the run with KeyboardInterrupt after ``batches`` batches were written, checkpointing only
    every ``checkpoint_every`` batches so data past the last checkpoint is on disk when it stops."""
    writing = corpus.tokenize.part.PartWriting
    original_consume, original_checkpoint = writing.consume, writing.checkpoint
    calls = {"consume": 0, "checkpoint": 0}

    def consume(self, batch, result):
        original_consume(self, batch, result)
        calls["consume"] += 1
        if calls["consume"] == batches:
            raise KeyboardInterrupt

    def checkpoint(self, resume, phase="running"):
        calls["checkpoint"] += 1
        if phase != "running" or (calls["checkpoint"] - 1) % checkpoint_every == 0:
            original_checkpoint(self, resume, phase)

    monkeypatch.setattr(corpus.tokenize.part.PartWriting, "consume", consume)
    monkeypatch.setattr(corpus.tokenize.part.PartWriting, "checkpoint", checkpoint)


@pytest.mark.parametrize("batches", [1, 5, 17, 40])
def test_resume_after_an_interruption_is_byte_identical(tmp_path, monkeypatch, uninterrupted, batches):
    run = config(tmp_path, INPUTS, json_keys=["text"], on_error="skip", batch_size=3, checkpoint_interval=0)
    with monkeypatch.context() as patch:
        interrupt_after(patch, batches, checkpoint_every=3)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    assert state_path(str(tmp_path / "out")).exists() and not (tmp_path / "out_text_document.idx").exists()
    stats = tokenize(run.replace(resume=True))
    expected_bytes, expected_counters = uninterrupted
    assert output_bytes(tmp_path / "out", ["text"]) == expected_bytes
    assert stats.counters == expected_counters and stats.resumed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out_text_document.bin", "out_text_document.idx",
                                                         "out_text_document.meta.json"]


@pytest.mark.parametrize("failing_rename", [1, 2, 3, 4])
def test_a_crash_while_renaming_outputs_into_place_resumes(tmp_path, monkeypatch, uninterrupted, failing_rename):
    run = config(tmp_path, INPUTS, json_keys=["text"], on_error="skip", batch_size=3)
    real_replace, calls = os.replace, {"n": 0}

    def replace(source, target):
        calls["n"] += 1
        if calls["n"] == failing_rename:
            raise KeyboardInterrupt
        real_replace(source, target)

    with monkeypatch.context() as patch:
        patch.setattr(corpus.indexed.writer.os, "replace", replace)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", ["text"]) == uninterrupted[0]
    assert not state_path(str(tmp_path / "out")).exists()


@pytest.mark.parametrize("suffix, share", [(".bin.partial", 0.5), (".lengths.partial", 0.5), (".idx.partial", 0),
                                           (".meta.json", 0)])
def test_a_full_disk_is_one_line_naming_the_file_and_resume_completes(tmp_path, monkeypatch, uninterrupted, suffix,
                                                                      share):
    """The disk fills up while writing tokens, a spill buffer, the index or the sidecar: one line naming the file,
    the space and the fix; once space is freed, --resume ends with the bytes of an uninterrupted run."""
    run = config(tmp_path, INPUTS, json_keys=["text"], on_error="skip", batch_size=3, checkpoint_interval=0)
    sizes = {".bin.partial": len(uninterrupted[0]["text.bin"]),
             ".lengths.partial": 4 * uninterrupted[1].records_written}
    with monkeypatch.context() as patch:
        disk = FullDisk(suffix, int(share * sizes.get(suffix, 0))).install(patch)
        with pytest.raises(OutputError) as raised:
            tokenize(run)
    message = str(raised.value)
    assert disk.failures == 1 and "\n" not in message
    assert message.startswith(f"cannot write {tmp_path / 'out'}_text_document{suffix}: No space left on device (")
    assert "free space and rerun the same command with --resume" in message and "--output-prefix" in message
    if suffix == ".bin.partial":
        assert "needed" in message  # estimated from the input still to read
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", ["text"]) == uninterrupted[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out_text_document.bin", "out_text_document.idx",
                                                         "out_text_document.meta.json"]


def test_resume_refuses_changed_options_and_inputs(tmp_path, monkeypatch):
    source = tmp_path / "in.jsonl"
    source.write_bytes(WEB.read_bytes())
    run = config(tmp_path, [source], json_keys=["text"], batch_size=3, checkpoint_interval=0)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 4, checkpoint_every=1)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    with pytest.raises(ResumeError, match="append_eod changed"):
        tokenize(run.replace(resume=True, append_eod=False))
    with source.open("a") as handle:
        handle.write('{"text": "appended later"}\n')
    with pytest.raises(ResumeError, match="inputs changed"):
        tokenize(run.replace(resume=True))


def test_a_checkpoint_of_an_older_layout_is_refused_with_the_way_out(tmp_path, monkeypatch):
    run = config(tmp_path, INPUTS, json_keys=["text"], batch_size=3, checkpoint_interval=0)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 4, checkpoint_every=1)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    state = state_path(run.output_prefix)
    state.write_text(json.dumps({**json.loads(state.read_text()), "version": 1}))
    with pytest.raises(ResumeError, match="checkpoint version 1 is not 2; start again without --resume"):
        tokenize(run.replace(resume=True))


def test_without_resume_a_new_run_replaces_the_interrupted_one(tmp_path, monkeypatch, uninterrupted):
    run = config(tmp_path, INPUTS, json_keys=["text"], on_error="skip", batch_size=3, checkpoint_interval=0)
    with monkeypatch.context() as patch:
        interrupt_after(patch, 6, checkpoint_every=1)
        with pytest.raises(KeyboardInterrupt):
            tokenize(run)
    stats = tokenize(run)
    assert not stats.resumed and output_bytes(tmp_path / "out", ["text"]) == uninterrupted[0]


def cli_command(prefix: Path, *extra: str) -> list[str]:
    inputs = [str(p) for p in (WEB, CODE, WEB, CODE)]
    return [sys.executable, "-m", "cli.corpus", "tokenize", "--input", *inputs, "--output-prefix", str(prefix),
            "--json-keys", *KEYS, "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(TOKENIZER),
            "--append-eod", "--on-error", "skip", "--batch-size", "2", "--checkpoint-interval", "0", "--quiet", *extra]


def kill_after_records(command: list[str], state: Path, records: int) -> None:
    """Start the CLI and SIGKILL its whole process group once a checkpoint has passed ``records``."""

    def passed() -> bool:
        try:
            return json.loads(state.read_text())["counters"]["records_read"] >= records
        except (FileNotFoundError, ValueError, KeyError):
            return False

    kill_when(command, passed, timeout=300)


@pytest.fixture(scope="module")
def cli_uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_whole")
    subprocess.run(cli_command(folder / "out", "--workers", "1"), env={**os.environ, "PYTHONPATH": str(REPO)},
                   check=True, capture_output=True)
    return output_bytes(folder / "out", KEYS)


def kill_and_resume(tmp_path: Path, records: int, workers: str) -> dict[str, bytes]:
    prefix = tmp_path / "out"
    kill_after_records(cli_command(prefix, "--workers", workers), state_path(str(prefix)), records)
    assert not Path(f"{prefix}_text_document.idx").exists()
    subprocess.run(cli_command(prefix, "--workers", workers, "--resume"), env={**os.environ, "PYTHONPATH": str(REPO)},
                   check=True, capture_output=True)
    return output_bytes(prefix, KEYS)


@pytest.mark.parametrize("records, workers", [(10, "0"), (10, "1"), pytest.param(150, "2", marks=pytest.mark.slow)])
def test_kill_9_then_resume_is_byte_identical(tmp_path, cli_uninterrupted, records, workers):
    assert kill_and_resume(tmp_path, records, workers) == cli_uninterrupted


@pytest.mark.slow
@pytest.mark.parametrize("records", [0, 2, 30, 61, 90, 123, 170, 200, 240])
def test_kill_9_at_many_points_then_resume_is_byte_identical(tmp_path, cli_uninterrupted, records):
    assert kill_and_resume(tmp_path, records, "1") == cli_uninterrupted


def test_resume_of_a_finished_run_is_a_no_op(tmp_path, uninterrupted):
    run = config(tmp_path, INPUTS, json_keys=["text"], on_error="skip", batch_size=3)
    tokenize(run)
    written = (tmp_path / "out_text_document.bin").stat().st_mtime_ns
    stats = tokenize(run.replace(resume=True))
    assert stats.counters == uninterrupted[1] and stats.resumed
    assert (tmp_path / "out_text_document.bin").stat().st_mtime_ns == written
    changed = tokenize(run.replace(resume=True, append_eod=False))
    assert not changed.resumed and changed.counters.total_tokens < stats.counters.total_tokens
