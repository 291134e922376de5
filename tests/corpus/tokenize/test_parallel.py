"""Runs of several parts written by several processes: byte for byte the output of one process for every input
kind, bad records at their true lines, kills and resumes, dying workers, no part left behind."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from collections import deque
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from corpus.core.disk import OutputError
from corpus.core.errors import UserError
from corpus.indexed.append import file_tree_digest
from corpus.tokenize import resume_state
from corpus.tokenize.errors import BadRecordError, WorkerDied
from corpus.tokenize.join import Joiner, parts_folder
from corpus.tokenize.parallel import _Run
from corpus.tokenize.run import tokenize
from tests.conftest import REPO
from tests.corpus.tokenize.support import (
    FullDisk,
    config,
    hf_tokenizer,
    kill_when,
    output_bytes,
    sample_records,
    write_jsonl,
)

KEYS = ["text", "title"]
#: Parts of a few tens of kB: the example text makes a dozen or more.
SMALL_PARTS = 40_000


def records(bad: bool = False) -> list:
    """The example records with a title each; with ``bad``, a few bad records spread through them."""
    rows: list = [{"text": r["text"], "title": f"record {i}"} for i, r in enumerate(sample_records())]
    if bad:
        rows[9] = {"text": 7, "title": "a number"}
        rows[70] = {"title": "no text"}
        rows[101] = "not an object"
    return rows


def jsonl_lines(rows: list) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def make_inputs(folder: Path, kind: str) -> list[Path]:
    """The inputs of one kind, written into ``folder``."""
    folder.mkdir()
    rows = records(bad=kind == "jsonl with bad records")
    if kind in ("one jsonl", "jsonl with bad records"):
        return [write_jsonl(folder / "all.jsonl", rows)]
    if kind == "many jsonl, blank lines, no last newline":
        paths = [write_jsonl(folder / f"in{i}.jsonl", rows[i::5]) for i in range(5)]
        paths[1].write_bytes(paths[1].read_bytes().replace(b"\n", b"\n\n", 3))
        paths[4].write_bytes(paths[4].read_bytes().rstrip(b"\n"))
        (folder / "in5_empty.jsonl").write_bytes(b"")
        write_jsonl(folder / "in6_one.jsonl", rows[:1])
        return [*paths, folder / "in5_empty.jsonl", folder / "in6_one.jsonl"]
    if kind == "gz and zst files":
        paths = []
        for i in range(4):
            data = jsonl_lines(rows[i::4])
            path = folder / (f"in{i}.jsonl.gz" if i % 2 else f"in{i}.jsonl.zst")
            path.write_bytes(gzip.compress(data) if i % 2 else zstandard.ZstdCompressor().compress(data))
            paths.append(path)
        return paths
    if kind == "parquet":
        path = folder / "rows.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=12)
        return [path]
    raise AssertionError(kind)


KINDS = ["one jsonl", "jsonl with bad records", "many jsonl, blank lines, no last newline", "gz and zst files",
         "parquet"]


@pytest.fixture(scope="module", params=KINDS)
def one_process(request, tmp_path_factory):
    """The inputs of a kind and what one process writes from them (outputs, skipped list, counters)."""
    folder = tmp_path_factory.mktemp("one")
    inputs = make_inputs(folder / "in", request.param)
    stats = tokenize(config(folder, inputs, json_keys=KEYS, workers=1, on_error="skip"))
    skipped = folder / "out.skipped.jsonl"
    checksums = json.loads((folder / "out_text_document.meta.json").read_text())["checksums"]
    return request.param, inputs, output_bytes(folder / "out", KEYS), skipped.read_bytes() if skipped.exists() \
        else None, stats.counters, checksums


@pytest.mark.parametrize("workers, batch_size, threads", [(3, 1000, None), (2, 7, 2)])
def test_parts_are_the_bytes_of_one_process(tmp_path, one_process, workers, batch_size, threads):
    kind, inputs, expected, skipped, counters, checksums = one_process
    stats = tokenize(config(tmp_path, inputs, json_keys=KEYS, workers=workers, batch_size=batch_size,
                            threads_per_worker=threads, on_error="skip", min_part_bytes=SMALL_PARTS))
    assert stats.parts > workers and stats.processes == workers
    assert output_bytes(tmp_path / "out", KEYS) == expected
    assert stats.counters == counters
    assert (tmp_path / "out.skipped.jsonl").read_bytes() == skipped if skipped else \
        not (tmp_path / "out.skipped.jsonl").exists()
    meta = json.loads((tmp_path / "out_text_document.meta.json").read_text())
    assert meta["records"]["read"] == counters.records_read and meta["checksums"] == checksums
    assert checksums["bin_sha256_tree"] == file_tree_digest(tmp_path / "out_text_document.bin")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith((".bin", ".idx", ".meta.json"))) == \
        (["out.skipped.jsonl"] if skipped else [])


def test_a_shard_in_parts_is_the_shard_of_one_process(tmp_path):
    """A machine's shard starting inside a file, cut into parts: same bytes and the same true line numbers."""
    source = write_jsonl(tmp_path / "all.jsonl", records(bad=True))
    shard = {"shard_index": 1, "num_shards": 2, "json_keys": KEYS, "on_error": "skip"}
    tokenize(config(tmp_path, [source], name="one", workers=1, **shard))
    stats = tokenize(config(tmp_path, [source], name="parts", workers=3, min_part_bytes=SMALL_PARTS, **shard))
    assert stats.parts > 3
    assert output_bytes(tmp_path / "parts-00001-of-00002", KEYS) == output_bytes(tmp_path / "one-00001-of-00002",
                                                                                 KEYS)
    skipped = (tmp_path / "parts-00001-of-00002.skipped.jsonl").read_text()
    assert skipped == (tmp_path / "one-00001-of-00002.skipped.jsonl").read_text()
    assert [json.loads(line)["line"] for line in skipped.splitlines()] == [71, 102]


def test_a_bad_record_in_a_later_part_stops_the_run_at_its_true_line(tmp_path):
    rows = records()
    rows[100] = {"text": 3, "title": "late"}
    rows[110] = "not an object"
    source = write_jsonl(tmp_path / "all.jsonl", rows)
    with pytest.raises(BadRecordError, match=r"all\.jsonl:101: key 'text' is a JSON number") as raised:
        tokenize(config(tmp_path, [source], json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS))
    assert raised.value.location == {"file": str(source), "line": 101}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.jsonl"]  # no output, no checkpoint, no parts


def test_a_bad_first_record_stops_the_workers_started_beside_the_tokenizer(tmp_path):
    """The workers start in a thread while the run builds its tokenizer and reads its first records: a refusal
    there stops every worker already started."""
    rows = records()
    rows[0] = {"title": "no text"}
    source = write_jsonl(tmp_path / "all.jsonl", rows)
    with pytest.raises(BadRecordError, match=r"all\.jsonl:1: "):
        tokenize(config(tmp_path, [source], json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS))
    assert not [p for p in multiprocessing.active_children() if p.name == "blendforge-part-worker"]


def test_an_ignored_tokenizer_option_is_warned_about_once_however_many_processes(tmp_path, caplog):
    """Every worker builds the tokenizer from the run's config, and their records are logged by the run: the option
    the tokenizer type ignores is said once, by the run, not once more per process."""
    source = write_jsonl(tmp_path / "all.jsonl", records())
    tokenizer = hf_tokenizer(vocab_file=str(source))
    tokenize(config(tmp_path, [source], json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS, tokenizer=tokenizer))
    warned = [r for r in caplog.records if "--vocab-file is not used by --tokenizer-type" in r.getMessage()]
    assert len(warned) == 1


def test_a_run_hashes_its_tokenizer_files_once_however_many_checkpoints(tmp_path, monkeypatch):
    """Every checkpoint records the run's fingerprint, which holds the sha256 of the tokenizer's files: made once,
    it never holds up the thread that hands the workers their parts (the files would be hashed at every part)."""
    from corpus.tokenizers import base

    hashed = []
    monkeypatch.setattr(base, "fingerprint_files", lambda paths: hashed.append(list(paths)) or "fingerprint")
    source = write_jsonl(tmp_path / "all.jsonl", records())
    stats = tokenize(config(tmp_path, [source], json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS,
                            checkpoint_interval=0))
    assert stats.parts > 3
    assert len(hashed) == 1


def test_while_the_input_is_checked_the_first_part_waits_for_this_process():
    """Only this process holds the reference library, so the check of a run's first records needs its thread to
    write the first part, however fast a worker process asks; without a check, parts go in order to whoever asks."""
    run = object.__new__(_Run)
    run.failures, run.waiting, run.first_for_this_process = {}, deque([2, 3, 4]), True
    assert [run.next_part(local=False), run.next_part(local=False)] == [3, 4]
    assert run.next_part(local=False) is None  # only the first is left: kept
    assert run.next_part(local=True) == 2
    run.waiting, run.first_for_this_process = deque([5, 6]), False
    assert [run.next_part(local=False), run.next_part(local=True)] == [5, 6]
    assert run.next_part(local=True) is None
    run.waiting, run.failures = deque([7]), {6: BadRecordError({"file": "a", "line": 1}, "bad", "p")}
    assert run.next_part(local=True) is None  # a failing run starts nothing more


def test_of_bad_records_in_parts_written_at_once_the_first_in_the_input_is_reported():
    """Parts run side by side, so a later part can fail first; the run waits for the parts before it, which may
    hold an earlier bad record, and names the first in input order. (End to end the example text is encoded
    before a second process starts: the order of failures cannot be forced there.)"""
    run = object.__new__(_Run)
    late, early = BadRecordError({"file": "a", "line": 90}, "late", "p"), BadRecordError({"file": "a", "line": 9},
                                                                                          "early", "p")
    run.failures, run.running = {5: late}, {3: 1, 4: 2}
    assert run.first_failure() is None  # parts 3 and 4 may hold an earlier one
    run.running = {4: 2}
    run.failures[4] = early
    run.running = {}
    assert run.first_failure() is early
    run.failures, run.running = {5: late}, {7: 1}
    assert run.first_failure() is late  # a later part still running cannot hold an earlier record


def run_in_process(tmp_path: Path, inputs: list[Path], **options) -> list[str]:
    """A command running ``tokenize`` in a process of its own (to be killed), quiet, small parts."""
    values = {"inputs": [str(p) for p in inputs], "output_prefix": str(tmp_path / "out"), "json_keys": KEYS,
              "append_eod": True, "quiet": True, "on_error": "skip", "sample_records": 16,
              "tokenizer": config(tmp_path, inputs).tokenizer.__dict__, **options}
    code = ("import json, sys\nfrom corpus.tokenize.config import config_from_mapping\n"
            "from corpus.tokenize.run import tokenize\n"
            f"tokenize(config_from_mapping(json.loads({json.dumps(json.dumps(values))})))\n")
    return [sys.executable, "-c", code]


def joined(prefix: Path) -> int:
    try:
        return json.loads(resume_state.state_path(str(prefix)).read_text())["joined"]
    except (FileNotFoundError, ValueError, KeyError):
        return -1


def parts_in_phase(prefix: Path, phase: str) -> int:
    """How many parts are ``running`` (being written: files but no record of being done), ``checkpointed``
    (being written, with a checkpoint recorded) or ``done``."""
    recorded: dict[str, str] = {}
    for path in parts_folder(str(prefix)).glob("*.tokenize-state.json"):
        try:
            recorded[path.name[:5]] = json.loads(path.read_text())["phase"]
        except (OSError, ValueError):
            pass
    if phase == "running":
        started = {path.name[:5] for path in parts_folder(str(prefix)).glob("*.bin.partial")}
        return len({part for part in started if recorded.get(part) != "done"})
    return sum(value == {"checkpointed": "running"}.get(phase, phase) for value in recorded.values())


@pytest.fixture(scope="module")
def killed_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("killed")
    rows = records(bad=True)
    inputs = [write_jsonl(folder / f"in{i}.jsonl", rows * 2) for i in range(3)]
    tokenize(config(folder, inputs, json_keys=KEYS, workers=1, on_error="skip"))
    return inputs, output_bytes(folder / "out", KEYS), (folder / "out.skipped.jsonl").read_bytes()


@pytest.mark.parametrize("point", ["a part written", "parts done, none joined", "parts joined"])
def test_kill_9_then_resume_is_byte_identical(tmp_path, killed_inputs, point):
    inputs, expected, skipped = killed_inputs
    prefix = tmp_path / "out"
    options = {"workers": 3, "min_part_bytes": SMALL_PARTS, "checkpoint_interval": 0 if point == "parts joined"
               else 3600, "batch_size": 4}
    ready = {"a part written": lambda: any(parts_folder(str(prefix)).glob("*.bin.partial")),
             "parts done, none joined": lambda: parts_in_phase(prefix, "done") >= 2,
             "parts joined": lambda: joined(prefix) >= 2}[point]
    kill_when(run_in_process(tmp_path, inputs, **options), ready)
    assert not (tmp_path / "out_text_document.idx").exists()
    subprocess.run(run_in_process(tmp_path, inputs, **options, resume=True), check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    assert output_bytes(prefix, KEYS) == expected
    assert (tmp_path / "out.skipped.jsonl").read_bytes() == skipped
    assert not parts_folder(str(prefix)).exists() and not resume_state.state_path(str(prefix)).exists()


def test_a_dying_worker_stops_the_run_and_resume_finishes_it(tmp_path, killed_inputs):
    inputs, expected, _ = killed_inputs
    run = config(tmp_path, inputs, json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS, on_error="skip",
                 batch_size=4)
    killed = []

    def kill_the_workers(counters, rss_kb) -> None:
        """Once two parts are being written, one of them by a spawned worker (this process writes one at a time)."""
        if not killed and parts_in_phase(tmp_path / "out", "running") >= 2:
            for worker in multiprocessing.active_children():
                if worker.name == "blendforge-part-worker":
                    killed.append(worker.pid)
                    os.kill(worker.pid, signal.SIGKILL)

    with pytest.raises(WorkerDied, match=r"worker process \d+, exit code -9.*--resume"):
        tokenize(run, on_batch=kill_the_workers)
    assert killed and not [p for p in multiprocessing.active_children() if p.name == "blendforge-part-worker"]
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", KEYS) == expected


def test_a_full_disk_in_a_run_of_parts_is_one_line_and_resume_completes(tmp_path, monkeypatch, killed_inputs):
    """The disk refuses this process's part (the workers' are other processes): one line naming the file, the space
    and the fix, every process stopped; once space is freed, --resume ends with the bytes of one process."""
    inputs, expected, _ = killed_inputs
    run = config(tmp_path, inputs, json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS, on_error="skip")
    with monkeypatch.context() as patch:
        disk = FullDisk(".lengths.partial", 100).install(patch)
        with pytest.raises(OutputError) as raised:
            tokenize(run)
    message = str(raised.value)
    assert disk.failures == 1 and "\n" not in message and "No space left on device" in message
    assert "rerun the same command with --resume" in message and "--output-prefix" in message
    assert not [p for p in multiprocessing.active_children() if p.name == "blendforge-part-worker"]
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", KEYS) == expected


def interrupted_once(tmp_path: Path, inputs: list[Path], phase: str, parts: int, **options):
    """A run of parts stopped (Ctrl-C) once ``parts`` parts are in ``phase`` (see :func:`parts_in_phase`), joining
    none of them (a joined part's files are deleted); by default no part records a running checkpoint
    (``checkpoint_interval`` 3600). Returns its config."""
    run = config(tmp_path, inputs, json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS, on_error="skip",
                 **{"checkpoint_interval": 3600, **options})

    def stop(*_) -> None:
        if parts_in_phase(tmp_path / "out", phase) >= parts:
            raise KeyboardInterrupt

    offered: set[int] = set()

    def never_join(joiner: Joiner, index: int, result) -> None:  # a part done is a moment to look too
        stop()
        offered.add(index)
        assert len(offered) < len(joiner.parts), f"every part ended before {parts} parts were {phase}"

    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(Joiner, "offer", never_join)
        tokenize(run, on_batch=stop)
    return run


def test_a_part_that_cannot_resume_stops_the_run_with_its_own_message(tmp_path, killed_inputs):
    """A worker's error whose class cannot be rebuilt from a pickle still reaches the run, message and all."""
    run = interrupted_once(tmp_path, killed_inputs[0], "checkpointed", 2, checkpoint_interval=0, batch_size=4)
    for state in parts_folder(str(tmp_path / "out")).glob("*.tokenize-state.json"):
        if json.loads(state.read_text())["phase"] == "running":
            Path(str(state).replace(".tokenize-state.json", "_text_document.bin.partial")).unlink()
            break
    else:
        raise AssertionError("no part recorded a running checkpoint")
    with pytest.raises(UserError, match=r"_text_document\.bin\.partial: cannot resume: this partial file is missing"):
        tokenize(run.replace(resume=True))


def test_a_done_part_damaged_before_the_resume_is_written_again(tmp_path, killed_inputs):
    """A part marked done but whose files no longer hold what it wrote (the machine went down before the page
    cache reached the disk) is written again, not joined."""
    expected = killed_inputs[1]
    run = interrupted_once(tmp_path, killed_inputs[0], "done", 3)
    done = [Path(str(state).replace(".tokenize-state.json", "_text_document.bin.partial"))
            for state in parts_folder(str(tmp_path / "out")).glob("*.tokenize-state.json")
            if json.loads(state.read_text())["phase"] == "done"]
    damaged = max(done, key=lambda path: path.stat().st_size)  # a part of bad records only has no tokens
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", KEYS) == expected


def test_a_part_is_deleted_as_soon_as_it_is_joined(tmp_path, killed_inputs, monkeypatch):
    """The parts never take much more disk than those being written: each goes once its bytes are in the outputs,
    not at the next checkpoint (here never) or the end."""
    joins, left = [], []
    original = Joiner._join

    def join_and_look(self, part, result) -> None:
        original(self, part, result)
        joins.append(part.index)
        left.extend(parts_folder(self.stage).glob(f"{part.index:05d}[._]*"))

    monkeypatch.setattr(Joiner, "_join", join_and_look)
    inputs, expected, _ = killed_inputs
    tokenize(config(tmp_path, inputs, json_keys=KEYS, workers=3, min_part_bytes=SMALL_PARTS, on_error="skip",
                    checkpoint_interval=3600))
    assert len(joins) > 2 and left == []
    assert output_bytes(tmp_path / "out", KEYS) == expected


def test_an_unreadable_record_of_a_done_part_means_writing_it_again(tmp_path, killed_inputs, caplog):
    """A part's record of being done is not synced: a machine that goes down may leave it empty."""
    run = interrupted_once(tmp_path, killed_inputs[0], "done", 2)
    record = next(state for state in parts_folder(str(tmp_path / "out")).glob("*.tokenize-state.json")
                  if json.loads(state.read_text())["phase"] == "done")
    record.write_text("")
    tokenize(run.replace(resume=True))
    assert output_bytes(tmp_path / "out", KEYS) == killed_inputs[1]
    assert f"its checkpoint {record} is unreadable (the machine went down?); writing the part again" in caplog.text
