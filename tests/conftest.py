"""Shared fixtures. megatron-core is the conformance reference: import it once per test process
(it costs seconds and warns about missing GPU extras)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Real tokenizer files (tokenizer_files) and megatron-core's tokenizers (megatron_tokenizer).
pytest_plugins = ["tests.tokenizer_files"]


@pytest.fixture(scope="session")
def megatron_indexed():
    """megatron.core.datasets.indexed_dataset, imported once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset


def run_cli(program: str, *args: str, cwd: Path | None = None, check: bool = True, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``corpus``/``trainer`` exactly as a user would, in a fresh process."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    result = subprocess.run(
        [sys.executable, "-m", f"cli.{program}", *args],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{program} {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result
