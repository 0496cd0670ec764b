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
156.47 on 600 steps over 166.75 (5 s on one core), against 142.19 from the closed forms (a relaxed schedule of
device 0 alone takes 157.53, so little more is left to prove on that device). Finer grids could prove more, but
their programmes take longer: on 1,300 steps several exceed :data:`LP_LIMIT_S`, count as feasible, and the bound is
152.26 after 97 s.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from ortools.linear_solver import linear_solver_pb2, pywraplp

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
    solver = pywraplp.Solver.CreateSolver("GLOP")
    counts = {e: [solver.NumVar(0.0, n, "") for _ in range(horizon + 1)] for e in events}
    grid = Fraction(step)  # exact, so that every rounding below goes the way the argument needs

    def down(time_: float) -> int:
        """Whole steps within ``time_``."""
        return math.floor(Fraction(time_) / grid)

    def up(time_: float) -> int:
        """The fewest whole steps that reach ``time_``."""
        return math.ceil(Fraction(time_) / grid)

    def shifted(e: _Event, k: int) -> list[_Term]:
        """e's count at grid time k as terms (none before time 0, where every count is 0)."""
        return [(counts[e][k], 1.0)] if k >= 0 else []

    def lag(u: _Event, v: _Event) -> float:
        """The least time from u to v in one microbatch's chain."""
        gap = found.after[u.op][v.op]
        return (length[u] if u.at_start else 0.0) + gap + (0.0 if v.at_start else length[v])

    for e in events:
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
        for k in range(first):
            counts[e][k].SetUb(0.0)
        for k in range(last, horizon + 1):
            counts[e][k].SetLb(n)
        for k in range(horizon):
            _at_most(solver, [(counts[e][k], 1.0), (counts[e][k + 1], -1.0)], 0.0)
    for u in events:
        for v in events:
            if v.op not in found.after[u.op]:
                continue
            g = down(lag(u, v))
            for k in range(horizon + 1):
                _at_most(solver, [(counts[v][k], 1.0), *_scaled(shifted(u, k - g), -1.0)], 0.0)
    # Memory in budgets and time in steps, so that the linear solver sees numbers near 1.
    scale = budget[device] if budget[device] > 0 else 1.0
    for k in range(horizon + 1):
        live = [(counts[e][k], _memory(ticked, e) / scale) for e in events]
        _at_most(solver, live, _loose(budget[device] / scale))

    def ended(k: int, most: bool) -> list[_Term]:
        """Work (steps) of the ops ended by k x step, at least (``most`` False) or at most as the counts read."""
        total: list[_Term] = []
        for e in events:
            if e.at_start:
                back = down(length[e]) if most else up(length[e])
                total += _scaled(shifted(e, k - back), length[e] / step)
            else:
                total.append((counts[e][k], length[e] / step))
        return total

    least = [ended(k, False) for k in range(horizon + 1)]
    most = [ended(k, True) for k in range(horizon + 1)]
    work = sum(length[e] for e in events) * n / step
    longest = max(length.values()) / step
    for k in range(horizon + 1):
        _at_most(solver, least[k], _loose(k))
        _at_most(solver, _scaled(most[k], -1.0), _loose(horizon - k + longest) - work)
    for width in WINDOWS:
        for k in range(horizon + 1 - width):
            _at_most(solver, [*least[k + width], *_scaled(most[k], -1.0)], _loose(width + longest))
    return _infeasible(solver, deadline) is not True


_Term = tuple[pywraplp.Variable, float]  # a variable and its coefficient in a linear row


def _scaled(terms: list[_Term], factor: float) -> list[_Term]:
    return [(variable, factor * coefficient) for variable, coefficient in terms]


def _at_most(solver: pywraplp.Solver, terms: list[_Term], bound: float) -> None:
    """Add the row sum(coefficient x variable) <= bound, with the coefficients of a repeated variable summed.

    Rows are set coefficient by coefficient: building them from operator expressions took about 40 % of the
    programme's time in a profile of the bound tests (the same bounds now come in about 60 % of the time).
    A row without variables is kept as the linear solver's API keeps a constant comparison (a row 0 = 0 when
    it holds, an infeasible row 1 = 1 over no variables when not)."""
    if not terms:
        if bound >= 0:
            solver.Constraint(0.0, 0.0)
        else:
            solver.Constraint(1.0, 1.0)
        return
    # Keyed by the variable's index: a variable's == builds a constraint instead of comparing.
    merged: dict[int, tuple[pywraplp.Variable, float]] = {}
    for variable, coefficient in terms:
        _, before = merged.get(variable.index(), (variable, 0.0))
        merged[variable.index()] = (variable, before + coefficient)
    row = solver.Constraint(-solver.infinity(), bound)
    for variable, coefficient in merged.values():
        row.SetCoefficient(variable, coefficient)


def _loose(bound: float) -> float:
    """A right-hand side with :data:`_SLACK` relative room (at least absolute)."""
    return bound + _SLACK * max(1.0, abs(bound))


def _infeasible(glop: pywraplp.Solver, deadline: float) -> bool | None:
    """Whether the programme is proven infeasible (True), solved (False) or neither (None). GLOP is fast but
    sometimes ends ABNORMAL on these programmes (its dual simplex can also cycle: both seen at P = 32); HiGHS,
    slower, then gets the same programme. Each solve takes at most :data:`LP_LIMIT_S` and stops at ``deadline``."""
    proto: linear_solver_pb2.MPModelProto | None = None
    for backend in _BACKENDS:
        left = min(LP_LIMIT_S, deadline - time.monotonic())
        if left <= 0:
            return None
        solver = glop
        if backend != "GLOP":
            if proto is None:
                proto = linear_solver_pb2.MPModelProto()
                glop.ExportModelToProto(proto)
            solver = pywraplp.Solver.CreateSolver(backend)
            if solver is None:
                log.debug("no %s in this OR-Tools", backend)
                continue
            error = solver.LoadModelFromProto(proto)
            if error:
                log.debug("%s could not read the programme: %s", backend, error)
                continue
            solver.SetSolverSpecificParametersAsString("output_flag=false")  # HiGHS prints a banner otherwise
        solver.SuppressOutput()
        solver.SetTimeLimit(max(1, int(left * 1000)))
        status = solver.Solve()
        if status == pywraplp.Solver.INFEASIBLE:
            return True
        if status in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
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
    top = steps  # the programme is feasible at `steps` whenever `high` is a schedule's objective
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
