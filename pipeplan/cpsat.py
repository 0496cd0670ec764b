"""CP-SAT searches that a signal handler can stop at once.

Python runs signal handlers only in the main thread, between bytecodes; while the main thread is inside CP-SAT's
native ``solve``, a Ctrl-C waits until the search returns (up to its time limit). :func:`run_stoppable` runs the
search in a helper thread and has the main thread wait on an event, polling ``should_stop`` every
:data:`POLL_S`: a handler that sets a flag, or an exception it raises (a second Ctrl-C, SIGTERM), stops the search
within that time. CP-SAT's own SIGINT handler is turned off, so that Ctrl-C is the caller's.

Also here, for every model in integer ticks: :func:`whole_ticks`, the whole number of ticks a bound proves.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from ortools.sat.python import cp_model

# How often the waiting thread asks whether to stop (seconds).
POLL_S = 0.05
# Below this many ticks above a whole number a bound is taken as float noise on that number, not as proving the
# next one (see whole_ticks).
TICK_NOISE = 1e-6


def whole_ticks(ticks: float) -> float:
    """The least whole number of ticks at least ``ticks``, less :data:`TICK_NOISE`: where every objective is a
    whole number of ticks, what a bound of ``ticks`` proves (a bound computed a hair above a whole number, by float
    rounding, is not pushed up past it; one handed over in another unit and multiplied back into ticks may land a
    hair below the tick it stands for)."""
    return float(math.ceil(ticks - TICK_NOISE))


def run_stoppable(solver: cp_model.CpSolver, model: cp_model.CpModel,
                  should_stop: Callable[[], bool] = lambda: False,
                  callback: cp_model.CpSolverSolutionCallback | None = None) -> cp_model.CpSolverStatus:
    """``solver.solve(model, callback)`` in a helper thread, stopped as soon as ``should_stop()`` says so or the
    wait is interrupted by an exception. After an exception it waits until CP-SAT has really returned (a native
    search still running when the interpreter exits aborts the process) and propagates it.

    The wait is on an event, not on ``Thread.join``: an exception that interrupts a join can leave the thread
    marked as finished while it still runs."""
    solver.parameters.catch_sigint_signal = False
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def search() -> None:
        try:
            outcome["status"] = solver.solve(model, callback)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    try:
        threading.Thread(target=search, name="cp-sat", daemon=True).start()
        while not done.wait(POLL_S):
            if should_stop():
                # Again while it runs: CP-SAT ignores a stop that comes before its search has started.
                solver.stop_search()
    except BaseException:
        solver.stop_search()
        done.wait()
        raise
    if "error" in outcome:
        raise outcome["error"]
    status: cp_model.CpSolverStatus = outcome["status"]
    return status
