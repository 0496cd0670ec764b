"""Lattice warm starts: microbatches started on a grid of cells, each crossing the pipeline without waiting.

When a microbatch never waits, each of its forwards and input-gradient backwards runs at a fixed offset from
its first forward's start: forwards up the model stages, one link latency between devices, the backwards back
down. With one chunk per device, equal stage costs F and B and one link latency c, a device's backward runs
F + kL after its forward for a whole k, where L = F + B + 2c is the *cell*: if every microbatch starts at a
multiple of L, in a cell of its own, each device runs its forwards in the first F of some cells and its
backwards in the next B of others, and no two collide, whatever the set of cells. The set of cells is what
trades speed for memory: a microbatch holds its activations for its round trip, so the denser the cells, the
more microbatches are live at once. With several chunks the offsets on a device are not such multiples in
general; the construction is the same and the replay measures what it gives.

**The construction.** Cells follow a repeating *pattern* (a word of 1s and 0s: which cells of each repeat
start a microbatch), microbatches take its 1s in order. Forwards and backwards get their no-wait times; each
W then goes into the first gap of its device after its backward that is long enough. Each device's ops,
sorted by those times, are the schedule. Patterns are tried from the densest down, with cells of one and two
L, and the fastest that fits the budget is kept.

**Why the result is always a valid schedule.** Each device's order sorts its ops by (constructed time, place in
:meth:`~pipeplan.problem.Problem.ops_in_dependency_order`). Within a microbatch an op's time is at least its
dependency's end (plus the latency), so at least the dependency's time, and its place in that order is later:
along every dependency the key rises strictly, and along a device's order it never falls. A replay that waits
for both therefore never deadlocks (a cycle would need a key below itself): every op is run, each after its
dependencies, one at a time per device. Whether the budget holds is the replay's to say, as for every warm
start; :func:`fits` only skips, before a replay, orders whose budget check must fail. With unequal costs the
constructed times may overlap on a device; the order is still valid, only slower.

**Where it pays.** Where memory binds with two chunks per device, as on the benchmark family at P = 16,
N = 64, two chunks in loop placement, 11 activations: 199.1 against the 220.6 the search reached without it.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

from pipeplan.bounds import memory_binds
from pipeplan.metrics import Metrics, compute_metrics, within_budget
from pipeplan.periodic import least_period
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.simulate import simulate

log = logging.getLogger(__name__)

# Longest pattern (cells per repeat) tried.
MAX_PATTERN = 8
# Cell widths tried, as multiples of the cell.
CELL_MULTIPLES = (1, 2)
# Patterns slower than this multiple of the least rate the budget allows (least_rate) are not tried.
SLOWEST = 1.5
# Name of the schedule a lattice gives.
NAME = "lattice"


def cell(problem: Problem) -> float:
    """The cell L: the longest forward plus input-gradient backward of a model stage, plus two link latencies."""
    stages = range(problem.num_model_stages)
    work = max(problem.forward[s] + problem.backward[s] for s in stages)
    return work + 2 * max((problem.link_latency(s) for s in stages), default=0.0)


def patterns(max_length: int = MAX_PATTERN) -> Iterator[tuple[int, ...]]:
    """Every pattern up to ``max_length`` cells that starts a microbatch in its first cell and is not a shorter
    pattern repeated (``1010`` is ``10``)."""
    for length in range(1, max_length + 1):
        for rest in itertools.product((1, 0), repeat=length - 1):
            word = (1, *rest)
            if not any(length % k == 0 and word == word[:k] * (length // k) for k in range(1, length)):
                yield word


def start_cells(pattern: tuple[int, ...], count: int) -> list[int]:
    """The cells of the first ``count`` microbatches when cells follow ``pattern``."""
    ones = [i for i, use in enumerate(pattern) if use]
    return [len(pattern) * (m // len(ones)) + ones[m % len(ones)] for m in range(count)]


class _Chain(NamedTuple):
    """What every lattice of one problem shares: each forward's and backward's no-wait offset from its
    microbatch's first forward (keyed by kind and model stage), each op's place in
    :meth:`~pipeplan.problem.Problem.ops_in_dependency_order`, and the longest op."""

    offsets: dict[tuple[OpKind, int], float]
    rank: dict[Op, int]
    longest: float


def _chain(problem: Problem) -> _Chain:
    offsets: dict[tuple[OpKind, int], float] = {}
    at = 0.0
    chain = [(OpKind.F, s) for s in range(problem.num_model_stages)]
    chain += [(OpKind.B, s) for s in reversed(range(problem.num_model_stages))]
    for kind, stage in chain:
        op = problem.op(kind, stage, 0)
        at = max([at, *(offsets[dep.kind, dep.stage] + problem.duration(dep) + lag
                        for dep, lag in problem.dependencies(op))])
        offsets[kind, stage] = at
    rank = {op: i for i, op in enumerate(problem.ops_in_dependency_order())}
    return _Chain(offsets, rank, max([*problem.forward, *problem.backward, *problem.backward_weight]))


def _first_gap(busy: list[tuple[float, float]], ready: float, length: float, longest: float) -> float:
    """The earliest time >= ``ready`` at which ``length`` fits between the intervals of ``busy`` (sorted, none
    longer than ``longest``; they may overlap)."""
    at = ready
    for start, end in busy[bisect.bisect_left(busy, (ready - longest,)):]:
        if end <= at:
            continue
        if start >= at + length:
            break
        at = max(at, end)
    return at


def lattice_schedule(problem: Problem, cells: list[int], width: float, name: str = NAME,
                     chain: _Chain | None = None) -> Schedule:
    """The schedule whose microbatch m starts at ``cells[m] * width`` (see the module's docstring). ``chain`` is
    what the lattices of ``problem`` share, computed when None."""
    offsets, rank, longest = chain or _chain(problem)
    timed: list[list[tuple[float, int, Op]]] = [[] for _ in range(problem.num_devices)]
    for m, c in enumerate(cells):
        for (kind, stage), offset in offsets.items():
            op = problem.op(kind, stage, m)
            timed[problem.device_of(stage)].append((c * width + offset, rank[op], op))
    for ops in timed:
        if not problem.split_backward:
            break
        busy = sorted((at, at + problem.duration(op)) for at, _, op in ops)
        backwards = sorted(entry for entry in ops if entry[2].kind is OpKind.B)
        for at, _, op in backwards:
            weight = problem.op(OpKind.W, op.stage, op.microbatch)
            length = problem.duration(weight)
            start = _first_gap(busy, at + problem.duration(op), length, longest)
            ops.append((start, rank[weight], weight))
            bisect.insort(busy, (start, start + length))
    return Schedule.from_lists(name, [[op for _, _, op in sorted(ops)] for ops in timed])


def fits(problem: Problem, schedule: Schedule) -> bool:
    """Whether every device's orders stay within its budget, a quick check before a replay. A device runs its
    ops one after another, so when a forward starts, the memory live is what the forwards before it allocated
    less what the ops before it released, whatever the times; a replay counts less only when a zero-length op
    after it ends at that very instant. So the check is never more lenient than the replay: False skips an order
    the replay would reject (or, with such zero-length ops, one it might accept), True is confirmed by the
    replay."""
    if problem.budget is None:
        return True
    for order, room in zip(schedule.orders, problem.budget):
        live = 0.0
        for op in order:
            live += problem.allocated_by(op.kind, op.stage)
            if not within_budget([live], (room,)):
                return False
            live -= problem.released_by(op.kind, op.stage)
    return True


def least_rate(problem: Problem) -> float:
    """The least period per microbatch at which a long run fits the budget: Little's law
    (:func:`pipeplan.periodic.least_period`) over the devices that cannot hold every microbatch at once; 0 when
    there are none."""
    return least_period(problem, binding_only=True)


def search(problem: Problem, deadline: float = math.inf,
           should_stop: Callable[[], bool] = lambda: False) -> tuple[Schedule, Metrics] | None:
    """The fastest lattice schedule that fits the budget, over patterns up to :data:`MAX_PATTERN` cells and the
    cell widths of :data:`CELL_MULTIPLES`, densest first; None when memory does not bind, nothing tried fits,
    or ``time.monotonic()`` passes ``deadline`` or ``should_stop()`` before anything fits.

    Patterns whose rate (cell width per microbatch) is below the least rate the budget allows in a long run
    (:func:`least_rate`) are skipped, as are those more than :data:`SLOWEST` times above it: a heuristic (a short
    run can fit a faster pattern, and where memory barely binds every pattern may be skipped; the other warm
    starts serve there). The makespan decides between patterns whatever the solver's objective.
    """
    if problem.num_microbatches < 2 or not memory_binds(problem):
        return None
    least = least_rate(problem)
    base = cell(problem)
    if base <= 0 or time.monotonic() >= deadline or should_stop():
        return None
    tries = sorted(
        ((multiple * base * len(word) / sum(word), multiple, word) for multiple in CELL_MULTIPLES
         for word in patterns()),
    )
    chain = _chain(problem)
    best: tuple[Schedule, Metrics] | None = None
    seen: set[tuple[int, ...]] = set()  # start times in cells: patterns that agree on the first N give one schedule
    tried = 0
    for rate, multiple, word in tries:
        if rate < least - 1e-9 or rate > SLOWEST * least:
            continue
        cells = start_cells(word, problem.num_microbatches)
        if (starts := tuple(multiple * c for c in cells)) in seen:
            continue
        seen.add(starts)
        if time.monotonic() >= deadline or should_stop():
            log.info("lattice warm start: stopped after %d patterns", tried)
            break
        tried += 1
        schedule = lattice_schedule(problem, cells, multiple * base, chain=chain)
        if not fits(problem, schedule):
            continue
        metrics = compute_metrics(simulate(problem, schedule))
        if metrics.feasible and (best is None or metrics.makespan < best[1].makespan):
            best = (schedule, metrics)
    if best is not None:
        log.info("lattice warm start: %d patterns tried, best makespan %g", tried, best[1].makespan)
    return best
