"""The optimal schedule for a memory budget, with OR-Tools CP-SAT, and a proven bound on how far from optimal.

The model is built in a fixed order, one function a step: data (integer ticks), warm starts (every named
schedule and the greedy list schedulers, replayed), variables (one fixed-size interval per op), constraints
(precedence, no overlap per device, the activation budget as a cumulative, symmetry breaking, lower bounds),
objective, solve, read back. Where memory binds, the window bound of :mod:`pipeplan.spacing` and, on one chunk,
the collision bound of :mod:`pipeplan.collision_bound` (:data:`COLLISION_SHARE` of the time then left) may raise
the proven bound first. The whole-model search gets half of the time left after the warm starts
(:data:`SEARCH_SHARE`; none on models of more than :data:`LARGE_MODEL_OPS` ops; it ends sooner when it stalls,
:data:`STALL_MIN_S`); when it does not prove its answer optimal, the fluid bound of :mod:`pipeplan.fluid_bound`
(:data:`FLUID_SHARE` of the time then left) and the device relaxations of :mod:`pipeplan.device_bound`
(:data:`DEVICE_SHARE` of the time left before the fluid bound; none on two or more chunks in loop placement
from :data:`LOOP_SKIP_RELAXATION_P` devices up) may raise the proven bound, and a
large-neighbourhood search around the best schedule so far (:mod:`pipeplan.lns`) uses the rest: on a large model
whose best schedule is still a named one, for :data:`SHORT_RUN_SHARE` of it first on a shorter run of that
schedule, what it finds there spliced into the long run (:mod:`pipeplan.splice`). The schedule read
back is only an order per device; the simulator replays it in the problem's exact units and that replay is
the result, so every number a user sees comes from one place.

Objectives:

- ``makespan``: the step ends when every device is done (synchronous optimizer step).
- ``stage_span``: the largest per-device span, last end - first start (the Zero Bubble paper's cost). A
  runtime starts each device's first op as soon as its input arrives; an order can still start a device late
  by opening with a microbatch that arrives later. The model lets each device's span start at any time (a
  relaxation of what orders can do), so its bound is proven; the order it finds is replayed, and the replay's
  span is the answer, OPTIMAL only when it meets the bound.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ortools.sat.python import cp_model

from pipeplan import (
    collision_bound,
    cpsat,
    device_bound,
    fluid_bound,
    lattice,
    lns,
    periodic,
    schedules,
    spacing,
    splice,
)
from pipeplan.bounds import (
    FEASIBLE,
    OPTIMAL,
    makespan_lower_bound,
    minimum_budget,
    prove,
    stage_span_lower_bound,
)
from pipeplan.config import SolverSettings
from pipeplan.metrics import MEMORY_TOLERANCE, Metrics, compute_metrics
from pipeplan.problem import A_PROBLEM, MAX_TOTAL, ConfigError, Op, OpKind, Problem, expect, fields_named_as, shown
from pipeplan.schedule import A_SCHEDULE, Schedule, ScheduleError
from pipeplan.schedules import controllable, interleaved_zb
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.schedules.greedy import greedy_schedule, rules_for
from pipeplan.simulate import Timeline, simulate

__all__ = ["FEASIBLE", "MAX_MODEL_OPS", "OPTIMAL", "InfeasibleBudget", "Progress", "ProgressCallback",
           "SolveResult", "StopRequest", "minimum_budget", "objective_of", "solve", "tick_problem", "warm_starts"]

log = logging.getLogger(__name__)


# Most powers of ten tried above the largest value's order of magnitude when turning float costs into integer
# ticks (a tick of a millionth of it); beyond them values are rounded.
_MAX_SCALE_EXPONENT = 6
# The largest power of ten used as a scale: ticks are floats, and 10**308 is near the largest a float holds.
_MAX_FLOAT_EXPONENT = 300
# The largest tick count any sum in the model may reach: what a problem may total (the ticked problem is a
# problem too, validated as one), below the integers a float holds exactly (2**53). A scale that would pass it
# is not used: costs then round (a relaxation) instead of the solve being refused for a total the config never had.
_MAX_TICKS = min(2**53, MAX_TOTAL)
# The largest product of a memory tick count and a time tick count: CP-SAT's cumulative reasons with a demand times
# a duration and a capacity times the horizon in 64-bit integers, and past about 2**63 it answered INFEASIBLE on a
# model that has a solution (seconds of 1.2345678 at 10**7 ticks a unit beside bytes of 2499904865.71188, found by
# a new user's trial). The memory scale is held below it, given the time ticks, below one tick a unit if need be
# (nanoseconds beside bytes: a tick of a thousand bytes); memory then rounds, as a relaxation.
_MAX_TICK_PRODUCT = 2**61
_EPS = 1e-9


# The most ops a CP-SAT model is built for. Beyond it building the model alone takes tens of seconds and the
# search rarely improves on the warm starts within minutes; the best warm start is returned with its bound.
MAX_MODEL_OPS = 100_000

# The share of the time left after the warm starts that the whole-model CP-SAT search gets; when it does not
# prove its answer optimal, a neighbourhood search around its best schedule (:mod:`pipeplan.lns`) runs for the
# rest. With few workers CP-SAT runs no neighbourhood search of its own and creeps where memory binds.
SEARCH_SHARE = 0.5
# It also ends sooner when it stalls: when neither its best order nor its bound has moved for as long as it had run
# before either last moved (counted from when it began, presolve included), and for at least STALL_MIN_S, while its
# best order is more than STALL_GAP above its bound; the time it leaves goes to the bounds and the neighbourhood
# search, which take shares of the time left. On the memory wall's small rows it often found its last order long
# before its share ended (seconds into the solve, its share ending at about 33 s: P=8, N=16, V, budget 3, at
# 12.7 s; P=8, N=32, loop, budget 3, at 20.5 s, after which the neighbourhood search found the answer), while on
# others it found better orders after quiet spells of up to 9 s, which the rule keeps: P=8, N=32, loop, budget 6,
# quiet from 23.7 to 32.7 s after some 16 s of search (60 s solves, 2 workers; the rows' runs side by side in
# docs/memory-wall-log.md). Close to its bound a search may be about to prove it after a long quiet spell: the
# solver benchmark's P=4, N=32, budget 8, stage span (80.12 from the start against the bound 80.00) was proven at
# 80.06 after 13.3 s of search in one of three runs, and without the gap condition the rule cut that proof.
STALL_MIN_S = 8.0
STALL_GAP = 0.01
# On models of more than LARGE_MODEL_OPS ops (P = 16 with two chunks or N = 64, and P = 32) there is no
# whole-model search: its time goes to the bounds and the neighbourhood search. There its presolve alone takes
# seconds, and with the 0.15 of the time left it had last it ended UNKNOWN with no better order on every such row
# logged (6.4 to 7.6 s at 60 s, plus building its solver), while the device relaxations' targets, given those
# seconds, prove more (P=16, V, budget 6, 60 s, with no minimization between the targets either, runs beside the
# version before: N=32 127.05 / 127.69 -> 127.73 / 127.73 / 127.69 / 128.10, N=64 220.02 / 220.02 -> 221.25 /
# 220.02; the answers the same; more in docs/memory-wall-log.md). Below that size it keeps half: on P=8, N=16, one
# chunk, budget 3 it improves steadily and proves its optimum, and a share of 0.15 stops it short.
LARGE_MODEL_OPS = 2_000

# Near-equal schedules of different shapes leave different room for the neighbourhood search (a repeated
# steady-state pattern leaves little): when the best warm start whose orders differ from the incumbent's and
# from the whole-model search's hint is within RIVAL_MARGIN of the incumbent, each of the two gets PROBE_SHARE
# of the neighbourhood search's time, and the best found so far the rest (see _search_around).
RIVAL_MARGIN = 0.03
PROBE_SHARE = 0.25
# On a large model whose best warm start is still a named schedule when the neighbourhood search begins, the
# search first runs on a shorter run of that schedule for SHORT_RUN_SHARE of the time left, its finds spliced into
# the long run (pipeplan.splice), and then on the long run from the best so far.
SHORT_RUN_SHARE = 0.5
# ... when that share is at least SHORT_RUN_MIN_S seconds: the short run's model takes about a second to build at
# 12,000 ops, and its tail windows seconds to find a move.
SHORT_RUN_MIN_S = 2.0

# The share of the time left before the deadline that the lattice warm start (:mod:`pipeplan.lattice`) may take;
# it tries its densest patterns first and keeps the fastest that fits when time runs out.
LATTICE_SHARE = 0.2
# ... of which its repeating patterns, after the greedy lattices, may take up to this share (a share of the same
# time left, counted from the lattice's start). On the memory-wall rows (P = 8 to 32, 50 rows where the lattice
# runs) no pattern gave a better warm start than the greedy lattices and the named schedules, while the patterns
# took up to 10 s of a 60 s solve at P = 16 (P=16, N=32, loop, budget 11: 9.8 s);
# on random problems with unequal costs a pattern sometimes beats every other warm start (6 of 200, by 0.2 % to
# 10 %), within a fraction of a second on those small problems.
PATTERN_SHARE = 0.05

# The share of the time left after the warm starts that the window bound (:mod:`pipeplan.spacing`) may take
# when the budget binds and the best warm start does not meet the closed-form bound.
SPACING_SHARE = 0.2

# The share of the time left after the window bound that the collision bound (:mod:`pipeplan.collision_bound`:
# one chunk, the makespan) may take when the budget binds and the best warm start does not meet the bounds so far.
# It runs before the whole-model search, whose proofs it closes where it is proven (P = 6, N = 18, budget 4: the
# search's own bound stops at 67.32 in 20 s, the collision bound proves the answer, 68.70, in 1.5 s).
COLLISION_SHARE = 0.35

# The share of the time left after the whole-model search that the fluid bound (:mod:`pipeplan.fluid_bound`) may
# take when the budget binds and that search did not prove its answer (before the device relaxations, which start
# from it and keep the time they would have had without it: the fluid bound's comes out of the neighbourhood
# search's); below FLUID_MIN_S seconds of that share it is skipped (a short solve, such as a frontier's, keeps its
# time for the neighbourhood search).
FLUID_SHARE = 0.2
FLUID_MIN_S = 0.5

# The share of the time left after the whole-model search that the device relaxations
# (:mod:`pipeplan.device_bound`) may take when the budget binds and that search did not prove its answer, and
# how many devices (those with the largest closed-form bounds, the V's turn first: device_bound.relaxation_order)
# they are tried on, in turn: each may take all the time left, so the next one runs only when the one before
# proves its optimum early (or stops short of the time left unproven: TARGETS_NONE_S below, which then ends the
# relaxations).
DEVICE_SHARE = 0.5
DEVICE_TRIES = 2
# Below this many seconds for the relaxations they seldom prove anything, and short solves (a frontier at 2 s per
# budget) lose more in the neighbourhood search than they gain: the relaxations are skipped.
DEVICE_MIN_S = 2.0
# The most seconds the groups of devices exact at once get, after each device tried was proven optimal alone: the
# two tried together, then, while each group is proven optimal, the group and one neighbouring device more. Where
# that pays it is proven in seconds (P=8, N=32, one chunk, budget 3: 189.06 -> 189.82 with two devices in 0.5 s;
# budget 6: two devices add nothing, three 104.02 -> 104.78 in 3.8 to 7.4 s; P=16, N=64, one chunk, budget 6: 374.90 ->
# 374.96 with two in 3.2 s); where it does not (P=16, N=32, one chunk, budgets 6 and 11: groups of up to six
# devices proven, none above one device alone) the seconds are lost to the neighbourhood search, hence the caps:
# groups of more than DEVICE_GROUP_MAX devices proved nothing more on any row measured (four devices were not
# proven within the seconds left on any row with P <= 16) and took the rest of DEVICE_GROUP_S.
DEVICE_GROUP_S = 8.0
DEVICE_GROUP_MAX = 3
# On one device with the memory stated through orders, the quick targets of device_bound.prove_by_targets get at
# most this share of the relaxation's time before its optimization, and when that ends unproven (on the first
# device, and unless the quick targets proved nothing), the targets run on to the end of the relaxation's time or
# for TARGETS_SHARE of the time left, whichever is later.
TARGETS_QUICK = 0.5
TARGETS_SHARE = 0.4
# The optimization between them gets at most TARGETS_NONE_S seconds: where it proves the relaxation's optimum it
# does so within them (P=8, N=16: V, budget 6, in 4 s; loop, budget 3, in 3.4 s), and on larger relaxations it
# proved at most a tick more than the quick targets in 8 to 12 s (P=16, N=32 and 64, V, budget 6), which the
# paced targets after it use better (P=16, N=32, V, budget 6: 127.05 -> 128.19 at 60 s). When the quick targets
# prove nothing above the bound so far, the relaxations end after it unless it proves the optimum. On the
# memory-wall rows where the quick targets proved nothing, the optimization and the targets after it proved nothing
# more in 15 to 30 s (P=8, N=32, V, budget 6 and loop, budget 3; P=16, V, budget 11, N=32 and 64) while the
# neighbourhood search, which now gets that time, was still improving its answer when its time ran out: at 60 s,
# two runs each beside the version before, 91.26 / 92.20 -> 90.65 / 90.65, 103.21 / 103.21 -> 103.09 / 103.05 and
# 187.46 / 187.51 -> 187.01 / 187.07 (the loop row 154.79 / 154.79 -> 154.55 / 154.79). The one row where the
# optimization proved more after them, P=8, N=16, V, budget 6, proves its optimum within the cap (4 s in these
# runs). On a large model (above LARGE_MODEL_OPS) no optimization runs between the targets: where the quick ones
# proved nothing it proved nothing within the cap either (P=16, V, budget 11, N=32 and 64; P=32, V, budgets 11 and
# 22), and the neighbourhood search gains its seconds (60 s, runs beside the version before, P=16: 103.27 / 103.27
# -> 103.11 / 103.17 and 187.07 / 187.26 -> 187.08 / 186.96; P=32, N=64, budget 22 and N=128, budget 11:
# unchanged); where they proved something it ended UNKNOWN with nothing proven in every logged run (P=16, N=32, V,
# budget 6: 6.6 to 7.9 s), and the targets after it get its seconds (the runs at LARGE_MODEL_OPS above). The small
# row above keeps its proof.
TARGETS_NONE_S = 8.0
# Nor do they run on two or more chunks in loop placement from this many devices up: there a device holds a
# chunk's activations through a round trip over every other device, which its relaxation sees only as chains,
# and the fluid bound and the window bound prove what it would. On the memory wall's six such rows at P=16 (N=32
# and 64; budgets 6, 11 and 16; 60 s) each relaxation ended after 18-22 s at the bound it started from, and with
# that time for the neighbourhood search all six answers came out better (N=32, budget 6: 164.76 -> 162.64). In V
# placement and on one chunk they do prove more (P=16, N=64, V, budget 6: 211.03 -> 214.05; one chunk, budget 11:
# 215.90 -> 220.40), and at P=8 in loop placement too (N=16, budget 3: the row's best bound, 78.71).
LOOP_SKIP_RELAXATION_P = 16


class StopRequest:
    """Ask a running :func:`solve` (from a signal handler or another thread) to end its search now and return
    the best schedule found so far; once requested, later solves given the same request do not search."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._solvers: list[cp_model.CpSolver] = []

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self) -> None:
        """End the current search (safe to call from a signal handler: it only sets flags)."""
        self._event.set()
        with self._lock:
            for solver in self._solvers:
                solver.stop_search()

    def _attach(self, solver: cp_model.CpSolver) -> None:
        with self._lock:
            self._solvers.append(solver)
        if self.requested:
            solver.stop_search()

    def _detach(self, solver: cp_model.CpSolver) -> None:
        with self._lock:
            self._solvers.remove(solver)

    def __reduce__(self) -> tuple[type[StopRequest], tuple[()]]:
        """Sent to another process (a sweep's task on a worker), a request arrives fresh and never requested: a
        Ctrl-C there is its parent's to handle, which ends the workers. (A copy made with :mod:`copy` is fresh
        too; in this process a task is given the request itself, not a copy.)"""
        return StopRequest, ()


class InfeasibleBudget(ConfigError):
    """No schedule at all fits the budget; the message gives the smallest budget that would."""


@dataclass(frozen=True)
class Progress:
    """A progress report during a solve: elapsed wall time (s), best objective and bound (config's unit)."""

    elapsed_s: float
    objective: float | None
    bound: float | None


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class SolveResult:
    """The optimizer's answer. Times in the config's unit.

    ``schedule``, ``timeline`` and ``metrics`` are the replay of the solver's per-device orders (named
    "optimal"); ``objective`` is that replay's makespan or stage span. ``lower_bound`` is proven: no schedule
    within the budget does better. ``source`` says where the returned order came from: "cp-sat" (the whole-model
    search), "lns" (the neighbourhood search, from a warm start or CP-SAT's answer), or the name of a warm start
    that neither improved on within the time.
    """

    status: str
    objective_name: str
    objective: float
    lower_bound: float
    gap: float
    solve_time_s: float
    schedule: Schedule
    timeline: Timeline
    metrics: Metrics
    source: str
    best_heuristic: str
    best_heuristic_objective: float
    ticks_per_unit: int
    heuristics: dict[str, float] = field(default_factory=dict)
    """Objective of every feasible warm start, keyed by its name."""
    search: str = ""
    """What the CP-SAT search did: its status name (OPTIMAL, FEASIBLE, UNKNOWN: stopped before it found a
    schedule), followed by why it ended early when it stalled (:func:`stalled_search`), or why it did not run (the
    warm start met the bound, the problem is too large for the model or large enough that its time goes to the
    bounds and the neighbourhood search instead, the time limit was spent on the warm starts, or a stop was
    requested)."""
    interrupted: bool = False
    """True when a stop request (e.g. Ctrl-C) ended the search early: the answer is the best found so far."""
    exact_ticks: bool = True
    """False when costs or memory are not whole ticks (about a millionth of their largest value): CP-SAT then
    solved a rounded-down relaxation, whose bound can sit a hair below the true optimum (a small gap that is not
    a real one)."""
    solver_objective: float | None = None
    """CP-SAT's own objective value (config's unit) when the order came from CP-SAT, else None."""
    solver_times: dict[Op, tuple[float, float]] | None = None
    """CP-SAT's (start, end) of every op (config's unit) when the order came from CP-SAT and the costs are whole
    ticks (else CP-SAT solved a rounded-down relaxation and its times are not the problem's); the replay starts
    each op no later, and reaches the same objective when the solve is optimal."""


# ---------------------------------------------------------------------------------------------- data


# How far (relative) a value in ticks may lie from a whole number and still count as it: float noise only (0.29 *
# 100 is 28.999999999999996). A cost a little further off, such as 0.5 - 1e-9 at 100 ticks a unit, is not whole:
# counted as whole it would be rounded up, the ticked problem would no longer be a relaxation, and its bounds could
# exceed the real schedules' values.
_WHOLE_NOISE = 1e-12


def _is_whole(ticks: float) -> bool:
    """Whether ``ticks`` is a whole number up to float noise (:data:`_WHOLE_NOISE`)."""
    return abs(ticks - round(ticks)) <= _WHOLE_NOISE * max(1.0, abs(ticks))


def _rounded(ticks: float, rounding: Callable[[float], int]) -> float:
    """``ticks`` as a whole number: itself when it is one up to float noise, else rounded by ``rounding``
    (math.floor or math.ceil, whichever keeps the ticked problem a relaxation)."""
    return float(round(ticks) if _is_whole(ticks) else rounding(ticks))


def _scale_for(values: Sequence[float], total: float, max_ticks: float = _MAX_TICKS) -> tuple[int, bool]:
    """The smallest power of ten that makes every value a whole number of ticks (up to float noise), and whether
    one does that resolves a millionth of the largest value (values of 1e-9 need 10**9 ticks per unit to be
    whole: times and memory may be in any unit); never so large that ``total`` (the largest sum the model forms)
    passes ``max_ticks`` (:data:`_MAX_TICKS`). When no power of ten does, the smallest of its multiples by
    :data:`_THIRDS_MULTIPLIERS` that does: a device's cost split over 3 chunks is in thirds (1.0 -> 0.333...), which
    no power of ten makes whole, so CP-SAT solved a rounded relaxation and could not prove such a schedule optimal
    (FEASIBLE, "gap 6e-05 %", where 6 ticks a unit make it exact)."""
    scale, exact = _scale_among(values, total, (1,), max_ticks)
    if exact:
        return scale, True
    thirds, exact = _scale_among(values, total, _THIRDS_MULTIPLIERS, max_ticks)
    return (thirds, True) if exact else (scale, False)


# Multipliers of a power of ten tried when no power of ten alone makes the costs whole: thirds, sixths, ninths and
# twelfths (3, 6, 9 or 12 chunks of a device's cost, or a third of a half).
_THIRDS_MULTIPLIERS = (3, 6, 9, 12)


def _scale_among(values: Sequence[float], total: float, multipliers: Sequence[int],
                 max_ticks: float = _MAX_TICKS) -> tuple[int, bool]:
    """For :func:`_scale_for`: the smallest scale m 10**e (m in ``multipliers``, ascending and below 100) that
    makes every value whole, and True; else the finest scale tried and False."""
    positive = [abs(v) for v in values if v != 0]
    # Tried from the power at which the largest value is at least a tenth of a tick (the unit's 10**0 for values
    # from 0.1 up): no power below it makes that value a whole number of ticks.
    start = max(0, -math.floor(math.log10(max(positive))) - 1) if positive else 0
    start = min(start, _MAX_FLOAT_EXPONENT - _MAX_SCALE_EXPONENT)  # a scale a float holds (values near 1e-308)
    while start > 0 and total * 10**start > max_ticks:
        start -= 1
    largest = 0
    for exponent in range(start, start + _MAX_SCALE_EXPONENT + 1):
        for multiplier in multipliers:
            scale = multiplier * 10**exponent
            if total * scale > max_ticks and scale > 1:
                return largest, False
            largest = scale
            if all(_is_whole(v * scale) for v in values):
                return scale, True
    return largest, False


def _below_resolution(problem: Problem, which: str) -> str:
    """For a message about costs below the solver's time resolution: that resolution, and how to bring ``which``
    above it (a hundred-thousandth of the largest cost is at least one tick at the finest scale
    :func:`_scale_for` tries, which it reaches for any value not yet whole)."""
    largest = max(_all_times(problem))
    if largest < 10.0 ** (_MAX_SCALE_EXPONENT - _MAX_FLOAT_EXPONENT):
        fix = "express times in a larger unit"
    else:
        fix = f"raise {which} to at least {largest / 10 ** (_MAX_SCALE_EXPONENT - 1):g}"
    return f"(a hundred-thousandth to a millionth of the largest cost or latency, {largest:g}); {fix}"


def _all_times(problem: Problem) -> list[float]:
    return [*problem.forward, *problem.backward, *problem.backward_weight,
            *problem.comm]


# The warning when costs or memory are not whole ticks (one object, so that a caller whose values cannot have fewer
# digits, as cluster sizing's seconds beside bytes, can leave it out by identity: pipeplan.sizing.estimate).
NOT_WHOLE_TICKS = ("costs or memory are not whole ticks (the solver resolves about a millionth of the largest value): "
                   "CP-SAT works on a rounded relaxation of them, the answer is replayed exactly, and its bound may "
                   "stop short of the optimum by that rounding; fewer digits in the config's values avoid it")


def tick_problem(problem: Problem) -> tuple[Problem, int, bool]:
    """The problem in integer ticks for CP-SAT: (ticked problem, ticks per time unit, exact).

    Times are multiplied by the smallest power of ten (up to one that resolves a millionth of the largest time)
    that makes every cost and latency whole, or failing that by the smallest of its multiples by 3, 6, 9 or 12
    (:func:`_scale_for`: thirds, from 3 chunks), memory likewise. When no such scale exists the ticked problem is a
    relaxation of the real one: durations and memory demands are rounded down and budgets up, so every real
    schedule stays feasible there and its lower bounds stay valid; the real problem's replay decides
    feasibility and values either way.
    """
    total_time = problem.total_time()
    time_scale, exact_time = _scale_for(_all_times(problem), total_time)
    act = problem.activation
    wact = problem.weight_activation
    # A budget above what a device could ever hold (every microbatch on every chunk) constrains nothing.
    budget = None if problem.budget is None else tuple(
        min(b, problem.num_microbatches * problem.footprint(d)) for d, b in enumerate(problem.budget)
    )
    most = max(problem.num_microbatches * problem.footprint(d) for d in range(problem.num_devices))
    time_ticks = max(1.0, total_time * time_scale)  # no makespan in ticks is longer
    memory_ticks = min(_MAX_TICKS, _MAX_TICK_PRODUCT / time_ticks)
    memory_values = [*act, *wact, *(budget or ())]
    memory_scale: float
    memory_scale, exact_memory = _scale_for(memory_values, most, memory_ticks)
    if most * memory_scale > memory_ticks:  # even one tick a unit is too fine (nanoseconds beside bytes)
        memory_scale = 10.0 ** math.floor(math.log10(memory_ticks / most))
        exact_memory = all(_is_whole(v * memory_scale) for v in memory_values)
    exact = exact_time and exact_memory

    def down(values: Sequence[float], scale: float) -> tuple[float, ...]:
        return tuple(_rounded(v * scale, math.floor) for v in values)

    weights = down(problem.backward_weight, time_scale)
    if problem.split_backward and min(weights) == 0:
        raise ConfigError(
            f"costs.backward_weight {min(problem.backward_weight):g} is below the solver's resolution "
            f"{_below_resolution(problem, 'it')} or make the backward "
            "unsplit (backward_weight 0 everywhere)"
        )

    for s in range(problem.num_model_stages):
        if max(down([problem.forward[s], problem.backward[s], problem.backward_weight[s]], time_scale)) == 0:
            raise ConfigError(
                f"the costs of stage {s} (forward {problem.forward[s]:g}, backward {problem.backward[s]:g}) are "
                f"below the solver's resolution {_below_resolution(problem, 'them')}"
            )
    if not exact:  # after the refusals above: no warning before an error
        log.warning(NOT_WHOLE_TICKS)
    # Each release is rounded down on its own, so the ticked activation is their sum.
    held_after_b = down([problem.released_by(OpKind.B, s) for s in range(problem.num_model_stages)], memory_scale)
    held_until_w = down(wact, memory_scale)
    ticked = replace(
        problem,
        forward=down(problem.forward, time_scale),
        backward=down(problem.backward, time_scale),
        backward_weight=weights,
        comm=down(problem.comm, time_scale),
        activation=tuple(b + w for b, w in zip(held_after_b, held_until_w)),
        weight_activation=held_until_w,
        budget=None if budget is None else tuple(_budget_ticks(b * memory_scale) for b in budget),
    )
    return ticked, time_scale, exact


def _budget_ticks(budget: float) -> float:
    """A budget of ``budget`` ticks (a float) as whole ticks: rounded up when it is not whole (a relaxation), and
    at least the float noise a replay forgives above it (:data:`~pipeplan.metrics.MEMORY_TOLERANCE`). A demand
    within float noise of a whole number of ticks is rounded to it, up as well as down, by up to 1e-12 of itself
    (:data:`_WHOLE_NOISE`): at a million million ticks a whole tick for one activation of 1234567.123456789 at 10**6
    ticks a unit, and a tick for a thousand activations at 10**9, so a budget of exactly that many held one
    fewer in the ticked problem than in the real one (its bound, 23, exceeded a schedule that fits, 21). The slack
    covers every such rounding (1e-12 of each demand, summed over what fits, is below 1e-9 of the budget) and
    reaches a whole tick only above 10**9 ticks, so budgets of fewer ticks are as before."""
    return max(_rounded(budget, math.ceil), float(math.floor(budget * (1 + MEMORY_TOLERANCE))))


def objective_of(metrics: Metrics, objective: str) -> float:
    """The value of ``objective`` ('makespan' or 'stage_span') for a replayed schedule."""
    return metrics.makespan if objective == "makespan" else metrics.stage_span


# ------------------------------------------------------------------------------------------- warm starts


@dataclass(frozen=True)
class _Candidate:
    schedule: Schedule
    metrics: Metrics
    objective: float
    named: bool


def warm_starts(problem: Problem, objective: str, extra: Sequence[Schedule] = (),
                deadline: float = math.inf, stop: StopRequest | None = None,
                ticked: Problem | None = None, bound: float | None = None,
                named: Sequence[tuple[Schedule, Metrics]] | None = None) -> list[_Candidate]:
    """Every feasible heuristic schedule (and every feasible ``extra`` one), replayed on ``problem``, best
    objective first; named schedules win ties.

    ``named`` are the registered schedules already replayed on ``problem`` with their metrics (as
    :func:`pipeplan.planner.compare` has them); when None they are generated and replayed here.
    The named schedules (``named`` as given; else unless a stop was requested before the call), GPipe one
    microbatch at a time (which fits any budget that admits a schedule) and the ``extra`` ones always run; the
    greedy list schedulers, interleaved
    zero bubble with smaller groups (:func:`~pipeplan.schedules.interleaved_zb.smaller_groups`), the periodic
    pattern (:mod:`pipeplan.periodic`), V-Min and V-Half fitted to the budget
    (:func:`~pipeplan.schedules.controllable.fitted`) and the lattice (:mod:`pipeplan.lattice`, for at most
    :data:`LATTICE_SHARE` of the time left, its patterns for at most :data:`PATTERN_SHARE`) only while
    ``time.monotonic()`` is before ``deadline`` and no stop is requested. ``ticked`` is the problem in ticks
    (:func:`tick_problem`), computed when None. ``bound`` is a proven lower bound on the objective: when a warm
    start before the lattice already meets it, the lattice, the costliest, is skipped.
    """
    def stopped() -> bool:
        return stop is not None and stop.requested

    # Once a stop is requested (a Ctrl-C before the search), GPipe one microbatch at a time alone: it fits any
    # budget that admits a schedule, and the named schedules take a minute to build and replay at the size limit.
    # (A caller comparing with the named schedules, as ``pipeplan solve`` does, has them replayed already.)
    found: list[tuple[Schedule, bool]] = [] if stopped() or named is not None else [
        (s, True) for s in schedules.generate_applicable(problem)[0]]
    found.append((gpipe_with_flush_size(problem, 1, name="gpipe-1"), False))
    found.extend((schedule, False) for schedule in extra)
    for rule in rules_for(problem):
        if time.monotonic() >= deadline or stopped():
            log.info("time limit reached or stop requested: greedy warm starts from %s on skipped", rule.name)
            break
        greedy = greedy_schedule(problem, rule, deadline)
        if greedy is not None:
            found.append((greedy, False))
    if time.monotonic() < deadline and not stopped():
        found.extend((schedule, False) for schedule in interleaved_zb.smaller_groups(problem, deadline))
    if ticked is None:
        ticked = tick_problem(problem)[0]
    repeated = periodic.periodic_schedule(ticked, problem, deadline, stopped)
    if repeated is not None:
        found.append((repeated, False))
    if not stopped():
        found.extend((schedule, False) for schedule in controllable.fitted(problem, deadline, stopped))
    candidates = [_Candidate(schedule, metrics, objective_of(metrics, objective), True)
                  for schedule, metrics in named or () if metrics.feasible]
    for schedule, is_named in found:
        try:
            metrics = compute_metrics(simulate(problem, schedule))
        except ScheduleError as exc:
            log.warning("warm start %s is not a valid schedule, skipped: %s", schedule.name, exc)
            continue
        if metrics.feasible:
            candidates.append(_Candidate(schedule, metrics, objective_of(metrics, objective), is_named))
    best = min(candidates, key=lambda c: c.objective, default=None)
    if best is not None and bound is not None and _meets(best, bound):
        log.info("lattice warm start skipped: warm start %s meets the lower bound", best.schedule.name)
    else:
        now = time.monotonic()
        left = max(0.0, deadline - now)
        on_lattice = lattice.search(problem, now + LATTICE_SHARE * left, stopped, now + PATTERN_SHARE * left)
        if on_lattice is not None:  # replayed and within budget already
            schedule, metrics = on_lattice
            candidates.append(_Candidate(schedule, metrics, objective_of(metrics, objective), False))
    candidates.sort(key=lambda c: (c.objective, not c.named))
    return candidates


def _meets(candidate: _Candidate, bound: float) -> bool:
    """Whether ``candidate`` meets a proven lower bound on its objective (so it is optimal)."""
    return candidate.objective <= bound * (1 + _EPS)


# -------------------------------------------------------------------------------------------- the model


@dataclass
class _Task:
    """One op in the model: its start variable, its fixed duration (ticks) and its interval."""

    start: cp_model.IntVar
    duration: int
    interval: cp_model.IntervalVar

    @property
    def end(self) -> cp_model.LinearExprT:
        return self.start + self.duration


class _Model:
    """A CP-SAT model of one problem in ticks, built step by step in the constructor."""

    def __init__(self, problem: Problem, objective: str, horizon: int) -> None:
        self.problem = problem
        self.objective_name = objective
        self.horizon = horizon
        self.model = cp_model.CpModel()
        self.tasks: dict[Op, _Task] = {}  # keyed by op
        # Each live-memory interval's length, with the forward that opens it and the B or W that closes it.
        self.live: list[tuple[cp_model.IntVar, Op, Op]] = []
        # Each precedence the model holds, as (before, after, ticks): after starts at least that long after before
        # starts (the neighbourhood search narrows its sub-models' start domains by them).
        self.precedences: list[tuple[Op, Op, int]] = []
        self.objective_ends: list[Op] = []  # the ops whose end the objective is at least (makespan: every sink)
        self._add_variables()
        self._add_precedences()
        self._add_no_overlap()
        self._add_budget()
        self._add_symmetry()
        self.objective = self._add_objective()

    def _add_variables(self) -> None:
        """One fixed-size interval per op; its start domain runs from the earliest time its chain allows."""
        problem = self.problem
        earliest: dict[Op, int] = {}  # keyed by op; ops come in dependency order from the chain walk below
        for op in problem.ops_in_dependency_order():
            duration = int(problem.duration(op))
            lo = max((earliest[dep] + int(problem.duration(dep)) + int(lag)
                      for dep, lag in problem.dependencies(op)), default=0)
            earliest[op] = lo
            name = f"{op.kind.value}_s{op.stage}_m{op.microbatch}"
            start = self.model.new_int_var(lo, max(lo, self.horizon - duration), name)
            interval = self.model.new_fixed_size_interval_var(start, duration, f"i_{name}")
            self.tasks[op] = _Task(start, duration, interval)

    def _add_precedence(self, before: Op, after: Op, lag: int) -> None:
        """``after`` starts at least ``lag`` ticks after ``before`` ends."""
        delay = self.tasks[before].duration + lag
        self.model.add(self.tasks[after].start >= self.tasks[before].start + delay)
        self.precedences.append((before, after, delay))

    def _add_precedences(self) -> None:
        for op in self.tasks:
            for dep, lag in self.problem.dependencies(op):
                self._add_precedence(dep, op, int(lag))

    def _add_no_overlap(self) -> None:
        for d in range(self.problem.num_devices):
            self.model.add_no_overlap(
                [self.tasks[op].interval for op in self.tasks if self.problem.device_of(op.stage) == d]
            )

    def _add_budget(self) -> None:
        """Live activations as a cumulative per device: [start F, end B) and, split, [start F, end W)."""
        problem = self.problem
        budget = problem.budget
        if budget is None:
            return
        for d in range(problem.num_devices):
            intervals, demands = [], []
            for s in problem.stages_on_device(d):
                for m in range(problem.num_microbatches):
                    f = self.tasks[problem.op(OpKind.F, s, m)]
                    for kind in problem.kinds[1:]:
                        demand = int(problem.released_by(kind, s))
                        if demand <= 0:
                            continue
                        release = self.tasks[problem.op(kind, s, m)]
                        size = self.model.new_int_var(0, self.horizon, f"live_{kind.value}_s{s}_m{m}")
                        self.live.append((size, problem.op(OpKind.F, s, m), problem.op(kind, s, m)))
                        intervals.append(self.model.new_interval_var(f.start, size, release.end, f"mem_{s}_{m}"))
                        demands.append(demand)
            if intervals:
                self.model.add_cumulative(intervals, demands, int(budget[d]))

    def _add_symmetry(self) -> None:
        """On every stage, each kind of op runs in microbatch order.

        Microbatches are interchangeable (same costs and memory on a stage), so this keeps an optimal schedule:
        take any schedule and, stage by stage in dependency order, give the k-th slot of each kind to microbatch k.
        Its input is ready no later than the k-th earliest input, because the stage before was already reordered
        the same way, so every slot stays feasible; the memory of a device depends only on when allocations and
        releases happen, not on which microbatch they belong to, so the budget still holds; and the per-device
        times, hence makespan and spans, do not change.
        """
        problem = self.problem
        for s in range(problem.num_model_stages):
            for kind in problem.kinds:
                for mb in range(problem.num_microbatches - 1):
                    self._add_precedence(problem.op(kind, s, mb), problem.op(kind, s, mb + 1), 0)

    def _device_sinks(self, d: int) -> list[Op]:
        """The ops on device d that no other op on d follows by dependency: W when split, else B."""
        kind = OpKind.W if self.problem.split_backward else OpKind.B
        return [op for op in self.tasks if op.kind is kind and self.problem.device_of(op.stage) == d]

    def _add_objective(self) -> cp_model.IntVar:
        problem = self.problem
        obj = self.model.new_int_var(0, self.horizon, self.objective_name)
        if self.objective_name == "makespan":
            for d in range(problem.num_devices):
                for op in self._device_sinks(d):
                    self.model.add(obj >= self.tasks[op].end)
                    self.objective_ends.append(op)
            self.model.add(obj >= math.ceil(makespan_lower_bound(problem) - _EPS))
        else:
            # Spans do not change when the whole schedule shifts, so the first op of all starts at 0.
            self.model.add(self.tasks[problem.op(OpKind.F, 0, 0)].start == 0)
            for d in range(problem.num_devices):
                first = self.tasks[problem.op(OpKind.F, min(problem.stages_on_device(d)), 0)]
                for op in self._device_sinks(d):
                    self.model.add(obj + first.start >= self.tasks[op].end)
            self.model.add(obj >= math.ceil(stage_span_lower_bound(problem) - _EPS))
        self.model.minimize(obj)
        return obj

    @cached_property
    def for_lns(self) -> lns.LnsModel:
        """What the neighbourhood search needs of this model, made once (its precedences are numbered once per
        solve, not once per search from a different incumbent)."""
        return lns.LnsModel(
            model=self.model,
            starts={op: task.start for op, task in self.tasks.items()},
            durations={op: task.duration for op, task in self.tasks.items()},
            objective=self.objective,
            read_order=lambda solver: _read_order(self, solver, "optimal"),
            precedences=self.precedences,
            objective_ends=self.objective_ends,
        )

    def add_lower_bound(self, ticks: float) -> None:
        """A proven lower bound on the objective (ticks), e.g. the window bound: the search need not look below."""
        self.model.add(self.objective >= math.ceil(ticks - _EPS))

    def add_hint(self, timeline: Timeline) -> None:
        """Start the search from a replayed schedule (in ticks): every op's start, every live interval's length
        and the objective, so that CP-SAT has a complete solution to begin from."""
        starts = {op: int(round(start)) for op, start in zip(timeline.ops, timeline.start)}
        for op, start in starts.items():
            self.model.add_hint(self.tasks[op].start, start)
        for size, opens, closes in self.live:
            self.model.add_hint(size, starts[closes] + self.tasks[closes].duration - starts[opens])
        metrics = compute_metrics(timeline)
        self.model.add_hint(self.objective, int(round(objective_of(metrics, self.objective_name))))


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each new solution (and bound) through the user's callback, in the config's unit, and keeps when the
    search last moved, for the stall rule of :data:`STALL_MIN_S` (:meth:`stalled`).

    A solution's objective is reported only when ``achievable``: when the replay of its order can only do as
    well (the makespan in exact ticks, as every op then starts no later). A stage span, or times rounded to
    ticks, can replay worse than CP-SAT's value; those solutions report their bound alone, and the solver
    reports the replayed answer when the search ends."""

    def __init__(self, callback: ProgressCallback | None, scale: int, started: float, achievable: bool) -> None:
        super().__init__()
        self.callback = callback
        self.scale = scale
        self.started = started
        self.achievable = achievable
        self.began = time.monotonic()  # made just before its search starts
        self.last = self.began  # when its best objective or bound last moved
        self.best = math.inf  # its best objective (ticks; infinite until its first solution) and bound so far
        self.bound = 0.0
        self.ended_stalled = False  # whether stalled() said so (the search is then stopped)

    def bound_moved(self, ticks: float) -> None:
        """The search's bound moved just now, to ``ticks``."""
        self.last = time.monotonic()
        self.bound = max(self.bound, ticks)

    def stalled(self) -> bool:
        """Whether the search has stalled (:func:`_stalled`); once it has, the search is stopped."""
        if _stalled(self.began, self.last, time.monotonic(), self.best, self.bound):
            self.ended_stalled = True
        return self.ended_stalled

    def on_solution_callback(self) -> None:
        self.last = time.monotonic()
        self.best = self.objective_value
        self.bound = max(self.bound, self.best_objective_bound)
        if self.callback is not None:
            objective = self.objective_value / self.scale if self.achievable else None
            self.callback(Progress(self.last - self.started, objective, self.best_objective_bound / self.scale))


def _stalled(began: float, last: float, now: float, best: float, bound: float) -> bool:
    """Whether a search that began at ``began`` and whose best objective or bound last moved at ``last`` has
    stalled at ``now`` (seconds, one clock): quiet since ``last`` for longer than it ran before it and than
    :data:`STALL_MIN_S`, its best objective ``best`` more than :data:`STALL_GAP` above its bound ``bound`` (any
    unit, the same for both). Never before its first solution (``best`` infinite; presolve can take seconds)."""
    return (math.isfinite(best) and best - bound > STALL_GAP * best
            and now - last > max(STALL_MIN_S, last - began))


# How the search field of an answer tells that the whole-model search ended by the stall rule (after its status).
STALLED = "ended after"


def stalled_search(status: str, seconds: float) -> str:
    """The search field of an answer whose whole-model search ended by the stall rule after ``seconds``, with
    CP-SAT's status name ``status``: e.g. "FEASIBLE; ended after 14.2 s without a better order or bound for as long
    as it had run; its time went to the bounds and the neighbourhood search"."""
    return (f"{status}; {STALLED} {seconds:.1f} s without a better order or bound for as long as it had run; its "
            "time went to the bounds and the neighbourhood search")


def _read_order(model: _Model, solver: cp_model.CpSolver, name: str) -> Schedule:
    """Per-device orders from the solution: by start, then end (zero-length ops), then dependency order."""
    problem = model.problem
    rank = {op: i for i, op in enumerate(problem.ops_in_dependency_order())}  # keyed by op
    orders: list[list[Op]] = [[] for _ in range(problem.num_devices)]
    for op in model.tasks:
        orders[problem.device_of(op.stage)].append(op)
    for order in orders:
        order.sort(key=lambda op: (solver.value(model.tasks[op].start),
                                   solver.value(model.tasks[op].start) + model.tasks[op].duration, rank[op]))
    return Schedule.from_lists(name, orders)


# ------------------------------------------------------------------------------------------------ solve


def solve(
    problem: Problem,
    settings: SolverSettings | None = None,
    *,
    progress: ProgressCallback | None = None,
    hints: Sequence[Schedule] = (),
    stop: StopRequest | None = None,
    objective: str | None = None,
    time_limit_s: float | None = None,
    num_workers: int | None = None,
    random_seed: int | None = None,
) -> SolveResult:
    """Find the schedule of ``problem`` with the least objective within the budget, and a proven bound.

    ``settings`` says how the search runs (objective, time limit, workers, seed; defaults when None); the
    keywords ``objective``, ``time_limit_s``, ``num_workers`` and ``random_seed`` override single fields of it.
    The time limit bounds the whole call (warm starts, model and search) but for the named schedules, the
    ``hints`` and the final replay, which always run. ``hints`` are extra warm starts (e.g. a
    previous answer at a smaller budget); ``stop`` lets a signal handler end the search early. With one worker
    and a fixed seed the answer is reproducible when the search ends before the time limit. Raises
    :class:`InfeasibleBudget` when no schedule fits the budget at all.
    """
    settings, hints = checked_arguments(problem, settings, hints=hints, progress=progress, stop=stop,
                                        objective=objective, time_limit_s=time_limit_s, num_workers=num_workers,
                                        random_seed=random_seed)
    return solve_checked(problem, settings, progress=progress, hints=hints, stop=stop)


def checked_arguments(problem: object, settings: object, *, hints: object = (), progress: object = None,
                      stop: object = None, **overrides: Any) -> tuple[SolverSettings, list[Schedule]]:
    """:func:`solve`'s arguments checked (a :class:`ConfigError` naming the one that is wrong, not an
    AttributeError deep inside): the settings with the ``overrides`` (keywords such as ``time_limit_s``) on top,
    and the hints as a list, each replayed on ``problem`` (one that does not run there is an error). For the
    Python API's functions that take them (solve, frontier, compare)."""
    expect("problem", problem, Problem, A_PROBLEM)
    if settings is not None:
        expect("settings", settings, SolverSettings, "a pipeplan.SolverSettings or None")
    check_hooks(progress=progress, stop=stop)
    if isinstance(hints, Schedule):
        hints = [hints]
    # Any iterable of schedules, but not a text (whose characters would be taken one by one).
    expect("hints", hints, (list, tuple) if isinstance(hints, str) else Iterable,
           "a list of schedules, e.g. [generate('1f1b', problem)]")
    listed: list[Schedule] = list(hints)  # type: ignore[call-overload]
    for position, hint in enumerate(listed):
        expect("each of hints", hint, Schedule, A_SCHEDULE)
        try:  # a hint of another problem (other sizes, a mistyped order) would be skipped without a word
            simulate(problem, hint)  # type: ignore[arg-type]  # expect() checked it above
        except ScheduleError as exc:
            raise ConfigError(f"hints[{position}] is not a schedule of this problem: {exc}") from None
    return settings_with(settings, **overrides), listed  # type: ignore[arg-type]


def check_hooks(progress: object = None, stop: object = None, progress_name: str = "progress") -> None:
    """A :class:`ConfigError` unless ``stop`` is a :class:`StopRequest` or None and ``progress`` (named
    ``progress_name``) a function or None."""
    expect("stop", stop, (StopRequest, type(None)), "a pipeplan.solver.StopRequest or None")
    if progress is not None and not callable(progress):
        raise ConfigError(f"{progress_name} must be a function taking each progress report, or None; got "
                          f"{type(progress).__name__} {shown(progress, 60)}")


def solve_checked(problem: Problem, settings: SolverSettings, *, progress: ProgressCallback | None = None,
                  hints: Sequence[Schedule] = (), stop: StopRequest | None = None,
                  named: Sequence[tuple[Schedule, Metrics]] | None = None) -> SolveResult:
    """:func:`solve` on arguments already checked, for callers that have the named schedules replayed on
    ``problem`` already (``named``, with their metrics, as :func:`pipeplan.planner.compare` has them): they are
    then taken as they are rather than built and replayed again (a few seconds at the size limit)."""
    started = time.monotonic()
    deadline = started + settings.time_limit_s
    _check_budget(problem)
    ticked, time_scale, exact = tick_problem(problem)
    bound_ticks = _analytic_bound(ticked, settings.objective)  # the largest bound proven so far, in ticks
    candidates = warm_starts(problem, settings.objective, extra=hints, deadline=deadline, stop=stop, ticked=ticked,
                             bound=bound_ticks / time_scale, named=named)
    if not candidates:
        raise InfeasibleBudget(
            f"no schedule fits memory.budget; raise it to at least {max(minimum_budget(problem)):g} "
            "(one microbatch in flight)"
        )
    best = candidates[0]
    answer = _Answer(problem, settings.objective, best, candidates, time_scale, exact, started)

    def tell(objective: float | None, proven: float | None) -> None:
        """One progress report (the config's unit), when someone listens."""
        if progress is not None:
            progress(Progress(time.monotonic() - started, objective, proven))

    def bound() -> float:
        """The largest bound proven so far, in the config's unit. With exact ticks every schedule's objective is
        a whole number of ticks, so a bound between two whole numbers proves the next one up (a closed form of
        9000.999996 ticks proves 9001)."""
        return (cpsat.whole_ticks(bound_ticks) if exact else bound_ticks) / time_scale

    def raise_bound(ticks: float, what: str, objective: float) -> bool:
        """Take ``ticks`` as the bound when it is above the one so far (logged, and told with the best
        ``objective`` so far); whether it was."""
        nonlocal bound_ticks
        if ticks <= bound_ticks:
            return False
        log.info("%s %s above the bound so far %s", what, ticks / time_scale, bound())
        bound_ticks = ticks
        tell(objective, bound())
        return True

    tell(best.objective, bound())
    skip = _reason_not_to_search(problem, best, bound(), deadline, stop)
    deltas: dict[int, int] = {}  # the window bound's proven spacings, which also cut a device relaxation
    if not skip:
        deltas = _window_deltas(ticked, settings, deadline, stop)
        if raise_bound(spacing.bound_from(ticked, deltas), "window bound", best.objective):
            skip = _reason_not_to_search(problem, best, bound(), deadline, stop)
    best_replay = simulate(ticked, best.schedule) if not skip else None  # the hint of what follows
    if best_replay is not None and collision_bound.applies(ticked, settings.objective):
        if raise_bound(_collision_bound(ticked, settings, deadline, stop, bound_ticks, best_replay, deltas),
                       "collision bound", best.objective):
            skip = _reason_not_to_search(problem, best, bound(), deadline, stop)
    if skip or best_replay is None:
        log.info("no CP-SAT search: %s", skip)
        return answer.result(best.schedule, best.schedule.name, bound(), search=skip, stop=stop)

    model = _Model(ticked, settings.objective, _horizon(ticked, best.schedule, settings.objective))
    model.add_lower_bound(bound_ticks)
    chosen, source, value, raw = best.schedule, best.schedule.name, best.objective, None
    if _is_large(len(model.tasks)):  # no whole-model search: see LARGE_MODEL_OPS (each neighbourhood brings its hint)
        status = cp_model.UNKNOWN
        name = (f"skipped: {len(model.tasks):,} ops are more than the {LARGE_MODEL_OPS:,} up to which the whole-model "
                "search pays; its time went to the bounds and the neighbourhood search")
        log.info("no whole-model search: %s", name)
    else:
        model.add_hint(best_replay)
        solver = _solver(settings, _search_deadline(deadline))
        watch = _Progress(progress, time_scale, started, settings.objective == "makespan" and exact)

        def bound_moved(ticks: float) -> None:
            watch.bound_moved(ticks)
            if progress is not None:
                tell(None, ticks / time_scale)

        solver.best_bound_callback = bound_moved
        status = _run_search(solver, model.model, watch, stop, stalled=watch.stalled)
        name = solver.status_name(status)
        stalled = watch.ended_stalled and status != cp_model.OPTIMAL
        log.info("CP-SAT status %s in %.2f s%s", name, solver.wall_time,
                 f" (ended: no better order or bound for as long as it had run, more than {STALL_GAP:.0%} apart, "
                 "see STALL_MIN_S)" if stalled else "")
        if stalled:
            name = stalled_search(name, solver.wall_time)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
            # The model is a relaxation that the best warm start satisfies within the horizon: INFEASIBLE or
            # MODEL_INVALID here is a bug, never an answer to pass off as a result.
            raise RuntimeError(f"CP-SAT answered {name} on a model that has a solution: {solver.solution_info()}")
        # CP-SAT's best objective bound is proven whether or not it found a solution (UNKNOWN keeps it too), so a
        # bound the progress line showed is never dropped.
        bound_ticks = max(bound_ticks, solver.best_objective_bound)
        if status != cp_model.UNKNOWN:
            solved = _read_order(model, solver, "optimal")
            solved_metrics = compute_metrics(simulate(problem, solved))
            solved_value = objective_of(solved_metrics, settings.objective)
            if solved_metrics.feasible and solved_value < value * (1 - _EPS):
                chosen, source, value = solved, "cp-sat", solved_value
                raw = _solver_times(model, solver, time_scale) if exact else None
            else:
                log.info("the solver's order is no better than warm start %s", best.schedule.name)
    # The answer so far, replayed: CP-SAT's reports carry its model's objective, which the replay of its order
    # can beat (or, for the stage span, exceed).
    tell(value, bound())
    # The device relaxations' time, fixed before the fluid bound runs: its time comes out of the neighbourhood
    # search's, and the relaxations keep what they would have had without it (on one chunk they prove more than it
    # does, given the time).
    relaxation_s = DEVICE_SHARE * max(0.0, deadline - time.monotonic())
    if status != cp_model.OPTIMAL and value > bound() * (1 + _EPS):
        # Only now, as the device relaxations below, so that the problems the whole-model search proves at once
        # pay nothing for it.
        raise_bound(_fluid_bound(ticked, settings, deadline, stop, bound_ticks, value * time_scale), "fluid bound",
                    value)
    if status != cp_model.OPTIMAL and value > bound() * (1 + _EPS) and _relaxations_pay(problem):
        # Only now, so that the problems the whole-model search proves at once pay nothing for it.
        proved = (lambda ticks: tell(None, ticks / time_scale)) if progress is not None else None
        raise_bound(_device_bound(ticked, settings, deadline, stop, bound_ticks, chosen, value * time_scale, deltas,
                                  report=proved, seconds=relaxation_s), "device relaxation", value)
    if (status != cp_model.OPTIMAL and value > bound() * (1 + _EPS) and _is_large(len(model.tasks))
            and chosen is best.schedule and best.named):
        spliced = _short_run_search(problem, best, settings, deadline, stop, bound(),
                                    report=lambda objective: tell(objective, bound()))
        if spliced is not None:
            chosen, value = spliced
            source = "lns"
    if status != cp_model.OPTIMAL and value > bound() * (1 + _EPS):
        rival = _rival(candidates, (chosen, best.schedule), value)
        better = (lambda objective: tell(objective, bound())) if progress is not None else None
        found, found_value = _search_around(problem, model, chosen, value, rival, settings, deadline, stop, bound(),
                                            time_scale, report=better)
        if found is not chosen:  # _search_around returns a schedule other than its incumbent only when better
            chosen, source, value, raw = found, "lns", found_value, None
    return answer.result(chosen, source, bound(), search=name, stop=stop, raw=raw)


def _window_deltas(ticked: Problem, settings: SolverSettings, deadline: float,
                   stop: StopRequest | None) -> dict[int, int]:
    """The spacings of :mod:`pipeplan.spacing` proven within :data:`SPACING_SHARE` of the time left (ticks)."""
    now = time.monotonic()
    return spacing.window_deltas(
        ticked, now + SPACING_SHARE * max(0.0, deadline - now), num_workers=int(settings.num_workers),
        seed=int(settings.random_seed), should_stop=lambda: stop is not None and stop.requested,
    )


def _collision_bound(ticked: Problem, settings: SolverSettings, deadline: float, stop: StopRequest | None,
                     floor_ticks: float, incumbent: Timeline, deltas: Mapping[int, int]) -> float:
    """The bound of :mod:`pipeplan.collision_bound` (ticks, never below ``floor_ticks``, a bound already proven)
    within :data:`COLLISION_SHARE` of the time left, from the best warm start's replay ``incumbent`` (ticks) as the
    hint and with the window bound's spacings ``deltas``."""
    now = time.monotonic()
    return collision_bound.lower_bound(
        ticked, now + COLLISION_SHARE * max(0.0, deadline - now), num_workers=int(settings.num_workers),
        seed=int(settings.random_seed), floor=floor_ticks, hint=incumbent, spacings=deltas,
        should_stop=lambda: stop is not None and stop.requested)


def _fluid_bound(ticked: Problem, settings: SolverSettings, deadline: float, stop: StopRequest | None,
                 floor_ticks: float, incumbent_ticks: float) -> float:
    """The fluid bound of :mod:`pipeplan.fluid_bound` (ticks, never below ``floor_ticks``, a bound already
    proven) within :data:`FLUID_SHARE` of the time left, none when that is below :data:`FLUID_MIN_S`;
    ``incumbent_ticks`` is the best schedule's objective (ticks), the top of its grid."""
    now = time.monotonic()
    until = now + FLUID_SHARE * max(0.0, deadline - now)
    if until - now < FLUID_MIN_S:
        return floor_ticks
    return fluid_bound.lower_bound(ticked, settings.objective, floor_ticks, incumbent_ticks, until,
                                   should_stop=lambda: stop is not None and stop.requested)


def _relaxations_pay(problem: Problem) -> bool:
    """Whether the device relaxations get time on ``problem``: not on two or more chunks in loop placement with
    :data:`LOOP_SKIP_RELAXATION_P` devices or more, where they prove nothing the other bounds do not."""
    return not (problem.num_chunks > 1 and problem.placement == "loop"
                and problem.num_devices >= LOOP_SKIP_RELAXATION_P)


def _device_bound(ticked: Problem, settings: SolverSettings, deadline: float, stop: StopRequest | None,
                  floor_ticks: float, incumbent: Schedule, incumbent_ticks: float,
                  deltas: Mapping[int, int] | None = None,
                  report: Callable[[float], None] | None = None, seconds: float | None = None) -> float:
    """The best bound (ticks) CP-SAT proves on the device relaxations of :mod:`pipeplan.device_bound` above
    ``floor_ticks`` (a bound already proven; 0 when none is above it), with the best schedule so far, ``incumbent``
    (its objective ``incumbent_ticks`` in ticks), as the hint, within :data:`DEVICE_SHARE` of the time left (none
    when that is below :data:`DEVICE_MIN_S`), on at most :data:`DEVICE_TRIES` devices whose budget binds (in the
    order of :func:`pipeplan.device_bound.relaxation_order`), and
    on groups of devices exact together (for at most :data:`DEVICE_GROUP_S`) when each alone was proven optimal
    within the share: those devices, then, while a group is proven optimal, it and one neighbouring device more (up
    to :data:`DEVICE_GROUP_MAX` devices).
    Each relaxation starts from the best bound so far; the tries end when a bound meets the incumbent.
    ``deltas``: the spacings the window bound proved, which cut the relaxation of the device holding stage 0.
    ``report``, when given, hears each bound above ``floor_ticks`` rounded up to whole ticks and above
    every one before it (ticks) as CP-SAT proves it, so that progress shows while a relaxation runs (it is called
    from CP-SAT's thread, one call at a time). ``seconds``, when given, replaces that share (never past the
    deadline). One exception: on the first device, where its memory is stated through orders and its minimization
    ends unproven (or, on a large model, after its quick targets), the targets after it take
    :data:`TARGETS_SHARE` of the time left beyond that share (the neighbourhood search's; see ``relax`` below).
    And where a device's quick targets prove nothing, its minimization gets at most :data:`TARGETS_NONE_S` and,
    unless it proves the optimum, the relaxations end there: what is left of the share goes to the neighbourhood
    search. On a large model (:data:`LARGE_MODEL_OPS`) no minimization runs between the targets."""
    now = time.monotonic()
    share = DEVICE_SHARE * max(0.0, deadline - now) if seconds is None else seconds
    until = min(deadline, now + share)
    devices = device_bound.relaxation_order(ticked)[:DEVICE_TRIES]  # none when memory cannot bind
    if not devices or until - now < DEVICE_MIN_S:
        return 0.0
    hint = simulate(ticked, incumbent)
    large = _is_large(len(hint.ops))  # every op of the problem: the replay of a complete schedule
    start = float(math.ceil(floor_ticks - _EPS))  # the objective in ticks is whole
    best = start
    reported = best
    # A device's quick targets and its optimization (none on a large model) proved nothing: the relaxations end.
    given_up = False

    def proven(ticks: float) -> None:
        nonlocal reported
        if report is not None and ticks > reported:
            reported = ticks
            report(ticks)

    def relax(group: list[int], end: float, first: bool = False) -> bool:
        """Prove what CP-SAT can on the relaxation of ``group`` until ``end`` (the ``first`` one tried: targets
        after its optimization too, or on a large model after its quick targets, see below); whether it proved the
        optimum."""
        nonlocal best, given_up
        relaxation = device_bound.relaxation(ticked, group, settings.objective, floor=int(best), spacings=deltas)
        # One device with the memory stated through orders: targets (device_bound.prove_by_targets) before and after
        # the optimization, which often prove more there than its bound does: first within TARGETS_QUICK of the
        # relaxation's time (and only until one is undecided when none was proven: where the first is not, the
        # optimization proves more), whose bound the optimization (at most TARGETS_NONE_S) starts from; then, on the
        # first device tried when its optimization ends unproven, until the end of the relaxation's time or for
        # TARGETS_SHARE of the time left (the neighbourhood search's), whichever is later (on the next device that
        # time was lost on the rows measured), at the pace the quick ones showed. Where the quick ones prove
        # nothing, no targets follow the optimization. On a large model no optimization runs: the first device's
        # targets go on after the quick ones when those proved something, and the relaxations end when they did not.
        targets = len(group) == 1 and relaxation.ordered_memory
        unpromising = False  # the quick targets proved nothing
        pace = device_bound.Pace()
        device_end = end

        def later_targets(reached: float) -> bool:
            """The first device's targets after its optimization (or its quick targets): until the end of the
            relaxation's time or for TARGETS_SHARE of the time left, whichever is later."""
            now = time.monotonic()
            return by_targets(relaxation, reached, max(device_end, now + TARGETS_SHARE * max(0.0, deadline - now)),
                              pace)

        if targets:
            now = time.monotonic()
            before = best
            if by_targets(relaxation, incumbent_ticks, now + TARGETS_QUICK * max(0.0, end - now), pace, quick=True):
                return True
            unpromising = best <= before
            if large:  # see TARGETS_NONE_S: no optimization on a large model
                if unpromising:
                    log.info("devices %s relaxation: the quick targets proved nothing on a large model", group)
                    given_up = True
                    return False
                return first and later_targets(incumbent_ticks)
            relaxation.model.add(relaxation.objective >= int(best))
            end = min(end, time.monotonic() + TARGETS_NONE_S)
        relaxation.add_hint(hint)
        solver = _solver(settings, end)
        # Only the bound counts here, and on one device CP-SAT's lower-bound tree search proves it sooner: on the
        # memory-wall rows it proved at least as much within 8 s on each device tried, and more on several. On
        # several devices the default search does (P=8, N=32, one chunk, budget 3, two devices: the optimum in
        # 0.6 s, against 30 s of the tree search without it). So does one device with the memory stated through
        # orders (:mod:`pipeplan.merge_orders`, on chunks), in 20 s with two workers: P=8, N=32, V, budget 3,
        # device 7: the optimum, 118.79, against 115.46 (in one run; later runs, with no floor and no window cuts,
        # stayed at 113.80 after 25 s, where the targets below prove more); P=16, N=32, V, budget 6, device 15: the
        # optimum, 128.55, in 11 s against 127.05 in 20 s; P=8, N=16, V, budget 6: the optimum in 5.0 s against
        # 8.3 s (the tree search ahead only on P=16, N=64, V, budget 6, device 0: 215.30 against 214.06).
        solver.parameters.optimize_with_lb_tree_search = len(group) == 1 and not relaxation.ordered_memory
        if report is not None:
            solver.best_bound_callback = proven
        status = _run_search(solver, relaxation.model, None, stop)
        if status in (cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
            # Every schedule of the problem, relabelled into microbatch order, is a solution: either is a bug.
            raise RuntimeError(f"CP-SAT answered {solver.status_name(status)} on the relaxation of devices "
                               f"{group}, which the best schedule satisfies: {solver.solution_info()}")
        # The bound is proven whatever the status, UNKNOWN included (the tree search may prove one before it
        # meets a solution, e.g. with one worker).
        log.info("devices %s relaxation: %s, bound %s ticks", group, solver.status_name(status),
                 solver.best_objective_bound)
        best = max(best, solver.best_objective_bound)
        if unpromising and status != cp_model.OPTIMAL:
            given_up = True  # see TARGETS_NONE_S
        if status == cp_model.OPTIMAL or not targets or not first or unpromising:
            return status == cp_model.OPTIMAL
        return later_targets(min(solver.objective_value, incumbent_ticks) if status == cp_model.FEASIBLE
                             else incumbent_ticks)

    def by_targets(relaxation: device_bound.Relaxation, reached: float, end: float, pace: device_bound.Pace,
                   quick: bool = False) -> bool:
        """Prove what the targets can on ``relaxation``, whose objective reaches ``reached`` (ticks; infinite when
        not known: its horizon then), until ``end``; whether they proved its optimum."""
        nonlocal best
        lower, optimal = device_bound.prove_by_targets(
            relaxation, int(math.ceil(best - _EPS)), None if math.isinf(reached) else int(math.floor(reached + _EPS)),
            end,
            lambda model, capped, seconds: _decide(settings, model, capped, seconds, stop), report=proven,
            should_stop=lambda: stop is not None and stop.requested, quick=quick, pace=pace)
        log.info("relaxation by targets%s: bound %s ticks%s", " (quick)" if quick else "", lower,
                 " (optimal)" if optimal else "")
        best = max(best, lower)
        return optimal

    def done(end: float) -> bool:
        return (given_up or end - time.monotonic() < 0.05 or best >= incumbent_ticks - _EPS
                or (stop is not None and stop.requested))

    # Each device alone (the next one gets what is left when one proves early), then, when every one was proven
    # optimal, the devices exact together, and while each such group is proven, it and one neighbouring device
    # more: the groups within DEVICE_GROUP_S, of at most DEVICE_GROUP_MAX devices.
    solved = 0
    for d in devices:
        if done(until):
            break
        solved += relax([d], until, first=d == devices[0])
    # Groups only when every device alone was solved: where one was not, a group, a harder model, would not be.
    if len(devices) > 1 and solved == len(devices):
        group: list[int] | None = list(devices)
        groups_until = min(until, time.monotonic() + DEVICE_GROUP_S)
        while group is not None and not done(groups_until) and relax(group, groups_until):
            group = device_bound.grown(ticked, group) if len(group) < DEVICE_GROUP_MAX else None
    return best if best > start else 0.0


def _decide(settings: SolverSettings, model: cp_model.CpModel, capped: cp_model.IntVar, seconds: float,
            stop: StopRequest | None) -> tuple[cp_model.CpSolverStatus, int | None]:
    """CP-SAT on the decision ``model`` (a relaxation with its objective ``capped``, no objective to minimize) for
    at most ``seconds``: (status, ``capped``'s value in its solution, or None without one)."""
    solver = _solver(settings, time.monotonic() + seconds)
    status = _run_search(solver, model, None, stop)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"CP-SAT answered MODEL_INVALID on a relaxation's target: {solver.solution_info()}")
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return status, int(solver.value(capped))
    return status, None


def _search_deadline(deadline: float) -> float:
    """When the whole-model search ends: after :data:`SEARCH_SHARE` of the time left, so that the neighbourhood
    search (:mod:`pipeplan.lns`) has the rest when the first does not prove its answer."""
    now = time.monotonic()
    return now + SEARCH_SHARE * max(0.0, deadline - now)


def _search_around(problem: Problem, model: _Model, incumbent: Schedule, value: float, rival: Schedule | None,
                   settings: SolverSettings, deadline: float, stop: StopRequest | None, bound: float,
                   time_scale: int, report: Callable[[float], None] | None = None) -> tuple[Schedule, float]:
    """The best schedule of ``problem`` the neighbourhood search on ``model`` (its ticked version) finds from
    ``incumbent`` (whose objective is ``value``) until ``deadline``, and its objective (``incumbent`` and
    ``value`` when nothing better is found). With a ``rival``, each of the two first gets :data:`PROBE_SHARE`
    of the time and the best schedule found so far the rest. The search ends early when the objective meets
    ``bound`` (proven; in the problem's unit, ``time_scale`` ticks each) or a stop is requested. ``report``, when
    given, hears each objective better than every one before it (the problem's unit) as soon as it is found."""
    best, best_value = incumbent, value
    reported = value

    def heard(schedule: Schedule) -> None:
        nonlocal reported
        if report is None:
            return
        metrics = compute_metrics(simulate(problem, schedule))
        found_value = objective_of(metrics, settings.objective)
        if metrics.feasible and found_value < reported * (1 - _EPS):
            reported = found_value
            report(found_value)

    probe = PROBE_SHARE * max(0.0, deadline - time.monotonic())
    starts: list[Schedule | None] = [incumbent, rival] if rival is not None else []
    for phase, start in enumerate([*starts, None]):  # None: the best found so far, until the deadline
        if best_value <= bound * (1 + _EPS) or (stop is not None and stop.requested):
            break
        until = deadline if start is None else min(deadline, time.monotonic() + probe)
        found = _neighbourhood_search(model, best if start is None else start, settings, until, stop,
                                      target=bound * time_scale, seed_offset=phase, on_improvement=heard)
        metrics = compute_metrics(simulate(problem, found))
        found_value = objective_of(metrics, settings.objective)
        if metrics.feasible and found_value < best_value * (1 - _EPS):
            best, best_value = found, found_value
    return best, best_value


def _short_run_search(problem: Problem, best: _Candidate, settings: SolverSettings, deadline: float,
                      stop: StopRequest | None, bound: float, report: Callable[[float], None]
                      ) -> tuple[Schedule, float] | None:
    """The best schedule of ``problem`` (and its objective) that the neighbourhood search on a shorter run of the
    named warm start ``best`` finds, spliced into the long run (:mod:`pipeplan.splice`), within
    :data:`SHORT_RUN_SHARE` of the time left before ``deadline`` (none when that is below :data:`SHORT_RUN_MIN_S`
    or a stop was requested), ending early when it meets ``bound`` (proven, the config's unit); None when no short
    run splices onto ``best``'s orders or nothing better is found. ``report`` hears each better objective."""
    share = SHORT_RUN_SHARE * max(0.0, deadline - time.monotonic())
    if share < SHORT_RUN_MIN_S or (stop is not None and stop.requested):
        return None
    until = time.monotonic() + share  # building the short run's model counts against its share
    run = splice.short_run(problem, best.schedule.name, best.schedule)
    if run is None:
        log.info("short run: none splices onto %s's orders", best.schedule.name)
        return None
    ticked = tick_problem(run.problem)[0]
    model = _Model(ticked, settings.objective, _horizon(ticked, run.base, settings.objective))
    log.info("short run: %s at N=%d for the search, spliced into N=%d", best.schedule.name,
             run.problem.num_microbatches, problem.num_microbatches)
    return splice.improve(
        problem, run, ticked, model.for_lns, best.schedule, best.objective,
        value_of=lambda timeline: objective_of(compute_metrics(timeline), settings.objective),
        deadline=until, num_workers=int(settings.num_workers), seed=int(settings.random_seed), target=bound,
        should_stop=lambda: stop is not None and stop.requested,
        on_improvement=lambda schedule, value: report(value))


def _neighbourhood_search(model: _Model, incumbent: Schedule, settings: SolverSettings, deadline: float,
                          stop: StopRequest | None, target: float = 0.0, seed_offset: int = 0,
                          on_improvement: Callable[[Schedule], None] = lambda schedule: None) -> Schedule:
    """The incumbent improved by :func:`pipeplan.lns.improve` on the model's ticked problem until ``deadline``
    or until it reaches ``target`` (a proven bound, in ticks). ``seed_offset`` varies the seed between runs of
    the search within one solve (the random windows, the sub-solves); ``on_improvement`` is given each better
    schedule as it is found."""
    return lns.improve(
        model.for_lns, model.problem, incumbent,
        value_of=lambda timeline: objective_of(compute_metrics(timeline), settings.objective),
        deadline=deadline, num_workers=int(settings.num_workers), seed=int(settings.random_seed) + 1000 * seed_offset,
        target=target,
        should_stop=lambda: stop is not None and stop.requested,
        on_improvement=on_improvement,
        tail=lns.tail_rule(len(model.tasks)),
    )


def _is_large(num_ops: int) -> bool:
    """Whether a model of ``num_ops`` ops is large, where the time is split differently (:data:`LARGE_MODEL_OPS`)."""
    return num_ops > LARGE_MODEL_OPS


def _rival(candidates: Sequence[_Candidate], taken: Sequence[Schedule], value: float) -> Schedule | None:
    """The best warm start whose per-device orders differ from those of every schedule in ``taken`` (the
    incumbent and the whole-model search's hint) when its objective is within :data:`RIVAL_MARGIN` of
    ``value``, else None (several greedy rules often give the same orders)."""
    for candidate in candidates:
        if all(candidate.schedule.orders != schedule.orders for schedule in taken):
            return candidate.schedule if candidate.objective <= value * (1 + RIVAL_MARGIN) else None
    return None


def _reason_not_to_search(problem: Problem, best: _Candidate, bound: float, deadline: float,
                          stop: StopRequest | None) -> str:
    """Why the CP-SAT search would be pointless or impossible, or "" when it should run."""
    if _meets(best, bound):
        return f"not needed: warm start {best.schedule.name} meets the lower bound"
    if stop is not None and stop.requested:
        return "stopped before the search began"
    num_ops = problem.num_model_stages * problem.num_microbatches * len(problem.kinds)
    if num_ops > MAX_MODEL_OPS:
        return (f"skipped: {num_ops:,} ops are more than the {MAX_MODEL_OPS:,} a CP-SAT model is built for; the "
                "best named or greedy schedule is returned with its proven bound")
    if time.monotonic() >= deadline:
        return "skipped: the time limit was spent on the warm starts; raise the time limit to search"
    return ""


def _run_search(solver: cp_model.CpSolver, model: cp_model.CpModel, callback: _Progress | None,
                stop: StopRequest | None, stalled: Callable[[], bool] = lambda: False) -> cp_model.CpSolverStatus:
    """Run CP-SAT so that Python signal handlers can stop it (:func:`pipeplan.cpsat.run_stoppable`), and so that
    ``stop`` stops it too: at once when requested from another thread, within a poll from a signal handler.
    ``stalled`` stops it too, within a poll, when it says so (the stall rule of :data:`STALL_MIN_S`)."""
    if stop is None:
        return cpsat.run_stoppable(solver, model, stalled, callback)
    stop._attach(solver)
    try:
        return cpsat.run_stoppable(solver, model, lambda: stop.requested or stalled(), callback)
    finally:
        stop._detach(solver)


def settings_with(settings: SolverSettings | None, **overrides: Any) -> SolverSettings:
    """``settings`` (or the defaults) with the given fields replaced; None leaves a field as it is."""
    changes = {key: value for key, value in overrides.items() if value is not None}
    base = settings if settings is not None else SolverSettings()
    with fields_named_as({f"solver.{key}": key for key in changes}):  # a keyword's value: named as a keyword
        return replace(base, **changes) if changes else base


def _check_budget(problem: Problem) -> None:
    """Raise :class:`InfeasibleBudget` when a device's budget cannot hold one microbatch on all its chunks."""
    budget = problem.budget
    need = minimum_budget(problem)
    if budget is not None and any(b < n * (1 - _EPS) for b, n in zip(budget, need)):
        worst = max(range(problem.num_devices), key=lambda d: need[d] - budget[d])
        if len(set(budget)) == 1:  # one budget for every device: it must hold the most any device needs
            fix = f"raise memory.budget to at least {max(need):g}"
        else:  # a budget per device: each one short of its own device's need
            short = [d for d in range(problem.num_devices) if budget[d] < need[d] * (1 - _EPS)]
            fix = "raise memory.budget " + ", ".join(f"on device {d} to at least {need[d]:g}" for d in short)
        raise InfeasibleBudget(
            f"memory.budget {budget[worst]:g} on device {worst} admits no schedule: one microbatch holds "
            f"{need[worst]:g} there across its {problem.num_chunks} chunks; {fix}"
        )


def _analytic_bound(ticked: Problem, objective: str) -> float:
    """The proven lower bound of ``objective`` on the ticked problem (in ticks)."""
    return stage_span_lower_bound(ticked) if objective == "stage_span" else makespan_lower_bound(ticked)


def _horizon(ticked: Problem, warm_start: Schedule, objective: str) -> int:
    """The latest time any op needs, in ticks, derived from the best warm start (which fits the budget).

    Makespan: no better schedule ends later than the warm start. Stage span: with F(0, 0) at 0, every op
    depends on it and every device's last B precedes B(0, N-1), which ends within one span S of time 0; so each
    device starts by S and ends by 2S, S at most the warm start's.
    """
    metrics = compute_metrics(simulate(ticked, warm_start))
    return int(round(metrics.makespan if objective == "makespan" else 2 * objective_of(metrics, objective)))


def _solver(settings: SolverSettings, deadline: float) -> cp_model.CpSolver:
    """A CP-SAT solver with the run's parameters; its time limit is what is left until ``deadline``."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, deadline - time.monotonic())
    solver.parameters.num_workers = int(settings.num_workers)
    solver.parameters.random_seed = int(settings.random_seed)
    return solver


def _solver_times(model: _Model, solver: cp_model.CpSolver, time_scale: int) -> _SolverTimes:
    """CP-SAT's objective and (start, end) of every op, in the config's unit."""
    times = {op: (solver.value(t.start) / time_scale, (solver.value(t.start) + t.duration) / time_scale)
             for op, t in model.tasks.items()}
    return solver.objective_value / time_scale, times


_SolverTimes = tuple[float, dict[Op, tuple[float, float]]]


@dataclass(frozen=True)
class _Answer:
    """What every way out of :func:`solve` shares: the problem, the warm starts and the run's clock."""

    problem: Problem
    objective: str
    best: _Candidate
    candidates: list[_Candidate]
    time_scale: int
    exact: bool
    started: float

    def result(self, chosen: Schedule, source: str, bound: float, search: str, stop: StopRequest | None,
               raw: _SolverTimes | None = None) -> SolveResult:
        """Replay the chosen order in the problem's own units and package the answer with its proof."""
        final = Schedule(name="optimal", orders=chosen.orders, flushes=chosen.flushes)
        timeline = simulate(self.problem, final)
        metrics = compute_metrics(timeline)
        value = objective_of(metrics, self.objective)
        # The bound is proven (the tick model is the problem itself or a relaxation of it): never above a
        # schedule.
        assert bound <= value * (1 + 1e-9) + 1e-9, f"lower bound {bound} above a feasible schedule's {value}"
        proof = prove(value, bound)
        return SolveResult(
            status=proof.status,
            objective_name=self.objective,
            objective=value,
            lower_bound=proof.lower_bound,
            gap=proof.gap,
            solve_time_s=time.monotonic() - self.started,
            schedule=final,
            timeline=timeline,
            metrics=metrics,
            source=source,
            best_heuristic=self.best.schedule.name,
            best_heuristic_objective=self.best.objective,
            ticks_per_unit=self.time_scale,
            heuristics={c.schedule.name: c.objective for c in self.candidates},
            search=search,
            interrupted=stop is not None and stop.requested,
            exact_ticks=self.exact,
            solver_objective=None if raw is None else raw[0],
            solver_times=None if raw is None else raw[1],
        )
