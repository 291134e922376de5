"""Fixtures of the FP8 tests."""

from __future__ import annotations

import pytest

from trainer.fp8 import backends


@pytest.fixture
def fp8_capable(monkeypatch):
    """Pretend this CPU has FP8 tensor cores (torch._scaled_mm runs on CPU), so the whole path is exercised."""
    monkeypatch.setattr(backends, "check_hardware", lambda device: None)
