"""How a run shares out the cores it may use between the library threads of the processes at work: one each when a
process per core writes parts, every core for a process alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.tokenize import config as tokenize_config
from tests.corpus.tokenize.support import WEB, config


@pytest.mark.parametrize("cores, busy, threads", [(16, 1, 16), (2, 1, 2), (1, 1, 1), (16, 16, 1), (16, 4, 4),
                                                  (16, 3, 5)])
def test_the_cores_are_shared_out_between_the_processes_at_work(monkeypatch, cores, busy, threads):
    monkeypatch.setattr(tokenize_config, "available_cores", lambda: cores)
    assert config(Path("."), [WEB], threads_per_worker=None).threads_for(busy) == threads


def test_threads_asked_for_are_taken_as_they_are(monkeypatch):
    monkeypatch.setattr(tokenize_config, "available_cores", lambda: 16)
    assert config(Path("."), [WEB], threads_per_worker=16).threads_for(1) == 16
