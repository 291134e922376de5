"""``run_ahead``: a pipeline stage in a thread keeps order, bounds its lead, re-raises errors in place
and stops (closing its upstream) when the consumer stops."""

from __future__ import annotations

import threading
import time

import pytest

from corpus.tokenize.ahead import run_ahead


def test_results_come_in_order_and_chained_stages_compose():
    doubled = run_ahead(iter(range(100)), lambda x: 2 * x, name="double")
    assert list(run_ahead(doubled, lambda x: x + 1, name="inc")) == [2 * x + 1 for x in range(100)]


def test_the_stage_runs_at_most_depth_items_ahead():
    produced = []

    def slow_source():
        for item in range(50):
            produced.append(item)
            yield item

    stage = run_ahead(slow_source(), lambda x: x, depth=2)
    assert next(stage) == 0
    time.sleep(0.3)  # time for the thread to run ahead as far as it may
    assert len(produced) <= 1 + 2 + 1  # consumed + queued + one being put
    stage.close()


def test_an_error_is_raised_at_its_place_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise ValueError("bad record")

    stage = run_ahead(source(), lambda x: x)
    assert next(stage) == 1 and next(stage) == 2
    with pytest.raises(ValueError, match="bad record"):
        next(stage)


def test_an_error_in_the_transform_is_raised_in_the_consumer():
    stage = run_ahead(iter([1, 0, 3]), lambda x: 1 // x)
    assert next(stage) == 1
    with pytest.raises(ZeroDivisionError):
        next(stage)


def test_closing_stops_the_thread_and_closes_the_upstream():
    closed = threading.Event()

    def endless():
        try:
            item = 0
            while True:
                yield item
                item += 1
        finally:
            closed.set()

    before = threading.active_count()
    stage = run_ahead(endless(), lambda x: x, name="endless")
    assert [next(stage) for _ in range(5)] == [0, 1, 2, 3, 4]
    stage.close()
    assert closed.is_set() and threading.active_count() == before
