"""pipeplan: plan pipeline-parallel training schedules.

The flow: a config is loaded into a :class:`Problem`; a generator (or the CP-SAT solver) produces a
:class:`Schedule` of per-device op orders; :func:`simulate` replays it into a :class:`Timeline`; and
:func:`compute_metrics` measures it. :func:`solve` finds the optimal schedule for a budget with CP-SAT.
"""

from pipeplan.config import Config, SolverSettings, load_config
from pipeplan.metrics import Metrics, compute_metrics, memory_timeline
from pipeplan.planner import plan
from pipeplan.problem import ConfigError, Op, OpKind, Problem
from pipeplan.schedule import NotApplicable, Schedule, ScheduleError
from pipeplan.schedules import generate
from pipeplan.schedules import names as schedule_names
from pipeplan.simulate import Timeline, simulate
from pipeplan.solver import InfeasibleBudget, SolveResult, solve

__version__ = "0.1.0"

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
