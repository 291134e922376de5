"""The worker autotuner: candidate lists, the sample, steady-state windows, the recommendation, and real
sweeps on the example text (tiny samples and few candidates: the suite shares two cores)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus.autotune import trial as autotune_trial
from corpus.autotune.report import NOISE_FLOOR, Candidate, Run, recommend, run_rates
from corpus.autotune.sample import write_sample
from corpus.autotune.search import MAX_TRIALS, AutotuneConfig, autotune, default_workers, parse_candidates
from corpus.autotune.trial import TrialReport, _BatchClock, _DeadlineReached, _measure, run_trial, steady_window
from corpus.core.cores import available_cores
from corpus.core.errors import ConfigError, UserError
from corpus.readers import LinePayload, extract
from corpus.tokenize.stats import Counters
from tests.corpus.tokenize.support import TOKENIZER, WEB, config, hf_tokenizer

LINES = WEB.read_bytes().splitlines()


def tune(tmp_path: Path, inputs=(WEB,), **changes) -> AutotuneConfig:
    """A small sweep writing nowhere but ``tmp_path/scratch`` (checked empty by the tests)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    options = dict(workers_to_check=[1, 2], batch_sizes_to_check=[4], threads_per_worker_to_check=[1],
                   max_documents=40, repeats=1, temp_dir=str(scratch))
    options.update(changes)
    return AutotuneConfig(config(tmp_path, list(inputs), name="never/written"), **options)


def all_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*"))


# --- candidate lists ---------------------------------------------------------------------------------

def test_candidates_are_words_commas_or_both():
    assert parse_candidates(["1", "2,4", " 8 , 16"], "--workers-to-check") == [1, 2, 4, 8, 16]


def test_a_word_that_is_not_a_number_is_named():
    with pytest.raises(ConfigError, match=r"--workers-to-check: 'abc' is not a whole number"):
        parse_candidates(["1", "abc"], "--workers-to-check")


@pytest.mark.parametrize("field, values, message", [
    ("workers_to_check", [0], r"--workers-to-check: 0 is not allowed, every value must be at least 1"),
    ("threads_per_worker_to_check", [0], r"--threads-per-worker-to-check: 0 is not allowed, .* at least 1"),
    ("workers_to_check", [1, 2, 1], r"--workers-to-check: 1 given more than once"),
    ("workers_to_check", [available_cores() + 1], r"--workers-to-check: \d+ is too many: this process may use"),
    ("threads_per_worker_to_check", [available_cores() * 4], r"--threads-per-worker-to-check: \d+ is too many"),
    ("batch_sizes_to_check", [11], r"--batch-sizes-to-check: 11 is too many: a trial needs 4 batches"),
    ("workers_to_check", [], r"--workers-to-check: give at least one value"),
])
def test_bad_candidate_lists_are_refused_with_the_option_and_the_fix(tmp_path, field, values, message):
    with pytest.raises(ConfigError, match=message):
        tune(tmp_path, **{field: values})


def test_a_sweep_longer_than_sensible_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=rf"more than {MAX_TRIALS}; check fewer values"):
        tune(tmp_path, batch_sizes_to_check=list(range(1, MAX_TRIALS + 1)), max_documents=10_000)


@pytest.mark.parametrize("changes, message", [
    ({"max_documents": 0}, "--max-documents must be at least 1"),
    ({"time_budget": 0}, "--time-budget must be a positive number"),
    ({"repeats": -1}, "--repeats must be 0 or more"),
    ({"temp_dir": "/no/such/folder"}, "--temp-dir /no/such/folder: no such directory"),
])
def test_other_options_are_checked(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        tune(tmp_path, **changes)


def test_defaults_sweep_up_to_the_cores_and_fit_the_sample(tmp_path):
    assert default_workers(1) == [1] and default_workers(6) == [1, 2, 4, 6]
    assert default_workers(8) == [1, 2, 4, 8]
    chosen = AutotuneConfig(config(tmp_path, [WEB]), max_documents=2000)
    assert chosen.workers_to_check == default_workers(available_cores())
    assert chosen.threads_per_worker_to_check is None  # derived from the fastest worker count
    assert chosen.batch_sizes_to_check == [250]  # 1000 and 4000 cannot make 4 batches of 2000 documents
    assert AutotuneConfig(config(tmp_path, [WEB]), max_documents=100).batch_sizes_to_check == [25]


# --- the sample --------------------------------------------------------------------------------------

def test_the_sample_is_the_first_records_byte_for_byte(tmp_path):
    sample = write_sample(config(tmp_path, [WEB]), 10, tmp_path / "sample.jsonl")
    assert Path(sample.path).read_bytes() == b"".join(line + b"\n" for line in LINES[:10])
    assert (sample.documents, sample.bytes, sample.whole_input) == (10, sum(len(x) + 1 for x in LINES[:10]), False)
    whole = write_sample(config(tmp_path, [WEB]), 1000, tmp_path / "whole.jsonl")
    assert (whole.documents, whole.whole_input) == (len(LINES), True)


def test_parquet_rows_become_json_objects_the_pipeline_reads_back(tmp_path):
    texts = [json.loads(line)["text"] for line in LINES[:5]]
    titles = [f"title {i}" for i in range(5)]
    table = pa.table({"text": texts, "meta": pa.array([{"title": t, "n": 1} for t in titles])})
    pq.write_table(table, tmp_path / "in.parquet")
    sample = write_sample(config(tmp_path, [tmp_path / "in.parquet"], json_keys=["text", "meta.title"]), 100,
                          tmp_path / "sample.jsonl")
    lines = Path(sample.path).read_bytes().splitlines()
    extracted = extract(LinePayload(lines), ["text", "meta.title"])
    assert extracted.texts == [texts, titles] and not extracted.bad and sample.whole_input


# --- measurement -------------------------------------------------------------------------------------

def test_the_steady_window_leaves_out_warm_up_and_drain():
    assert steady_window(12, 2, finished=True) == (1, 9)
    assert steady_window(12, 2, finished=False) == (1, 11)  # stopped at its deadline: no drain
    assert steady_window(4, 1, finished=True) == (0, 2)
    assert steady_window(7, 2, finished=True) is None


def test_rates_come_from_the_window_only():
    # batches of 10 docs / 1000 bytes / 100 tokens: the first ends at t=10 (start-up), the next eight
    # take 1 s each, the last (the drain) ends at t=100
    points = [(10.0 + i, 10 * (i + 1), 1000 * (i + 1), 100 * (i + 1)) for i in range(9)]
    points.append((100.0, 100, 10_000, 1000))
    run = run_rates(TrialReport(points, True, 100.0, 50.0, 0, launched=4.0), workers=1)
    assert (run.docs_per_s, run.mb_per_s, run.tokens_per_s) == (10.0, 0.001, 100.0)
    assert (run.timed_s, run.startup_s, run.peak_rss_mb) == (8.0, 6.0, 100.0)
    assert run_rates(TrialReport(points, True, 100.0, 50.0, 0), workers=2).peak_rss_mb == 150.0
    assert run_rates(TrialReport(points[:3], True, 1.0, 1.0, 0), workers=1) is None


def rate(mb_per_s: float, rss: float = 100.0) -> Run:
    return Run(mb_per_s * 10, mb_per_s, mb_per_s * 1000, rss, 5.0, 1.0)


def test_fewest_workers_win_within_noise():
    runs = {Candidate(8, 1000, 1): [rate(100), rate(96), rate(104)],  # 8% spread
            Candidate(4, 1000, 1): [rate(95)], Candidate(2, 1000, 1): [rate(80)],
            Candidate(2, 1000, 2): [rate(94)]}
    rows, best, noise, noise_runs = recommend(runs)
    assert noise == pytest.approx(0.08) and noise_runs == 3
    assert [(r.workers, r.threads_per_worker) for r in rows] == [(8, 1), (4, 1), (2, 2), (2, 1)]
    assert [r.within_noise for r in rows] == [True, True, True, False]
    assert (best.workers, best.threads_per_worker) == (2, 2) and best is rows[2]


def test_noise_is_never_below_the_floor_and_ties_go_to_less_memory():
    runs = {Candidate(2, 1000, 1): [rate(100, rss=900), rate(100, rss=950)], Candidate(2, 250, 1): [rate(99, rss=500)],
            Candidate(1, 1000, 1): [rate(90)]}
    rows, best, noise, _ = recommend(runs)
    assert noise == NOISE_FLOOR
    assert (best.batch_size, best.peak_rss_mb) == (250, 500) and rows[0].peak_rss_mb == 950


# --- real sweeps -------------------------------------------------------------------------------------

def default_threads(workers: int) -> int:
    """What corpus tokenize --workers N uses without --threads-per-worker."""
    return config(Path("."), [WEB], threads_per_worker=None).threads_for(workers)


def test_the_recommendation_is_a_configuration_it_measured_and_nothing_is_left(tmp_path):
    before = all_files(WEB.parent)
    result = autotune(tune(tmp_path, workers_to_check=[1, 2], batch_sizes_to_check=[4, 8]))
    measured = {(r.workers, r.batch_size, r.threads_per_worker) for r in result.trials}
    assert (result.best.workers, result.best.batch_size, result.best.threads_per_worker) in measured
    assert {(1, 4, default_threads(1)), (2, 4, default_threads(2))} <= measured  # each worker count, its default
    assert measured <= {(w, b, t) for w in (1, 2) for b in (4, 8) for t in {1, default_threads(w)}}
    assert result.best in result.trials and result.best.within_noise
    assert [r.mb_per_s for r in result.trials] == sorted((r.mb_per_s for r in result.trials), reverse=True)
    assert all(r.docs_per_s > 0 and r.tokens_per_s > r.docs_per_s and r.peak_rss_mb > 0 and r.startup_s > 0
               for r in result.trials)
    assert sum(r.runs for r in result.trials) == len(result.trials) + 1  # the fastest again, for the noise
    assert (result.best_config.workers, result.best_config.batch_size) == (result.best.workers, result.best.batch_size)
    assert json.loads(json.dumps(result.to_dict()))["best"] == result.best.to_dict()
    assert all_files(tmp_path / "scratch") == [] and not (tmp_path / "never").exists()
    assert all_files(WEB.parent) == before


def test_a_sample_too_small_for_every_candidate_says_how_to_fix_it(tmp_path):
    expected = (r"nothing could be measured:\n  workers=2 batch_size=4 threads_per_worker=\d+: "
                r"the sample's 16 documents "
                r"make 4 batch\(es\) of 4, and 2 worker\(s\) need 8 or more \(check batch sizes of 2 or less or raise "
                r"--max-documents\)$")
    with pytest.raises(UserError, match=expected):
        autotune(tune(tmp_path, max_documents=16, batch_sizes_to_check=[4], workers_to_check=[2]))
    assert all_files(tmp_path / "scratch") == []


def test_candidates_the_sample_cannot_feed_are_listed_not_dropped(tmp_path):
    result = autotune(tune(tmp_path, max_documents=20, workers_to_check=[2], batch_sizes_to_check=[2, 5], repeats=0))
    assert {(r.workers, r.batch_size) for r in result.trials} == {(2, 2)}
    [(candidate, reason)] = result.not_measured
    assert (candidate.workers, candidate.batch_size) == (2, 5)
    assert reason == ("the sample's 20 documents make 4 batch(es) of 5, and 2 worker(s) need 8 or more "
                      "(check batch sizes of 2 or less or raise --max-documents)")
    assert f"not measured: {candidate}: {reason}" in result.report()


@pytest.mark.slow  # measures every candidate in worker processes
def test_a_tiny_time_budget_still_measures_every_candidate(tmp_path):
    result = autotune(tune(tmp_path, workers_to_check=[1], repeats=0, time_budget=0.001))
    assert {(r.workers, r.threads_per_worker) for r in result.trials} == {(1, 1), (1, default_threads(1))}
    assert all(r.timed_s > 0 and r.mb_per_s > 0 for r in result.trials)
    assert result.not_measured == [] and all_files(tmp_path / "scratch") == []


def test_the_deadline_stops_a_trial_only_after_a_steady_window():
    clock = _BatchClock(workers=2, deadline=0.0)  # long past
    for records in range(1, 6):
        clock(Counters(records_read=records), 1000)
    clock(Counters(records_read=5), 1000)  # a batch without records (a slice's end) is no point
    with pytest.raises(_DeadlineReached):
        clock(Counters(records_read=6), 1000)
    assert len(clock.points) == 6 and steady_window(6, 2, finished=False) == (1, 5)


def test_a_failing_trial_is_reported_and_cleaned_up(tmp_path):
    broken = tmp_path / "tokenizer.json"
    broken.write_text(TOKENIZER.read_text()[:1000])
    tuned = tune(tmp_path, repeats=0)
    tuned.tokenize = tuned.tokenize.replace(tokenizer=hf_tokenizer(model=str(broken)))
    expected = r"the trial workers=1 batch_size=4 threads_per_worker=\d+ failed:\n.*tokenizer.json: not a valid"
    with pytest.raises(UserError, match=expected):
        autotune(tuned)
    assert all_files(tmp_path / "scratch") == []


def test_worker_memory_is_the_workers_own_not_what_the_trial_held_when_it_started_them(tmp_path):
    """A trial process holding 600 MB starts its pool: the worker's peak RSS is its own VmHWM, not the
    child maxrss that starts at the parent's size (what RUSAGE_CHILDREN reported)."""
    ballast = bytearray(600 * 2**20)  # touched: resident in this process before the pool starts
    ballast[::4096] = b"x" * len(ballast[::4096])
    report = _measure(config(tmp_path, [WEB], workers=2, batch_size=8), deadline=None)
    assert report.finished and 5 < report.worker_rss_mb < 400
    assert report.main_rss_mb > 600
    del ballast


def test_a_ctrl_c_while_a_trial_starts_still_kills_it(tmp_path, monkeypatch):
    """The signal lands inside Popen, after its fork (CI once left such a trial running, an orphan)."""
    started, real_popen = [], subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        process = real_popen(*args, **kwargs)
        started.append(process.pid)
        signal.raise_signal(signal.SIGINT)
        return process

    monkeypatch.setattr(autotune_trial.subprocess, "Popen", popen_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, however pytest runs
    try:
        with pytest.raises(KeyboardInterrupt):
            run_trial(config(tmp_path, [WEB], workers=1, batch_size=8), deadline=None)
    finally:
        signal.signal(signal.SIGINT, previous)
    stat = Path(f"/proc/{started[0]}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # gone (or a zombie)
