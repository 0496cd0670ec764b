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

# The replay and the types it takes load little and are plain imports; ``simulate`` must be, since importing the
# submodule of that name binds the module to ``pipeplan.simulate`` unless the function already is.
from pipeplan.problem import ConfigError, Op, OpKind, Problem
from pipeplan.schedule import NotApplicable, Schedule, ScheduleError
from pipeplan.simulate import Timeline, simulate

__version__ = "0.1.0"

# The library reports through the "pipeplan" loggers and never prints: without a handler configured by the
# application (the command line configures one), its warnings go nowhere instead of to Python's last-resort
# handler on stderr.
_logging.getLogger("pipeplan").addHandler(_logging.NullHandler())

# Every other name is imported on first use (PEP 562): the configs (PyYAML), the generators (numpy), the planner
# and the solver (OR-Tools, about a second). So ``import pipeplan`` and the command's entry point
# (:mod:`pipeplan.entry`, which the package's import runs first) stay quick, and a Ctrl-C in the first tenths of
# a second of a command meets the entry point's handler, not a traceback from an import. Name -> (module, name
# there).
_LAZY = {
    "Config": ("pipeplan.config", "Config"),
    "SolverSettings": ("pipeplan.config", "SolverSettings"),
    "load_config": ("pipeplan.config", "load_config"),
    "Metrics": ("pipeplan.metrics", "Metrics"),
    "compute_metrics": ("pipeplan.metrics", "compute_metrics"),
    "memory_timeline": ("pipeplan.metrics", "memory_timeline"),
    "generate": ("pipeplan.schedules", "generate"),
    "schedule_names": ("pipeplan.schedules", "names"),
    "plan": ("pipeplan.planner", "plan"),
    "InfeasibleBudget": ("pipeplan.solver", "InfeasibleBudget"),
    "SolveResult": ("pipeplan.solver", "SolveResult"),
    "solve": ("pipeplan.solver", "solve"),
}

if TYPE_CHECKING:
    from pipeplan.config import Config, SolverSettings, load_config
    from pipeplan.metrics import Metrics, compute_metrics, memory_timeline
    from pipeplan.planner import plan
    from pipeplan.schedules import generate
    from pipeplan.schedules import names as schedule_names
    from pipeplan.solver import InfeasibleBudget, SolveResult, solve


def __getattr__(name: str) -> _Any:
    if name not in _LAZY:  # a submodule not imported yet (``pipeplan.solver`` after ``import pipeplan``) loads too
        try:
            return _importlib.import_module(f"pipeplan.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"pipeplan.{name}":
                raise
            raise AttributeError(f"module 'pipeplan' has no attribute {name!r}") from None
    module, attribute = _LAZY[name]
    value = getattr(_importlib.import_module(module), attribute)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})  # a lazy name once loaded is in both


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
