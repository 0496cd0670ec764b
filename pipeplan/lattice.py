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
start a microbatch), microbatches take its 1s in order (or the greedy below picks the cells). Forwards and
backwards get their no-wait times; each W then goes into the first gap of its device after its backward that
is long enough. Each device's ops, sorted by those times, are the schedule. Patterns are tried from the
densest down, with cells of one and two L, and the fastest that fits the budget is kept.

**The greedy lattice.** A pattern fills the pipeline at its steady rate, though at the start nothing is live
yet. :func:`greedy_schedule` instead gives each microbatch in turn the earliest cell after the previous one's
where the budget holds (and, strictly, where its forwards and backwards meet none already placed): the pipeline
fills as fast as memory allows, and the cells then settle into whatever rate the budget sustains. It is tried
before the patterns: on the benchmark family at P = 16, N = 64, two chunks in loop placement, 6 activations, it
gives 302.8 where the best pattern gives 345.1 and the search without any lattice 339.1.

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
from collections.abc import Callable, Iterator, Sequence
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
# The greedy lattice is also tried with caps of 1 .. this many fewer microbatches in flight than it had without a
# cap, or more where its peak is large (GREEDY_CAP_DIVISOR).
GREEDY_CAPS = 3
# ... down to a sixth (this divisor) of the peak below it: on the benchmark family at P = 32, N = 64, two chunks in
# loop placement, budget 22, the greedy lattice peaks at 30 in flight (226.85) and is fastest at 26 (216.25).
GREEDY_CAP_DIVISOR = 6
# Name of the schedule a lattice gives.
NAME = "lattice"
# Two times closer than this count as equal when checking that ops do not overlap.
_TIME_SLACK = 1e-9


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
        weights = [(at + problem.duration(op), problem.op(OpKind.W, op.stage, op.microbatch))
                   for at, _, op in backwards]
        ops.extend((at, rank[weight], weight) for weight, at in _fill_gaps(problem, busy, weights, longest).items())
    return Schedule.from_lists(name, [[op for _, _, op in sorted(ops)] for ops in timed])


def _fill_gaps(problem: Problem, busy: list[tuple[float, float]], weights: list[tuple[float, Op]],
               longest: float) -> dict[Op, float]:
    """Where each of ``weights`` ((ready time, W), in the order given) starts: the first gap of ``busy`` after
    its ready time that is long enough (:func:`_first_gap`); each one placed is added to ``busy``."""
    where = {}
    for ready, weight in weights:
        length = problem.duration(weight)
        where[weight] = at = _first_gap(busy, ready, length, longest)
        bisect.insort(busy, (at, at + length))
    return where


class _Device:
    """One device of a growing greedy lattice (:func:`greedy_schedule`).

    Forwards and input-gradient backwards keep their no-wait times once placed: ``ops`` holds them with those times,
    ``fixed`` their busy intervals and ``entries`` their (time, dependency rank, memory allocated at the start,
    memory released at the end), the last two sorted. Each W goes into the first gap after its backward, as in
    :func:`lattice_schedule`, and the W's are placed again, in order, whenever a microbatch is added, so a later
    microbatch's ops can move one (later, or earlier when the W before it moved away): ``open`` holds the W's that
    may still move (backward's end, rank, op), ``placed`` where every W is now, and ``done`` the busy intervals of
    the W's that can no longer move. The *frontier* is the start of the latest placed microbatch's first op here: no
    later microbatch has an op before it. What lies before it is final, except that a W may move earlier, which only
    releases memory sooner: ``live`` is the memory its ops leave, ``settled`` counts its entries.
    """

    def __init__(self, problem: Problem, room: float, rank: dict[Op, int], longest: float) -> None:
        self.problem, self.room, self.rank, self.longest = problem, room, rank, longest
        self.ops: list[tuple[float, Op]] = []  # the placed forwards and backwards, with their times
        self.fixed: list[tuple[float, float]] = []
        self.entries: list[tuple[float, int, float, float]] = []
        self.open: list[tuple[float, int, Op]] = []
        self.placed: dict[Op, float] = {}
        self.done: list[tuple[float, float]] = []
        self.settled = 0
        self.live = 0.0

    def settle(self, frontier: float) -> None:
        """Fold what lies before ``frontier`` into ``live``, W's that start before it included (they no longer
        move: a later op cannot come before them in the device's order)."""
        while self.settled < len(self.entries) and self.entries[self.settled][0] < frontier:
            _, _, allocated, released = self.entries[self.settled]
            self.live += allocated - released
            self.settled += 1
        still = []
        for entry in self.open:
            op = entry[2]
            if self.placed[op] < frontier:
                self.live -= self.problem.released_by(op.kind, op.stage)
                bisect.insort(self.done, (self.placed[op], self.placed[op] + self.problem.duration(op)))
            else:
                still.append(entry)
        self.open = still

    def free(self, start: float, end: float) -> bool:
        """Whether [start, end) overlaps no placed forward or backward and no W that can no longer move."""
        return _clear(self.fixed, start, end) and _clear(self.done, start, end)

    def trial(self, ops: list[tuple[float, Op]], weights: list[tuple[float, int, Op]]) -> dict[Op, float] | None:
        """Where the open W's and ``weights`` go with the forwards and backwards ``ops`` added, or None when the
        budget is exceeded then."""
        problem, rank = self.problem, self.rank
        pending = sorted([*self.open, *weights])
        earliest = min([*(entry[0] for entry in pending), *(at for at, _ in ops)]) - self.longest
        busy = sorted([*self.fixed[bisect.bisect_left(self.fixed, (earliest,)):],
                       *self.done[bisect.bisect_left(self.done, (earliest,)):],
                       *((at, at + problem.duration(op)) for at, op in ops)])
        where = _fill_gaps(problem, busy, [(ready, op) for ready, _, op in pending], self.longest)
        entries = self.entries[self.settled:]
        entries += [(at, rank[op], *_memory(problem, op)) for at, op in ops]
        entries += [(at, rank[op], *_memory(problem, op)) for op, at in where.items()]
        live = self.live
        for _, _, allocated, released in sorted(entries):
            live += allocated
            if allocated > 0 and not within_budget([live], (self.room,)):
                return None
            live -= released
        return where

    def commit(self, ops: list[tuple[float, Op]], weights: list[tuple[float, int, Op]],
               where: dict[Op, float]) -> None:
        """Place ``ops`` and ``weights``, with every W where :meth:`trial` put it."""
        for at, op in ops:
            bisect.insort(self.fixed, (at, at + self.problem.duration(op)))
            bisect.insort(self.entries, (at, self.rank[op], *_memory(self.problem, op)))
        self.ops.extend(ops)
        self.open.extend(weights)
        self.placed.update(where)

    def order(self) -> list[Op]:
        """The device's ops sorted by (time, dependency rank)."""
        timed = [(at, self.rank[op], op) for at, op in self.ops]
        timed += [(at, self.rank[op], op) for op, at in self.placed.items()]
        return [op for _, _, op in sorted(timed)]


def _clear(intervals: list[tuple[float, float]], start: float, end: float) -> bool:
    """Whether [start, end) overlaps none of ``intervals`` (sorted, none overlapping another)."""
    i = bisect.bisect_left(intervals, (start,))
    if i > 0 and intervals[i - 1][1] > start + _TIME_SLACK:
        return False
    return i == len(intervals) or intervals[i][0] >= end - _TIME_SLACK


def greedy_schedule(problem: Problem, width: float, strict: bool = True, cap: int | None = None,
                    chain: _Chain | None = None, deadline: float = math.inf) -> Schedule | None:
    """The schedule of :func:`greedy_lattice`, or None as it."""
    found = greedy_lattice(problem, width, strict, cap, chain, deadline)
    return None if found is None else found[0]


def greedy_lattice(problem: Problem, width: float, strict: bool = True, cap: int | None = None,
                   chain: _Chain | None = None, deadline: float = math.inf) -> tuple[Schedule, int] | None:
    """A lattice whose cells are chosen one microbatch at a time: each starts in the earliest cell after the
    previous microbatch's where its forwards and input-gradient backwards, at their no-wait times, meet no
    forward or backward already placed, and every device stays within its budget once the W's are put into the
    first gaps after their backwards (as in :func:`lattice_schedule`). Unlike a pattern, this fills the pipeline
    as densely as the budget allows and then settles into whatever rate the budget allows. Returns the schedule
    and the most microbatches in flight at once (see ``cap``); None without a budget or a positive ``width``,
    when a microbatch fits nowhere, or when ``time.monotonic()`` passes ``deadline``.

    With ``strict`` False a microbatch's forwards and backwards may meet placed ops (the replay then runs one of
    them later), which suits V placement, whose offsets rarely leave a cell free. With a ``cap``, a microbatch
    also waits until fewer than ``cap`` earlier ones are *in flight* (their last backward, at its no-wait time,
    not yet ended): fewer in flight than memory allows can leave room that keeps the pipeline moving later (on
    the benchmark family at P = 16, N = 32, two chunks in loop placement, budget 11: 15 in flight without a cap,
    113.43; 109.19 with a cap of 13). Either way the orders pass :func:`fits`: a microbatch is only placed when
    every device's order, from its first op on the device, stays within the budget, and the memory before that
    point can only fall afterwards (later ops come after it in the order, a W that starts before it no longer
    moves, and one that moves earlier releases sooner)."""
    if cap is not None and cap < 1:
        raise ValueError(f"cap must be at least 1, not {cap}")
    budget = problem.budget
    if budget is None or width <= 0:
        return None
    offsets, rank, longest = chain or _chain(problem)
    devices = [_Device(problem, room, rank, longest) for room in budget]
    first: dict[int, float] = {}  # per device, the least offset of its ops in a microbatch
    for (_, stage), offset in offsets.items():
        d = problem.device_of(stage)
        first[d] = min(first.get(d, math.inf), offset)
    home = offsets[OpKind.B, 0] + problem.backward[0]  # from a microbatch's start to the end of its last B
    ends: list[float] = []  # each placed microbatch's no-wait end of its last backward, rising
    cell_at = 0
    last_end = 0.0
    peak = 0
    for m in range(problem.num_microbatches):
        while True:
            if time.monotonic() >= deadline:
                return None
            start = cell_at * width
            flying = len(ends) - bisect.bisect_right(ends, start + _TIME_SLACK)  # earlier ones in flight
            if cap is None or flying < cap:
                trial = _place(problem, m, start, offsets, rank, devices, strict)
                if trial is not None:
                    break
            if start > last_end:
                return None  # nothing runs any more: the microbatch alone exceeds a budget
            cell_at += 1
        peak = max(peak, 1 + flying)
        ends.append(start + home)
        for d, (ops, weights, where) in trial.items():
            devices[d].commit(ops, weights, where)
            devices[d].settle(start + first[d])
            last_end = max([last_end, *(at + problem.duration(op) for at, op in ops),
                            *(at + problem.duration(op) for op, at in where.items())])
        cell_at += 1
    return Schedule.from_lists(NAME, [device.order() for device in devices]), peak


# Per device: a microbatch's forwards and backwards (time, op), its W's (ready time, rank, op), and where every
# W that may still move goes.
_Trial = dict[int, tuple[list[tuple[float, Op]], list[tuple[float, int, Op]], dict[Op, float]]]


def _place(problem: Problem, m: int, start: float, offsets: dict[tuple[OpKind, int], float],
           rank: dict[Op, int], devices: list[_Device], strict: bool) -> _Trial | None:
    """Per device, microbatch m's forwards and backwards, its W's and where every open W goes, when m starts
    at ``start``; None when a budget is exceeded or, ``strict``, when one of its forwards or backwards meets a
    placed forward or backward or a W that no longer moves."""
    ops: dict[int, list[tuple[float, Op]]] = {}
    weights: dict[int, list[tuple[float, int, Op]]] = {}
    for (kind, stage), offset in offsets.items():
        op = problem.op(kind, stage, m)
        at = start + offset
        d = problem.device_of(stage)
        if strict and not devices[d].free(at, at + problem.duration(op)):
            return None
        ops.setdefault(d, []).append((at, op))
        if kind is OpKind.B and problem.split_backward:
            weight = problem.op(OpKind.W, stage, m)
            weights.setdefault(d, []).append((at + problem.duration(op), rank[weight], weight))
    trial: _Trial = {}
    for d, device in enumerate(devices):
        for_d, weights_d = ops.get(d, []), weights.get(d, [])
        where = device.trial(for_d, weights_d)
        if where is None:
            return None
        trial[d] = (for_d, weights_d, where)
    return trial


def _memory(problem: Problem, op: Op) -> tuple[float, float]:
    """(what ``op`` allocates when it starts, what it releases when it ends)."""
    return problem.allocated_by(op.kind, op.stage), problem.released_by(op.kind, op.stage)


def fits(problem: Problem, schedule: Schedule) -> bool:
    """Whether every device's orders stay within its budget, a quick check before a replay. A device runs its
    ops one after another, so when a forward starts, the memory live is what the forwards before it allocated
    less what the ops before it released, whatever the times; a replay counts less only when a zero-length op
    after it ends at that very instant. So the check is never more lenient than the replay: False skips an order
    the replay would reject (or, with such zero-length ops, one it might accept), True is confirmed by the
    replay."""
    if problem.budget is None:
        return True
    return all(order_fits(problem, order, room) for order, room in zip(schedule.orders, problem.budget))


def order_fits(problem: Problem, order: Sequence[Op], room: float) -> bool:
    """Whether one device's ``order`` stays within ``room`` (its budget), counted as :func:`fits` counts it."""
    live = 0.0
    for op in order:
        allocated, released = _memory(problem, op)
        live += allocated
        if not within_budget([live], (room,)):
            return False
        live -= released
    return True


def greedy_caps(peak: int) -> int:
    """How many caps the greedy lattice is tried with when it had ``peak`` microbatches in flight without one:
    1 .. this many fewer (:data:`GREEDY_CAPS`, or the peak over :data:`GREEDY_CAP_DIVISOR` when that is
    more)."""
    return max(GREEDY_CAPS, peak // GREEDY_CAP_DIVISOR)


def least_rate(problem: Problem) -> float:
    """The least period per microbatch at which a long run fits the budget: Little's law
    (:func:`pipeplan.periodic.least_period`) over the devices that cannot hold every microbatch at once; 0 when
    there are none."""
    return least_period(problem, binding_only=True)


def search(problem: Problem, deadline: float = math.inf,
           should_stop: Callable[[], bool] = lambda: False,
           patterns_until: float = math.inf) -> tuple[Schedule, Metrics] | None:
    """The fastest lattice schedule that fits the budget: the greedy lattices (:func:`greedy_lattice`, with and
    without letting a microbatch's forwards and backwards meet placed ops, each with no cap and then with caps of
    1 .. :func:`greedy_caps` fewer microbatches in flight than it had without one: the form that did better
    without a cap first, each from the smallest cut), then patterns up to :data:`MAX_PATTERN` cells with the cell
    widths of :data:`CELL_MULTIPLES`, densest first, until ``patterns_until`` (``time.monotonic()``; at the latest
    ``deadline``); None when memory does not bind, nothing tried fits, or ``time.monotonic()`` passes ``deadline``
    or ``should_stop()`` before anything fits.

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

    replayed: set[tuple[tuple[Op, ...], ...]] = set()  # caps often give the same orders

    def consider(schedule: Schedule | None) -> float:
        """The schedule's makespan when it fits and is new (inf otherwise); the best so far is kept."""
        nonlocal best
        if schedule is None or schedule.orders in replayed or not fits(problem, schedule):
            return math.inf
        replayed.add(schedule.orders)
        metrics = compute_metrics(simulate(problem, schedule))
        if not metrics.feasible:
            return math.inf
        if best is None or metrics.makespan < best[1].makespan:
            best = (schedule, metrics)
        return metrics.makespan

    uncapped = []  # (makespan, not strict, peak) of each form of the greedy without a cap: the better first
    for strict in (True, False):
        if should_stop():
            break
        found = greedy_lattice(problem, base, strict, chain=chain, deadline=deadline)
        if found is not None:
            uncapped.append((consider(found[0]), not strict, found[1]))
    # The caps of the form that did better first (strict in loop placement, the other in V, on the benchmark
    # family): where each greedy takes a second (P = 32), the time share may not reach the other's.
    for _, loose, peak in sorted(uncapped):
        for fewer in range(1, greedy_caps(peak) + 1):
            if peak - fewer >= 1 and not should_stop():
                consider(greedy_schedule(problem, base, not loose, peak - fewer, chain, deadline))
    if best is not None:
        log.info("lattice warm start: greedy lattice makespan %g", best[1].makespan)
    seen: set[tuple[int, ...]] = set()  # start times in cells: patterns that agree on the first N give one schedule
    tried = 0
    patterns_end = min(deadline, patterns_until)
    for rate, multiple, word in tries:
        if rate < least - 1e-9 or rate > SLOWEST * least:
            continue
        cells = start_cells(word, problem.num_microbatches)
        if (starts := tuple(multiple * c for c in cells)) in seen:
            continue
        seen.add(starts)
        if time.monotonic() >= patterns_end or should_stop():
            log.info("lattice warm start: stopped after %d patterns", tried)
            break
        tried += 1
        consider(lattice_schedule(problem, cells, multiple * base, chain=chain))
    if best is not None:
        log.info("lattice warm start: %d patterns tried, best makespan %g", tried, best[1].makespan)
    return best
