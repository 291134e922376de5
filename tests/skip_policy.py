"""Which skipped tests a full run accepts (a pytest plugin): ``--only-allowed-skips`` makes the run fail when a test
was skipped for any reason but the hardware CI lacks. A skip for a missing package hides a feature from every run
that lacks it; ``.ci/run`` installs what the tests need and passes this flag, so such a skip is a failure there."""

from __future__ import annotations

import pytest

#: The only reasons a test may be skipped in a run with ``--only-allowed-skips`` (a reason must start with one).
ALLOWED_SKIP_REASONS = ("needs CUDA", "needs Transformer Engine")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--only-allowed-skips", action="store_true",
                     help=f"fail the run when a test is skipped for a reason other than {ALLOWED_SKIP_REASONS}")


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped test's report gives (pytest stores it as ``(file, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


def disallowed_skips(reports: list[pytest.TestReport]) -> list[str]:
    """``nodeid: reason`` of each skip whose reason is not allowed."""
    return [f"{report.nodeid}: {skip_reason(report)}" for report in reports
            if not skip_reason(report).startswith(ALLOWED_SKIP_REASONS)]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--only-allowed-skips"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    refused = disallowed_skips([r for r in reporter.stats.get("skipped", []) if isinstance(r, pytest.TestReport)])
    if refused:
        reporter.write_sep("=", f"{len(refused)} tests skipped for a reason not allowed", red=True)
        for line in refused:
            reporter.write_line(line)
        reporter.write_line(f"allowed: reasons starting with {' or '.join(map(repr, ALLOWED_SKIP_REASONS))} "
                            "(tests/skip_policy.py); install what the others need: pip install -e '.[test]'")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
