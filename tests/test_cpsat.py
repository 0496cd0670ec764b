"""CP-SAT searches stop when asked, not at their time limit (:mod:`pipeplan.cpsat`): a Ctrl-C handler only sets
a flag or raises in the main thread, and the search runs in a helper thread that the main thread stops."""

from __future__ import annotations

import threading
import time

import pytest
from exhaustive import family
from ortools.sat.python import cp_model

from pipeplan import cpsat, spacing
from pipeplan.solver import _Model, tick_problem

# Long enough that a search that ignored the request would show; the checks allow a loaded machine 6 s.
LIMIT_S = 60.0
PROMPT_S = 6.0


def later(seconds: float) -> threading.Event:
    """An event set ``seconds`` from now."""
    event = threading.Event()
    threading.Timer(seconds, event.set).start()
    return event


def hard_model() -> cp_model.CpModel:
    """The whole-model search of P=8, N=32, 2 chunks in V placement, budget 3 without a hint: CP-SAT neither
    proves its optimum nor stops improving within a minute (the gap at 60 s is about 10 %)."""
    ticked, _, _ = tick_problem(family(8, 32, 3).with_layout(2, "v"))
    horizon = int(sum(ticked.duration(op) for op in ticked.all_ops()) + ticked.num_model_stages * 10 ** 4)
    return _Model(ticked, "makespan", horizon).model


def test_a_search_ends_soon_after_it_is_asked_to() -> None:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = LIMIT_S
    solver.parameters.num_workers = 2
    asked = later(0.5)
    started = time.monotonic()
    status = cpsat.run_stoppable(solver, hard_model(), asked.is_set)
    assert time.monotonic() - started < PROMPT_S
    assert status in (cp_model.FEASIBLE, cp_model.UNKNOWN)  # stopped, not proven
    assert not solver.parameters.catch_sigint_signal  # Ctrl-C is the caller's


def test_an_exception_in_the_wait_stops_the_search_and_propagates() -> None:
    """As a signal handler that raises (a second Ctrl-C) does: the search is stopped and has returned before the
    exception reaches the caller."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = LIMIT_S
    solver.parameters.num_workers = 2
    asked = later(0.5)

    def interrupt() -> bool:
        if asked.is_set():
            raise KeyboardInterrupt
        return False

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cpsat.run_stoppable(solver, hard_model(), interrupt)
    assert time.monotonic() - started < PROMPT_S
    assert solver.wall_time < PROMPT_S  # CP-SAT itself returned, well before its limit


def test_a_window_solve_ends_when_asked_with_what_it_proved() -> None:
    """The window of 9 microbatches of P=16, N=64, 2 chunks in V placement, budget 6 is not proven in 20 s; asked
    to stop after 0.5 s, its solve returns at once, unproven, with a bound no lower than the forwards' own chain."""
    ticked, _, _ = tick_problem(family(16, 64, 6).with_layout(2, "v"))
    asked = later(0.5)
    started = time.monotonic()
    bound, exact = spacing.solve_window(ticked, 8, LIMIT_S, num_workers=2, should_stop=asked.is_set)
    assert time.monotonic() - started < PROMPT_S
    assert not exact
    assert bound >= 8 * ticked.duration(ticked.op(ticked.kinds[0], 0, 0))
