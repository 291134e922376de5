"""Running checks of hand-written Triton kernels in fresh processes: on the CPU under Triton's interpreter
(``TRITON_INTERPRET`` must be set before Triton is first imported), or on CUDA as compiled.

The interpreter checks of a test session run together: one process imports torch and Triton once, then forks a
child per check, so each check still starts from freshly imported modules (several change their module's tiling
table) at the cost of one start-up. Register a check with :func:`interpreter_check` where it is defined;
``tests/conftest.py`` starts the selected tests' checks in the background once collection ends
(:func:`start_interpreter_checks`), and :func:`run_kernel_check` waits for its check's result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]  # NOTE: not tests.conftest's, so the GPU cases run with --noconftest

#: The marks of a parameter case that runs on CUDA: a ``gpu`` test, skipped without a GPU.
ON_CUDA = (pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))

#: ``interpret`` for a test parametrized over both places a kernel check runs (the CUDA one is a ``gpu`` test).
INTERPRETER_AND_CUDA = [pytest.param(True, id="interpreter"), pytest.param(False, id="cuda", marks=ON_CUDA)]

#: Seconds one check may take (under the interpreter or on CUDA).
CHECK_TIMEOUT = 300

#: Each registered interpreter check and the name of the test module that registered it, in order.
_REGISTERED: dict[str, str] = {}
#: The interpreter result of each check run so far: "" where it printed ``ok``, else what went wrong.
_RESULTS: dict[str, str] = {}


class _Batch:
    """Interpreter checks running in one fresh process (see :func:`_serve`), started at construction."""

    def __init__(self, codes: list[str]) -> None:
        self.codes = codes
        self._folder = tempfile.TemporaryDirectory()
        checks, self._results = Path(self._folder.name, "checks.json"), Path(self._folder.name, "results.json")
        checks.write_text(json.dumps(codes))
        self._stderr = open(Path(self._folder.name, "stderr"), "w+")  # a file: a pipe nobody reads could fill up
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.trainer.kernels.triton_support", str(checks), str(self._results)],
            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1"},
            stdout=subprocess.DEVNULL, stderr=self._stderr)

    def collect(self) -> None:
        """Wait for the process and record each check's result."""
        try:
            self._process.wait(timeout=CHECK_TIMEOUT * len(self.codes))
            self._stderr.seek(0)
            assert self._process.returncode == 0 and self._results.exists(), self._stderr.read()[-3000:]
            _RESULTS.update(zip(self.codes, json.loads(self._results.read_text())))
        finally:
            self.stop()

    def stop(self) -> None:
        """End the process if it still runs, and remove its files."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._stderr.close()
        self._folder.cleanup()
        if self in _BATCHES:
            _BATCHES.remove(self)


#: Batches started and not yet collected.
_BATCHES: list[_Batch] = []


def interpreter_check(code: str) -> str:
    """Register ``code`` (a kernel check, see :func:`run_kernel_check`) to run under Triton's interpreter together
    with the session's other checks; returns ``code``. Call it at the top level of the test module."""
    _REGISTERED.setdefault(code, sys._getframe(1).f_globals["__name__"])
    return code


def start_interpreter_checks(modules: set[str]) -> None:
    """Start, in the background, every registered check of the test modules named in ``modules`` (those of the
    tests selected) that has no result yet; nothing where Triton is not installed."""
    import importlib.util

    codes = [code for code, module in _REGISTERED.items() if module in modules and code not in _RESULTS
             and not any(code in batch.codes for batch in _BATCHES)]
    if codes and importlib.util.find_spec("triton") is not None:
        _BATCHES.append(_Batch(codes))


def stop_interpreter_checks() -> None:
    """End every batch nobody collected (a session that stopped early)."""
    for batch in list(_BATCHES):
        batch.stop()


def run_kernel_check(code: str, interpret: bool) -> None:
    """Run ``code`` (which prints ``ok`` when every check passed) in a fresh interpreter of this repository, with
    ``DEVICE`` defined as where it runs (``cpu`` under the interpreter, else ``cuda``); skipped where Triton is
    not installed. Under the interpreter: its result from the batch that ran it, or from a new batch of it and
    every registered check not yet run."""
    pytest.importorskip("triton")
    if interpret:
        if code not in _RESULTS:
            batch = next((batch for batch in _BATCHES if code in batch.codes), None)
            if batch is None:
                pending = [check for check in _REGISTERED if check not in _RESULTS and check != code
                           and not any(check in started.codes for started in _BATCHES)]
                batch = _Batch([*pending, code])
                _BATCHES.append(batch)
            batch.collect()
        assert not _RESULTS[code], _RESULTS[code]
        return
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", f"DEVICE = 'cuda'\n{code}"], env=env, capture_output=True,
                            text=True, timeout=CHECK_TIMEOUT)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def _serve(checks: Path, results: Path) -> None:
    """Import torch and Triton once, then run each check of ``checks`` (a JSON list of code) in a forked child
    with ``DEVICE = "cpu"``; write to ``results`` what each one reported ("" for ``ok``)."""
    import triton  # noqa: F401  (imported before the fork: the children share it)

    reports = []
    for code in json.loads(checks.read_text()):
        reading, writing = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(reading)
            _child(code, writing)
        os.close(writing)
        with os.fdopen(reading) as pipe:
            report = pipe.read()
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        reports.append(report if code == 0 else f"{report}\nthe check exited with {code}")
    results.write_text(json.dumps(reports))


def _child(code: str, writing: int) -> None:
    """In a forked child: run ``code``, write "" to ``writing`` if it printed only ``ok``, else what it printed and
    its traceback; never return."""
    import contextlib
    import io
    import traceback

    printed = io.StringIO()
    try:
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(code, "<kernel check>", "exec"), {"DEVICE": "cpu", "__name__": "__kernel_check__"})
            report = "" if printed.getvalue().strip() == "ok" else f"printed {printed.getvalue()!r}, not 'ok'"
        except BaseException:  # any failure is the check's result
            report = f"{printed.getvalue()}{traceback.format_exc()}"[-3000:]
        with os.fdopen(writing, "w") as pipe:
            pipe.write(report)
    finally:
        os._exit(0 if "report" in locals() else 1)


def assert_cast_matches(got: torch.Tensor, amax: torch.Tensor, want: torch.Tensor, want_amax: torch.Tensor,
                        dtype: torch.dtype, device: str, same_bytes: bool) -> None:
    """A kernel's scaled, saturating cast (and its amax) against the tensor code's, inside a kernel check: on
    CUDA the same bytes (``same_bytes``) or, where the kernel may fuse a multiply-add the tensor code rounds
    twice, rarely one FP8 step apart; under the interpreter (which rounds fp32 -> bf16 towards zero) within
    two bf16 steps."""
    assert got.dtype == dtype and got.shape == want.shape and amax.shape == ()
    assert got.float().abs().max() == torch.finfo(dtype).max  # saturated, not inf
    if device == "cuda" and same_bytes:
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)) and torch.equal(amax, want_amax)
        return
    if device == "cuda":
        step = 2.0 ** -2 if dtype == torch.float8_e5m2 else 2.0 ** -3
        assert (got.view(torch.uint8) != want.view(torch.uint8)).float().mean() < 1e-3
        torch.testing.assert_close(got.float(), want.float(), rtol=step, atol=0)
    else:
        torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=0)
    torch.testing.assert_close(amax, want_amax, rtol=2 ** -7, atol=0)


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), Path(sys.argv[2]))
