"""Progress reporting without a terminal: periodic log lines with rates and an ETA."""

from __future__ import annotations

import logging

from corpus.tokenize.progress import Progress
from corpus.tokenize.stats import Counters


def test_log_lines_report_percentage_rates_and_eta(caplog):
    progress = Progress(total_bytes=4_000_000, start=Counters(tokens={"text": 0}), quiet=False, log_interval=1e-9,
                        label="web")
    assert progress.bar is None  # pytest's stderr is not a terminal
    with caplog.at_level(logging.INFO, logger="corpus.tokenize.run"):
        progress.update(Counters(records_read=1500, input_bytes=1_000_000, tokens={"text": 250_000}))
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("web: 25.0% of 4.0 MB, 1,500 records") and "tokens/s" in line and "ETA" in line
    progress.close()


def test_quiet_logs_nothing(caplog):
    progress = Progress(4_000_000, Counters(tokens={"text": 0}), quiet=True, log_interval=1e-9, label="web")
    with caplog.at_level(logging.INFO, logger="corpus.tokenize.run"):
        progress.update(Counters(records_read=10, input_bytes=10, tokens={"text": 5}))
    assert not caplog.records
