"""The tree passes the linter configured in pyproject.toml (``[tool.ruff]``: one line length, import order,
pyflakes), so CI holds every change to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_tree_passes_ruff():
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(REPO)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
