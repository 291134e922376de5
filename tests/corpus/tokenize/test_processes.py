"""How workers start: forked by a server that has the modules imported, yet with the run's environment, their log
records logged by the run, and gone as soon as the run is gone, though the run is not their parent."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from corpus.tokenize.pool import PartPool, _die_with_the_run
from corpus.tokenize.processes import PRELOADED, adopt_environment, worker_context
from tests.conftest import REPO

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
from corpus.tokenize.pool import PartPool, _die_with_the_run
from corpus.tokenize.processes import worker_context

def wait_forever():
    _die_with_the_run()
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


def test_watching_the_run_is_nothing_in_the_runs_own_process():
    _die_with_the_run()  # no parent run here: must neither raise nor kill this process
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
