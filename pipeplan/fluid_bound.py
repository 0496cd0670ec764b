"""A lower bound from one device's ops counted over time: the fluid relaxation, a linear programme.

The closed-form bounds of :mod:`pipeplan.bounds` charge a device its work, the idle time its head and tail
windows force and the memory-time area its activations need, each on its own. With two or more chunks per
device, where memory binds, what they miss is how the chunks share the budget over time: a microbatch holds its
first chunk's activation for a whole round trip and its second chunk's for part of it, so while the pipeline
fills and drains the budget cannot be kept full. This module counts, for one device, how many microbatches have
passed each point of their chain by each time, and asks a linear programme whether those counts can reach N by
a given time.

**Events and counts.** Fix a device d. Its *events* are, for every stage s it holds: the start of F(s), the end
of B(s) and, when the backward is split, the end of W(s). For a schedule within the budget and an event e, let
x_e(t) be how many microbatches have had their e at or before time t. Then, with T the schedule's objective:

- *monotone*: x_e rises from 0 to at most N;
- *heads and tails*: no e happens before its head (the longest dependency chain before it, as in
  :func:`pipeplan.device_bound.chains`), so x_e(t) = 0 for t below it; for the makespan every e happens at
  least its tail (the chain still to run after it) before T, so x_e(T - tail) = N. For the stage span, times
  count from d's first op: every event of a microbatch follows its F on d's lowest stage, an op of d, by the
  chain between them, and every op of d ends by T;
- *lags*: if event v of a microbatch follows its event u by a chain of least length g, every microbatch with its
  v by t had its u by t - g: x_v(t) <= x_u(t - g);
- *budget*: right after every time t the live memory, the forwards' activations less what the ended B and W
  released (the problem's memory rules), sum over s of act(s) x_F(s)(t) - rel_B(s) x_B(s)(t) - rel_W(s)
  x_W(s)(t), is at most d's budget;
- *one op at a time*: the ops of d that end in a window (a, b] take at most b - a plus one op (the one running
  at a), those that end by b at most b, those that end after a at most T - a plus one op. An F ends its length
  after its start, so the F that end by t are x_F(t - F).

None of this asks for microbatch order or integer counts, so it relaxes every schedule of the problem.

**The grid.** The programme keeps the counts at the times k delta, k = 0 .. K, and writes each condition so
that the counts of any schedule with T <= K delta, read at those times, meet it: a lag g becomes floor(g /
delta) steps (x_u is rising, so x_u(k delta - g) <= x_u((k - floor(g / delta)) delta)); the F that end by k
delta are at least x_F at k - ceil(F / delta) steps and at most x_F at k - floor(F / delta), whichever the
window needs; a tail becomes floor(tail / delta) steps back from K. Lags are written for every pair of events
of the device, each rounded once, so that a microbatch's long chains lose at most one step each.

**The bound.** If a schedule has objective T, the programme is feasible for every K with K delta >= T; so if it is
infeasible for K, every schedule has T > K delta. The programme for K + 1 is feasible whenever the one for K is
(every count delayed by one step still meets every condition), so :func:`device_bound` bisects for the largest such
K. The roundings are computed exactly (in fractions of the grid step), and a verdict the linear solver cannot give
counts as feasible, which only weakens the bound. The grid has :data:`STEPS` steps over the best schedule's
objective: on the split-backward family at P = 16, N = 32, two chunks in loop placement, budget 6, device 0 proves
156.47 on 600 steps over 166.75 (6 s on one core; 9 s with the rows built one by one, the same day), against 142.19
from the closed forms (a relaxed schedule of device 0 alone takes 157.53, so little more is left to prove on that
device). Finer grids could prove more, but their programmes take longer: on 1,300 steps several exceed
:data:`LP_LIMIT_S`, count as feasible, and the bound is 152.26 after 105 s (112 s with the rows built one by one).

**Building the programme.** Every condition above is a family of rows, one per grid time, whose terms are the
same events shifted by fixed numbers of steps; each family is laid out as arrays at once and the programme handed
to the linear solver as one sparse matrix. Built a row at a time through the solver's Python API, the programme
took longer to build than to solve (P = 32, N = 64, two chunks in loop placement, budget 11, the whole bound
given 14 s: 19 programmes, 9.5 of the 13.9 s spent building them, the fine pass cut short); built as arrays, the
bound finishes, all 43 programmes, in 8.8 s, 0.6 s of it outside the solver.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from ortools.linear_solver.python import model_builder_helper
from scipy import sparse

from pipeplan.device_bound import OBJECTIVES, Chains, chains, devices_to_try
from pipeplan.problem import Op, OpKind, Problem

log = logging.getLogger(__name__)

# Grid points over the best schedule's objective: the fine pass on the devices the screen ranks first, and the
# screen of every device whose budget binds.
STEPS = 600
SCREEN_STEPS = 300
# How many devices the fine pass tries, best screened first.
FINE_TRIES = 2
# Window lengths (grid steps) of the one-op-at-a-time conditions, besides the prefixes and suffixes.
WINDOWS = (8, 16, 32, 64)
# Seconds one linear programme may take at most, and the linear solvers tried in turn until one gives a verdict.
LP_LIMIT_S = 10.0
_BACKENDS = ("GLOP", "HIGHS")
# Slack added to every right-hand side so that the linear solver's rounding can only make the programme more
# feasible (a weaker bound), never less.
_SLACK = 1e-6


@dataclass(frozen=True)
class _Event:
    """One event of the device: the start (F) or end (B, W) of microbatch 0's op."""

    op: Op
    at_start: bool


def _events(problem: Problem, device: int) -> list[_Event]:
    events = []
    for stage in problem.stages_on_device(device):
        events.append(_Event(problem.op(OpKind.F, stage, 0), True))
        events.append(_Event(problem.op(OpKind.B, stage, 0), False))
        if problem.split_backward:
            events.append(_Event(problem.op(OpKind.W, stage, 0), False))
    return events


def feasible(ticked: Problem, device: int, objective: str, step: float, horizon: int,
             found: Chains | None = None, deadline: float = math.inf) -> bool:
    """Whether the fluid programme of ``device`` (see the module docstring) meets every condition with the
    objective at most ``horizon`` x ``step`` (ticks). True also when the linear solver gives no verdict (by
    ``deadline`` too). ``found``: the problem's :func:`~pipeplan.device_bound.chains`, when already computed."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    n = ticked.num_microbatches
    budget = ticked.budget
    if budget is None:
        return True
    found = found or chains(ticked)
    events = _events(ticked, device)
    length = {e: ticked.duration(e.op) for e in events}
    lowest = events[0].op  # F on the device's lowest stage
    grid = Fraction(step)  # exact, so that every rounding below goes the way the argument needs
    times = np.arange(horizon + 1)
    rows = _Rows(len(events), horizon)

    def down(time_: float) -> int:
        """Whole steps within ``time_``."""
        return math.floor(Fraction(time_) / grid)

    def up(time_: float) -> int:
        """The fewest whole steps that reach ``time_``."""
        return math.ceil(Fraction(time_) / grid)

    def lag(u: _Event, v: _Event) -> float:
        """The least time from u to v in one microbatch's chain."""
        gap = found.after[u.op][v.op]
        return (length[u] if u.at_start else 0.0) + gap + (0.0 if v.at_start else length[v])

    for i, e in enumerate(events):
        own = 0.0 if e.at_start else length[e]
        if objective == "makespan":
            head, tail = found.head[e.op] + own, found.tail[e.op] + length[e] - own
        else:
            head = lag(_Event(lowest, True), e) if e.op in found.after[lowest] else 0.0
            tail = length[e] - own
        first = up(head)  # no microbatch has had e at the grid times before this one
        last = horizon - down(tail)  # from here on every microbatch has had e
        if last < 0 or last < first:
            return False  # e would have to happen before its head
        rows.fix(i, first, last, n)
        rows.add([(i, 0, 1.0), (i, 1, -1.0)], np.zeros(horizon))  # monotone: x_e(k) <= x_e(k + 1)
    for i, u in enumerate(events):
        for j, v in enumerate(events):
            if v.op in found.after[u.op]:
                rows.add([(j, 0, 1.0), (i, -down(lag(u, v)), -1.0)], np.zeros(horizon + 1))
    # Memory in budgets and time in steps, so that the linear solver sees numbers near 1.
    scale = budget[device] if budget[device] > 0 else 1.0
    rows.add([(i, 0, _memory(ticked, e) / scale) for i, e in enumerate(events)],
             np.full(horizon + 1, _loose(budget[device] / scale)))

    def ended(most: bool, factor: float = 1.0) -> list[_Term]:
        """Work (steps) of the ops ended by each grid time, at least (``most`` False) or at most as the counts
        read, times ``factor``."""
        terms = []
        for i, e in enumerate(events):
            back = (down(length[e]) if most else up(length[e])) if e.at_start else 0
            terms.append((i, -back, factor * length[e] / step))
        return terms

    work = sum(length[e] for e in events) * n / step
    longest = max(length.values()) / step
    least, most_less = ended(False), ended(True, -1.0)
    rows.add(least, _loose(times))
    rows.add(most_less, _loose(horizon - times + longest) - work)
    for width in WINDOWS:
        if width <= horizon:
            rows.add([*[(i, width + shift, c) for i, shift, c in least], *most_less],
                     np.full(horizon + 1 - width, _loose(width + longest)))
    if rows.impossible:
        return False
    return _infeasible(rows.programme(), deadline) is not True


# One term of a family of rows: an event's index, the grid shift (its count at row k + shift; none before grid
# time 0) and its coefficient.
_Term = tuple[int, int, float]


class _Rows:
    """The programme's rows, built a family at a time as sparse arrays (one row per grid time of the family), and
    its variables' bounds: the count of event i at grid time k is variable i x (horizon + 1) + k."""

    def __init__(self, events: int, horizon: int) -> None:
        self.width = horizon + 1
        self.lower, self.upper = np.zeros(events * self.width), np.zeros(events * self.width)
        self.rows: list[np.ndarray] = []
        self.columns: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.uppers: list[np.ndarray] = []
        self.count = 0  # rows so far
        self.impossible = False  # a row without variables whose bound is below 0

    def fix(self, event: int, first: int, last: int, n: float) -> None:
        """Event ``event``'s count lies between 0 and ``n``: 0 before grid time ``first``, ``n`` from ``last`` on.
        Every event's bounds must be set so before the programme is built (an event left out stays at 0)."""
        base = event * self.width
        self.upper[base + first:base + self.width] = n
        self.lower[base + last:base + self.width] = n

    def add(self, terms: list[_Term], bounds: np.ndarray) -> None:
        """Rows k = 0 .. len(bounds) - 1: the sum of coefficient x count of the event at k + shift, over
        ``terms``, is at most bounds[k]. A term whose grid time falls before 0 is left out (every count is 0
        there); one past the horizon is refused, as no condition of the argument reads a count there."""
        count = len(bounds)
        first = self.count
        at = np.arange(count)
        used = np.zeros(count, dtype=bool)
        for event, shift, coefficient in terms:
            k = at + shift
            if count and k[-1] >= self.width:
                raise ValueError(f"a row reads a count at grid time {k[-1]}, past the horizon {self.width - 1}")
            inside = k >= 0
            used |= inside
            self.rows.append(first + at[inside])
            self.columns.append(event * self.width + k[inside])
            self.values.append(np.full(int(inside.sum()), coefficient))
        if np.any(~used & (bounds < 0)):
            self.impossible = True
        self.uppers.append(np.asarray(bounds, dtype=float))
        self.count += count

    def programme(self) -> model_builder_helper.ModelBuilderHelper:
        """The linear programme (no objective) of the rows so far; repeated variables in a row are summed."""
        size = len(self.lower)
        uppers = np.concatenate(self.uppers)
        matrix = sparse.csr_matrix(
            (np.concatenate(self.values), (np.concatenate(self.rows), np.concatenate(self.columns))),
            shape=(len(uppers), size),
        )
        helper = model_builder_helper.ModelBuilderHelper()
        no_objective, no_lower = np.zeros(size), np.full(len(uppers), -np.inf)
        fill: Any = helper.fill_model_from_sparse_data  # OR-Tools' stubs spell its array types wrongly
        fill(self.lower, self.upper, no_objective, no_lower, uppers, matrix)
        return helper


def _loose(bound: Any) -> Any:
    """A right-hand side (a number or an array of them) with :data:`_SLACK` relative room (at least absolute)."""
    return bound + _SLACK * np.maximum(1.0, np.abs(bound))


def _infeasible(programme: model_builder_helper.ModelBuilderHelper, deadline: float) -> bool | None:
    """Whether the programme is proven infeasible (True), solved (False) or neither (None). GLOP is fast but
    sometimes ends ABNORMAL on these programmes (its dual simplex can also cycle: both seen at P = 32); HiGHS,
    slower, then gets the same programme. Each solve takes at most :data:`LP_LIMIT_S` and stops at ``deadline``."""
    statuses = model_builder_helper.SolveStatus
    for backend in _BACKENDS:
        left = min(LP_LIMIT_S, deadline - time.monotonic())
        if left <= 0:
            return None
        solver = model_builder_helper.ModelSolverHelper(backend)
        if not solver.solver_is_supported():
            log.debug("no %s in this OR-Tools", backend)
            continue
        if backend == "HIGHS":
            solver.set_solver_specific_parameters("output_flag=false")  # HiGHS prints while reading otherwise
        solver.set_time_limit_in_seconds(left)
        solver.solve(programme)
        status = solver.status()
        if status == statuses.INFEASIBLE:
            return True
        if status in (statuses.OPTIMAL, statuses.FEASIBLE):
            return False
        log.debug("%s gave no verdict (status %s)", backend, status)
    return None


def _memory(problem: Problem, e: _Event) -> float:
    """What event ``e`` adds to the live memory: a forward's activation, minus what a B or W releases."""
    if e.at_start:
        return problem.allocated_by(e.op.kind, e.op.stage)
    return -problem.released_by(e.op.kind, e.op.stage)


def device_bound(ticked: Problem, device: int, objective: str, low: float, high: float, steps: int = STEPS,
                 deadline: float = math.inf, found: Chains | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> float:
    """The largest K x step (ticks) below every schedule's objective that the fluid programme of ``device``
    proves on a grid of ``steps`` steps over ``high`` (an objective some schedule reaches), bisecting between
    ``low`` (a bound already proven) and ``high``; ``low`` when it proves nothing above it or ``deadline``
    (``time.monotonic()``) passes or ``should_stop()`` says so first. ``found``: as for :func:`feasible`."""
    if high <= 0 or ticked.budget is None:
        return low
    step = high / steps
    found = found or chains(ticked)
    infeasible = int(math.floor(low / step))
    # The programme is feasible at `steps` whenever `high` is a schedule's objective (but for `step`'s rounding,
    # which can leave `steps` steps a hair short of `high`; the bisection never solves it: it only stays below).
    top = steps
    if infeasible >= top or feasible(ticked, device, objective, step, infeasible, found, deadline):
        return low
    while top - infeasible > 1 and time.monotonic() < deadline and not should_stop():
        middle = (infeasible + top) // 2
        if feasible(ticked, device, objective, step, middle, found, deadline):
            top = middle
        else:
            infeasible = middle
    return max(low, infeasible * step)


def lower_bound(ticked: Problem, objective: str, low: float, high: float, deadline: float = math.inf,
                should_stop: Callable[[], bool] = lambda: False) -> float:
    """The best fluid bound (ticks) over the devices whose budget binds. A screen on a coarse grid
    (:data:`SCREEN_STEPS`) goes through them in the order of :func:`pipeplan.device_bound.devices_to_try`, each
    asked to beat the best bound so far (one programme when it cannot); then the :data:`FINE_TRIES` with the
    highest screened bounds are bisected again on the fine grid (:data:`STEPS`). ``low`` is a bound already
    proven, ``high`` an objective some schedule reaches; the result is never below ``low``. The screen takes at
    most half the time to ``deadline``; both stop when ``should_stop()`` says so."""
    devices = devices_to_try(ticked)
    if not devices or high <= low:
        return low
    found = chains(ticked)
    started = time.monotonic()
    screen_until = started + (deadline - started) / 2
    raised: list[tuple[float, int]] = []
    best = low
    tried = 0
    for device in devices:
        if time.monotonic() >= screen_until or should_stop():
            break
        tried += 1
        bound = device_bound(ticked, device, objective, best, high, SCREEN_STEPS, screen_until, found, should_stop)
        if bound > best:
            raised.append((bound, device))
            best = bound
    log.info("fluid screen: %d of %d devices, best %s ticks", tried, len(devices), best)
    for screened, device in sorted(raised, key=lambda item: (-item[0], item[1]))[:FINE_TRIES]:
        if time.monotonic() >= deadline or should_stop() or best >= high:
            break
        fine = device_bound(ticked, device, objective, best, high, STEPS, deadline, found, should_stop)
        log.info("fluid bound of device %d: %s ticks (screen %s)", device, fine, screened)
        best = max(best, fine)
    return best
