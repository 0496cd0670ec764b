"""pipeplan: plan pipeline-parallel training schedules.

The flow: a config is loaded into a :class:`Problem`; a generator (or the CP-SAT solver) produces a
:class:`Schedule` of per-device op orders; :func:`simulate` replays it into a :class:`Timeline`; and
:func:`compute_metrics` measures it. :func:`solve` finds the optimal schedule for a budget with CP-SAT.
"""

from __future__ import annotations

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING
from typing import Any as _Any

from pipeplan.config import Config, SolverSettings, load_config
from pipeplan.metrics import Metrics, compute_metrics, memory_timeline
from pipeplan.problem import ConfigError, Op, OpKind, Problem
from pipeplan.schedule import NotApplicable, Schedule, ScheduleError
from pipeplan.schedules import generate
from pipeplan.schedules import names as schedule_names
from pipeplan.simulate import Timeline, simulate

__version__ = "0.1.0"

# The library reports through the "pipeplan" loggers and never prints: without a handler configured by the
# application (the command line configures one), its warnings go nowhere instead of to Python's last-resort
# handler on stderr.
_logging.getLogger("pipeplan").addHandler(_logging.NullHandler())

# The names from the planner and the solver (which load OR-Tools, about a second) are imported on first use
# (PEP 562), so that ``import pipeplan`` and the command's entry point (:mod:`pipeplan.entry`) stay quick: a
# Ctrl-C in the first second of a command then meets the entry point's handler, not a traceback from an import.
# The names above load little (PyYAML) and stay plain imports: ``simulate`` must, since importing the submodule
# of that name binds the module to ``pipeplan.simulate`` unless the function already is.
_LAZY = {"plan": "pipeplan.planner", "InfeasibleBudget": "pipeplan.solver", "SolveResult": "pipeplan.solver",
         "solve": "pipeplan.solver"}

if TYPE_CHECKING:
    from pipeplan.planner import plan
    from pipeplan.solver import InfeasibleBudget, SolveResult, solve


def __getattr__(name: str) -> _Any:
    if name not in _LAZY:  # a submodule not imported yet (``pipeplan.solver`` after ``import pipeplan``) loads too
        try:
            return _importlib.import_module(f"pipeplan.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"pipeplan.{name}":
                raise
            raise AttributeError(f"module 'pipeplan' has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "Config",
    "ConfigError",
    "InfeasibleBudget",
    "Metrics",
    "NotApplicable",
    "Op",
    "OpKind",
    "Problem",
    "Schedule",
    "ScheduleError",
    "SolveResult",
    "SolverSettings",
    "Timeline",
    "compute_metrics",
    "generate",
    "load_config",
    "memory_timeline",
    "plan",
    "schedule_names",
    "simulate",
    "solve",
]
