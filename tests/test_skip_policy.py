"""``--only-allowed-skips`` (tests/skip_policy.py): a run fails on a skip for any reason but missing hardware, names
each one, and passes when only allowed ones remain; without the flag skips are left alone. Each case is a pytest
run of its own on a small file of tests, as ``.ci/run`` runs the suite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

TESTS = '''
import pytest

@pytest.mark.skipif(True, reason="needs CUDA")
def test_on_a_gpu():
    pass

@pytest.mark.skipif(True, reason="needs Transformer Engine and a CUDA GPU")
def test_with_te():
    pass

def test_plain():
    pass
'''
HIDDEN = '''

def test_a_figure():
    pytest.importorskip("no_such_plotting_package", reason="the plot extra is not installed")

@pytest.mark.skipif(True, reason="CUDA is nice to have")  # "needs CUDA" must start the reason
def test_loosely_worded():
    pass
'''


def _pytest(tmp_path, source: str, *flags: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.skip_policy", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *flags, str(tmp_path)],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("flagged", [True, False])
def test_skips_for_missing_hardware_pass(tmp_path, flagged):
    result = _pytest(tmp_path, TESTS, *(["--only-allowed-skips"] if flagged else []))
    assert result.returncode == 0, result.stdout
    assert "1 passed, 2 skipped" in result.stdout and "not allowed" not in result.stdout


def test_any_other_skip_fails_the_run_and_is_named(tmp_path):
    result = _pytest(tmp_path, TESTS + HIDDEN, "--only-allowed-skips")
    assert result.returncode == 1, result.stdout
    assert "2 tests skipped for a reason not allowed" in result.stdout
    named = [line for line in result.stdout.splitlines() if line.startswith("test_sample.py::")]
    assert named == ["test_sample.py::test_a_figure: the plot extra is not installed",
                     "test_sample.py::test_loosely_worded: CUDA is nice to have"]
    assert _pytest(tmp_path, TESTS + HIDDEN).returncode == 0  # without the flag, skips are pytest's business
