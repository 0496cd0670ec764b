"""Periodic warm starts: one microbatch's ops placed on a circle, repeated every period (modulo scheduling).

A long pipeline at a tight budget settles into a steady state in which every microbatch runs the same ops at
the same offsets, shifted by a period tau. This module builds that shape directly, the way compilers schedule
loops (iterative modulo scheduling): for a candidate tau it places microbatch 0's ops at offsets o(op) >= 0 and
lets microbatch m run each op at o(op) + m tau.

**Placement.** Each device keeps the arcs of a circle of length tau that its ops already occupy (an op at
offset o occupies [o mod tau, o mod tau + duration), wrapping around). The chain F(0), ..., F(S-1), B(S-1),
..., B(0) is placed in that order, each op at the earliest offset after its dependency (plus the link latency)
whose arc is free; every W then goes at the earliest free offset after its B. The chain comes first because
its length is what a device's activations live through; W only fills gaps.

**Why a pattern is a valid schedule for any number of microbatches.** Dependencies hold within a microbatch
by construction and across microbatches there are none. Two ops on one device never overlap: their copies
for all microbatches sit on disjoint arcs of the circle, repeated every tau. Memory: a live interval (from a
forward's start to the end of the op that releases it) of length L covers each phase of the circle
floor or ceil of L / tau times, so the steady state's live memory at each phase is a sum computed exactly by
:func:`steady_peaks`; a pattern is kept only if it fits the budget. A finite run of N microbatches holds at
each point a subset of what the steady state holds there, so it fits too.

**The schedule handed on.** The repeated pattern is sorted by start time into one order per device; the
simulator replays those orders as soon as possible. The replay cannot raise the peak: ops on a device run one
after another, so the memory live when an op starts depends only on the order (which forwards and releases
came before it), not on the times. The solver replays and checks it like every other warm start.

**The scan.** Periods are tried upward from the larger of the busiest device's work per microbatch and the
least period the budget allows (:func:`least_period`, Little's law on the shortest live intervals), in steps
of :data:`PERIOD_STEP` of that work; the first period whose pattern fits gives the schedule. Placement is a
heuristic (an earlier op taking a free arc may push a later one), so the first fit is not the least period
any pattern has. It pays where memory binds hard with two chunks per device, where the greedy list
schedulers collide: on the benchmark family at P = 8, N = 32, V placement, 3 activations it gives 128.4
against the 150.5 the search found without it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from pipeplan.bounds import memory_area, memory_binds, round_trips
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule

log = logging.getLogger(__name__)

# Step between the periods tried, as a fraction of the busiest device's work per microbatch.
PERIOD_STEP = 0.01
# Most periods tried in one scan: up to twice the busiest device's work per microbatch above the first.
MAX_PERIODS = 200
# Name of the schedule a pattern gives.
NAME = "periodic"


def least_period(problem: Problem, binding_only: bool = False) -> float:
    """A period below which no pattern fits the budget.

    In a steady state of period tau, Little's law says a device holds on average, over a period, the least
    memory-time area of one microbatch (:func:`pipeplan.bounds.memory_area`: each live interval's demand times
    the chain from the forward's start to the end of the op that releases it) divided by tau; the peak is at
    least that average. So tau >= area / budget. With ``binding_only`` only the devices that cannot hold all of
    the problem's microbatches at once count (a run of N microbatches, not an endless steady state).
    """
    budget = problem.budget
    if budget is None:
        return 0.0
    trips = round_trips(problem)
    n = problem.num_microbatches
    return max((memory_area(problem, d, trips) / room for d, room in enumerate(budget)
                if room > 0 and not (binding_only and n * problem.footprint(d) <= room)), default=0.0)


def _on_arc(phase: float, length: float, other: float, other_length: float, period: float) -> bool:
    """Whether arcs [phase, phase + length) and [other, other + other_length) of a circle of length ``period``
    intersect (both phases in [0, period), lengths at most period); an empty arc intersects nothing."""
    if length <= 0 or other_length <= 0:
        return False
    return (other - phase) % period < length or (phase - other) % period < other_length


def _free_start(arcs: list[tuple[float, float]], ready: float, length: float, period: float) -> float | None:
    """The earliest offset >= ``ready`` at which an op of ``length`` occupies no arc of ``arcs``; None when no
    gap between the arcs is long enough (the arcs and the op may fit in one period in total and still not
    leave one gap for it).

    The earliest offset is ``ready`` itself or the end of some arc (the first free point after a blocked one),
    within one turn of the circle from ``ready``.
    """
    candidates = sorted({ready, *(ready + (start + size - ready) % period for start, size in arcs)})
    for at in candidates:
        phase = at % period
        if not any(_on_arc(phase, length, start, size, period) for start, size in arcs):
            return at
    return None


def place(problem: Problem, period: float) -> dict[Op, float] | None:
    """Offsets of microbatch 0's ops on a circle of length ``period`` (see the module's docstring); None when
    some op finds no free gap long enough (as when a device's ops of one microbatch exceed the period)."""
    arcs: list[list[tuple[float, float]]] = [[] for _ in range(problem.num_devices)]
    offsets: dict[Op, float] = {}

    def put(op: Op) -> bool:
        ready = max((offsets[dep] + problem.duration(dep) + lag for dep, lag in problem.dependencies(op)),
                    default=0.0)
        device = problem.device_of(op.stage)
        at = _free_start(arcs[device], ready, problem.duration(op), period)
        if at is None:
            return False
        offsets[op] = at
        arcs[device].append((at % period, problem.duration(op)))
        return True

    last = problem.num_model_stages - 1
    chain = [problem.op(OpKind.F, s, 0) for s in range(last + 1)]
    chain += [problem.op(OpKind.B, s, 0) for s in range(last, -1, -1)]
    if not all(put(op) for op in chain):
        return None
    if problem.split_backward:
        weights = sorted(range(last + 1), key=lambda s: offsets[problem.op(OpKind.B, s, 0)])
        if not all(put(problem.op(OpKind.W, s, 0)) for s in weights):
            return None
    return offsets


def steady_peaks(problem: Problem, offsets: dict[Op, float], period: float) -> list[float]:
    """Per device, the most memory the steady state of ``offsets`` repeated every ``period`` holds at once.

    A live interval [a, b) holds its demand at phase x once for every whole k with a <= x + k period < b,
    that is ceil((b - x) / period) - ceil((a - x) / period) times. The sum only rises where an interval
    opens, so the peak is the largest sum at the phases of the forwards' starts.
    """
    peaks = []
    for d in range(problem.num_devices):
        live: list[tuple[float, float, float]] = []
        for s in problem.stages_on_device(d):
            opens = offsets[problem.op(OpKind.F, s, 0)]
            for kind in problem.kinds[1:]:
                demand = problem.released_by(kind, s)
                if demand > 0:
                    closes = problem.op(kind, s, 0)
                    live.append((opens, offsets[closes] + problem.duration(closes), demand))
        peak = 0.0
        for opens, _, _ in live:
            phase = opens % period
            peak = max(peak, sum(
                demand * (math.ceil((b - phase) / period) - math.ceil((a - phase) / period))
                for a, b, demand in live
            ))
        peaks.append(peak)
    return peaks


def repeat(problem: Problem, offsets: dict[Op, float], period: float, name: str = NAME) -> Schedule:
    """The per-device orders of ``offsets`` repeated every ``period`` for all of the problem's microbatches."""
    stages = problem.num_model_stages
    # Zero-length ops can share a start time; such ties go in dependency order: forwards up, backwards down.
    rank = {OpKind.F: lambda s: s, OpKind.B: lambda s: 2 * stages - 1 - s, OpKind.W: lambda s: 2 * stages + s}
    timed: list[list[tuple[float, int, int, Op]]] = [[] for _ in range(problem.num_devices)]
    for m in range(problem.num_microbatches):
        for op, at in offsets.items():
            timed[problem.device_of(op.stage)].append(
                (at + m * period, m, rank[op.kind](op.stage), problem.op(op.kind, op.stage, m))
            )
    return Schedule.from_lists(name, [[entry[3] for entry in sorted(ops, key=lambda e: e[:3])] for ops in timed])


def scan(ticked: Problem, deadline: float = math.inf,
         should_stop: Callable[[], bool] = lambda: False) -> tuple[float, dict[Op, float]] | None:
    """The first (period, offsets) of a scan of the period whose pattern fits the budget (see the module's
    docstring); None when memory does not bind, no period of the scan fits, or ``time.monotonic()`` passes
    ``deadline`` or ``should_stop()`` first.

    ``ticked`` is the problem in integer ticks (:func:`pipeplan.solver.tick_problem`), so that the arcs'
    arithmetic is exact.
    """
    if ticked.num_microbatches < 2 or not memory_binds(ticked):
        return None
    budget = ticked.budget
    assert budget is not None
    work = max(ticked.device_work(d) for d in range(ticked.num_devices)) / ticked.num_microbatches
    step = max(1.0, math.floor(work * PERIOD_STEP))
    period = float(max(math.ceil(work), math.ceil(least_period(ticked))))
    for _ in range(MAX_PERIODS):
        if time.monotonic() >= deadline or should_stop():
            log.info("periodic warm start: stopped at period %g", period)
            return None
        offsets = place(ticked, period)
        if offsets is not None and all(
            peak <= room + 1e-9 for peak, room in zip(steady_peaks(ticked, offsets, period), budget)
        ):
            log.info("periodic warm start: a pattern fits at period %g (work per microbatch %g)", period, work)
            return period, offsets
        period += step
    log.info("periodic warm start: no pattern fits up to period %g", period)
    return None


def periodic_schedule(ticked: Problem, problem: Problem | None = None, deadline: float = math.inf,
                      should_stop: Callable[[], bool] = lambda: False) -> Schedule | None:
    """The repetition of :func:`scan`'s pattern as a schedule of ``problem`` (``ticked`` itself when None)."""
    found = scan(ticked, deadline, should_stop)
    return None if found is None else repeat(problem or ticked, found[1], found[0])
