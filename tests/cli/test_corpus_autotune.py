"""``corpus autotune-workers`` end to end: the JSON a machine reads, the command it prints (which must
run as is), bad candidate lists, and Ctrl-C / SIGTERM in the middle of a trial."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.corpus import main
from corpus.indexed import IndexedReader
from tests.conftest import REPO, assert_exited, run_cli
from tests.corpus.tokenize.support import TOKENIZER, WEB

SOURCE = ["--input", str(WEB), "--append-eod", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
          str(TOKENIZER)]
SMALL = ["--max-documents", "40", "--batch-sizes-to-check", "4", "--threads-per-worker-to-check", "1"]


@pytest.mark.slow  # a whole autotune measurement, then the tokenize command it prints, in fresh processes
def test_json_recommends_a_measured_configuration_and_its_command_runs(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    prefix = tmp_path / "out dir" / "web"
    result = run_cli("corpus", "autotune-workers", *SOURCE, *SMALL, "--workers-to-check", "1,2", "--repeats", "1",
                     "--output-prefix", str(prefix), "--temp-dir", str(scratch), "--json")
    report = json.loads(result.stdout)
    assert report["best"] in report["trials"]
    keys = {"workers", "batch_size", "threads_per_worker", "docs_per_s", "mb_per_s", "tokens_per_s", "peak_rss_mb"}
    assert all(keys <= set(trial) for trial in report["trials"])
    assert {(t["workers"], t["batch_size"]) for t in report["trials"]} == {(1, 4), (2, 4)}
    best = report["best"]
    words = shlex.split(report["command"])
    assert words[:2] == ["corpus", "tokenize"] and words[2:9] == SOURCE
    assert words[9:] == ["--output-prefix", str(prefix), "--workers", str(best["workers"]), "--batch-size", "4",
                         "--threads-per-worker", str(best["threads_per_worker"])]
    assert list(scratch.iterdir()) == [] and not prefix.parent.exists()
    run_cli("corpus", *words[1:])
    assert IndexedReader(f"{prefix}_text_document").num_documents == len(WEB.read_text().splitlines())


def test_the_table_marks_the_best_and_prints_the_command(tmp_path):
    result = run_cli("corpus", "autotune-workers", *SOURCE, *SMALL, "--workers-to-check", "1", "--repeats", "0",
                     env={"TMPDIR": str(tmp_path)})  # the default place: the system's temporary folder
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["workers", "batch", "size", "threads", "docs/s", "MB/s", "tokens/s", "peak", "RSS",
                                "MB", "start", "s", "runs"]
    [best] = [line.split() for line in lines if line.endswith("<- best")]
    assert best[:2] == ["1", "4"]
    assert "noise: 2.0% (assumed: no configuration was run twice)" in result.stdout
    command = lines[lines.index("run:") + 1].strip()
    assert command.startswith("corpus tokenize --input") and command.endswith(
        f"--output-prefix OUTPUT_PREFIX --workers 1 --batch-size 4 --threads-per-worker {best[2]}")
    assert "trial 1: workers=1 batch_size=4" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("values, message", [
    (["0"], "--workers-to-check: 0 is not allowed, every value must be at least 1"),
    (["abc"], "--workers-to-check: 'abc' is not a whole number (give e.g. --workers-to-check 1 2 4 8)"),
    (["1", "2", "1"], "--workers-to-check: 1 given more than once; list each value once"),
    (["1,2,2"], "--workers-to-check: 2 given more than once"),
    (["100000"], "--workers-to-check: 100000 is too many: this process may use"),
])
def test_bad_candidate_lists_are_clear_errors(values, message):
    result = CliRunner().invoke(main, ["autotune-workers", *SOURCE, "--workers-to-check", *values])
    assert_exited(result, 1)
    assert f"Error: {message}" in result.output


def _session_of(pid: int) -> tuple[int, str] | None:
    """(session id, state) of a process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return int(fields[3]), fields[0]


def _trial_process(parent: int) -> int | None:
    """The running trial process (a child of ``parent`` in a session of its own), if any."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[1]) == parent and int(stat[3]) == int(entry.name):
                return int(entry.name)
    return None


def _wait_for(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the trial's processes")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_trial_leaves_no_file_and_no_process(tmp_path, signum):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = [sys.executable, "-m", "cli.corpus", "autotune-workers", *SOURCE, "--max-documents", "60",
               "--batch-sizes-to-check", "2", "4", "--workers-to-check", "1", "2", "--repeats", "2",
               "--temp-dir", str(scratch)]
    # NOTE: SIGINT at its default, as from a terminal: a shell starts background jobs (a CI runner's pytest,
    # say) with SIGINT ignored, and Python then keeps ignoring it
    process = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        trial = _wait_for(lambda: _trial_process(process.pid), "a trial process")
        _wait_for(lambda: list(scratch.glob("corpus-autotune-*/trial-*")), "a trial folder")
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted: the trials were stopped and their temporary files removed" in err
    assert "Traceback" not in err and out == ""
    assert list(scratch.iterdir()) == []
    survivors = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                 if (state := _session_of(pid)) and state[0] == trial and state[1] != "Z"]
    assert survivors == []
