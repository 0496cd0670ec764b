"""Suite-wide hooks: a visible closing line for tests that could not run on this machine.

The browser test needs Debian's chromium, the torch tests PyTorch 2.13.0 and the Ray tests Ray; without them
those tests are skipped (CI installs all three). A skip in the middle of a dotted line is easy to miss, so the
summary ends with one line naming what did not run and how to install it.
"""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = sorted({str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
                      for report in skipped})
    needs = [reason for reason in reasons if "install" in reason]
    if needs:
        terminalreporter.write_line(
            f"NOT RUN on this machine ({len(skipped)} skipped): " + "; ".join(needs), yellow=True, bold=True
        )
