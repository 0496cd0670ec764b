"""Suite-wide hooks and fixtures: a visible closing line for tests that could not run on this machine, CP-SAT
searches that end UNKNOWN on demand, and command output as a pipe shows it whatever terminal runs the suite.

The browser test needs Debian's chromium, the torch tests PyTorch 2.13.0 and the Ray tests Ray; without them
those tests are skipped (CI installs all three). A skip in the middle of a dotted line is easy to miss, so the
summary ends with one line naming what did not run and how to install it.

The suite runs on every core (pytest-xdist, ``--dist loadgroup``). A module-scoped fixture is built once per
worker that runs a test using it; the costly ones (a torch launch per rank count, a Ray cluster, a solve or a
table computed once) are listed in :data:`SHARED_FIXTURES`, and the tests that use one go to a single worker.
"""

from __future__ import annotations

from typing import Any

import pytest
from ortools.sat.python import cp_model

from pipeplan import solver as solver_module

# module name -> its module-scoped fixture that takes seconds to build
SHARED_FIXTURES = {
    "test_torch_execution": "runs",
    "test_sweeps": "ray_cluster",
    "test_sizing": "validation",
    "test_sizing_memory": "rows",
    "test_report": "folder",
    "test_torch_csv": "result_folder",
    "test_cli": "ten_million_values",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test that uses a fixture of :data:`SHARED_FIXTURES` joins its module's xdist group (one worker)."""
    for item in items:
        module = getattr(item, "module", None)
        fixture = SHARED_FIXTURES.get(module.__name__ if module is not None else "")
        if fixture is not None and fixture in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(module.__name__))


@pytest.fixture(autouse=True)
def _output_as_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands' tables are checked as a pipe shows them (160 columns unless $COLUMNS says otherwise), not at
    the width of whatever runs the suite: pytest-xdist's workers, for one, set COLUMNS to 80, which truncates a
    wide table's cells."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def without_window_spacing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solver spends none of its time on the window spacings (:mod:`pipeplan.spacing`): for tests that check
    a closed-form bound against an optimum the solver proves, where those spacings' proofs (a fifth of the time
    limit) only add seconds. The spacings have their own tests."""
    monkeypatch.setattr(solver_module, "SPACING_SHARE", 0.0)


@pytest.fixture
def searches_end_unknown(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every CP-SAT search the solver runs (whole model, device relaxations) runs as usual but reports UNKNOWN,
    as one stopped before it met a solution would; the list returned gets each search's best bound, in ticks."""
    search = solver_module._run_search
    proven: list[float] = []

    def unknown(solver: cp_model.CpSolver, *args: Any, **kwargs: Any) -> cp_model.CpSolverStatus:
        search(solver, *args, **kwargs)
        proven.append(solver.best_objective_bound)
        return cp_model.UNKNOWN

    monkeypatch.setattr(solver_module, "_run_search", unknown)
    return proven


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = sorted({str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
                      for report in skipped})
    needs = [reason for reason in reasons if "install" in reason]
    if needs:
        terminalreporter.write_line(
            f"NOT RUN on this machine ({len(skipped)} skipped): " + "; ".join(needs), yellow=True, bold=True
        )
