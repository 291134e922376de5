"""How workers start: forked by a server that has the modules imported, yet with the run's environment, their log
records logged by the run, and gone as soon as the run is gone, though the run is not their parent."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection

import zstandard

from corpus.tokenize.pool import PartPool
from corpus.tokenize.processes import PRELOADED, adopt_environment, die_with_the_run, worker_context
from tests.conftest import REPO
from tests.corpus.tokenize.support import TOKENIZER, sample_records

PROBE = "BLENDFORGE_TEST_PROBE"


def report_probe(connection: Connection, environment: dict[str, str] | None) -> None:
    """A worker's body: take ``environment`` (None: keep the server's) and say what the probe variable is."""
    if environment is not None:
        adopt_environment(environment)
    connection.send(os.environ.get(PROBE))


def probe_in_worker(environment: dict[str, str] | None) -> str | None:
    context = worker_context()
    mine, theirs = context.Pipe()
    worker = context.Process(target=report_probe, args=(theirs, environment))
    worker.start()
    theirs.close()
    try:
        return mine.recv()
    finally:
        worker.join()


def test_workers_are_forked_by_a_server_that_imports_what_they_run():
    assert worker_context().get_start_method() == "forkserver"
    for name in PRELOADED:  # a renamed module would silently leave every worker importing it again
        __import__(name)


def test_a_worker_has_the_environment_of_its_run_not_the_one_the_server_started_with(monkeypatch):
    probe_in_worker(None)  # the server is running now, with this environment
    monkeypatch.setenv(PROBE, "this run's")
    assert probe_in_worker(None) is None  # what a worker that did not take its run's environment would see
    assert probe_in_worker(dict(os.environ)) == "this run's"


#: A run that starts one worker which only waits, prints the worker's pid, then waits too.
RUN = """
import sys, time
from corpus.tokenize.processes import die_with_the_run, worker_context

def wait_forever():
    die_with_the_run()
    time.sleep(3600)

if __name__ == "__main__":
    worker = worker_context().Process(target=wait_forever, daemon=True)
    worker.start()
    print(worker.pid, flush=True)
    time.sleep(3600)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_dies_with_its_run_though_the_server_is_its_parent(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(RUN)
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        worker = int(run.stdout.readline())
        with open(f"/proc/{worker}/stat") as stat:
            assert int(stat.read().rsplit(")", 1)[1].split()[1]) != run.pid  # the server forked it
        os.kill(run.pid, signal.SIGKILL)  # the run alone, as the kernel's OOM killer would
        run.wait()
        deadline = time.monotonic() + 60
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not alive(worker)
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)  # whatever is left of the test's processes
        except ProcessLookupError:
            pass
        run.wait()


def session(leader: int) -> dict[int, int]:
    """The live processes of the session ``leader`` started (a run in a session of its own: its workers, the server
    that forked them), each with its parent."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, parent, _, session_id = stat.read().rsplit(")", 1)[1].split()[:4]
        except (FileNotFoundError, ProcessLookupError):  # it ended since the listing
            continue
        if int(session_id) == leader and state != "Z":
            found[int(entry)] = int(parent)
    return found


def test_the_encoder_workers_of_a_compressed_stream_die_with_their_run(tmp_path):
    """One ``.zst`` stream cannot be cut into parts, so a pool of encoder processes encodes its batches: the run
    killed alone (as the kernel's OOM killer does) leaves none of them, nor the server that forked them, behind."""
    text = "".join(json.dumps(record) + "\n" for record in sample_records()) * 150
    source = tmp_path / "in.jsonl.zst"
    source.write_bytes(zstandard.ZstdCompressor().compress(text.encode()))
    command = [sys.executable, "-m", "cli.corpus", "tokenize", "--input", str(source), "--output-prefix",
               str(tmp_path / "out"), "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(TOKENIZER),
               "--workers", "2", "--quiet"]
    run = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while (len([pid for pid, parent in session(run.pid).items() if parent not in (1, run.pid)]) < 2
               and run.poll() is None and time.monotonic() < deadline):
            time.sleep(0.005)
        assert run.poll() is None, "the run ended before its two encoder workers were up"
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 30
        while session(run.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not session(run.pid)
    finally:
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.wait()


def test_watching_the_run_is_nothing_in_the_runs_own_process():
    die_with_the_run()  # no parent run here: must neither raise nor kill this process
    assert alive(os.getpid())


def test_a_workers_log_records_are_logged_by_the_run(caplog):
    """Not written to the stderr of the server that forked the worker (an earlier run's, in a long-lived process)."""
    caplog.set_level(logging.DEBUG, logger="corpus.tokenize.pool")
    pool = PartPool(1)
    try:
        while not any(event.kind == "ready" for event in pool.events(5)):
            pass
    finally:
        pool.close()
    worker = pool.processes[0].pid
    assert [record.levelno for record in caplog.records
            if record.getMessage().startswith(f"worker process {worker}: ready")] == [logging.DEBUG]
