"""A lower bound from small exact problems: how far apart a tight budget forces the forwards of the first stage.

The closed-form bounds of :mod:`pipeplan.bounds` see one device and one chain at a time. Where memory binds, a
schedule also loses time to collisions: a new microbatch's forward and an older one's backward arriving at the
same device, a device that must run a W before the next forward fits. This module measures those losses
exactly on a few microbatches and chains the result over all N.

**The window relaxation.** For j >= 1 let delta_j be the least time from the start of F(0, m) to the start of
F(0, m + j) over all schedules of microbatches m .. m + j *alone*: every op of those j + 1 microbatches with
its durations, dependencies and link latencies, no overlap per device, the activation budget per device
counting only their memory, and each kind on each stage in microbatch order. Microbatches are interchangeable,
so delta_j does not depend on m. In any schedule of the whole problem within the budget whose kinds run in
microbatch order on every stage (some optimal schedule does: see ``_Model._add_symmetry`` in
:mod:`pipeplan.solver`), the ops of microbatches m .. m + j form such a schedule: dropping the other
microbatches' ops only removes device time and memory, never adds constraints. So F(0, m + j) starts at least
delta_j after F(0, m), for every m and j.

**Chaining.** Splitting N - 1 into parts j_1 + j_2 + ... gives F(0, N - 1) >= F(0, 0) + sum delta_{j_i}; the
best split is a small dynamic programme, L(x) = max over j of delta_j + L(x - j). After F(0, N - 1) starts,
microbatch N - 1 still runs its forwards up the pipeline, its backwards down to stage 0 with a link latency
each way between devices, and W(0, N - 1): the round trip, B(0) and W(0). F(0, 0) starts at 0 or later, so
the makespan is at least L(N - 1) + that tail. So is the stage span: device 0's first op is F(0, 0) (every op
on device 0 follows it) and W(0, N - 1) is one of its ops.

**Solving.** delta_j comes from a CP-SAT model of j + 1 microbatches with F(0, m) fixed at 0; when a solve
stops early its proven bound is used (it is a valid lower bound on delta_j), so the result is a theorem
whatever the time limit. Windows grow from the smallest j whose j + 1 microbatches overflow some device's
budget (below it delta_j is j F(0)) while time is left; the bound only improves with each. Each window's model
is given the bounds already proven for the smaller ones: F(0, m + i) starts at least delta_i after F(0, m)
for every i < j and m (microbatches m .. m + i of the window, alone, are a window of size i). The optimum is
unchanged, but the proofs are far quicker: on P = 8, N = 32, 2 chunks in V, room for one microbatch, delta_4
is proven in 2 s with them, and no better than 28.2 (of 38.9) in 3 s without.

Windows stop growing once :data:`MAX_UNPROVEN` in a row are not proven within :data:`WINDOW_LIMIT_S`: larger
ones take longer still, and the time is the search's. On the memory-wall benchmark (split-backward family, 11 s
of windows, two workers) the rule gives up little: at most 0.7 % of a row's window bound (316.36 against 318.61
at P = 8, N = 32, two chunks in V, room for one microbatch, where windows are proven in about the limit and which
ones are varies from run to run); on one chunk at mid budgets only where the series stays below the closed form
anyway (P = 16, N = 32, budget 11: 109.2 against 112.2, closed form 116.8). With two chunks per device at mid
budgets the whole series stays far below the closed-form bound (24.7 against 70.7 at P = 8, N = 16, loop
placement, budget 3): there it now takes 3 to 7 s instead of a fifth of the solve.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from ortools.sat.python import cp_model

from pipeplan import cpsat
from pipeplan.bounds import memory_binds, round_trips
from pipeplan.problem import Op, OpKind, Problem

# Seconds one window's model may take at most.
WINDOW_LIMIT_S = 2.0
# The most windows tried, from the smallest that memory constrains.
MAX_WINDOW = 24
# The most ops a window's model may have.
MAX_WINDOW_OPS = 5_000
# Windows grow until this many in a row are not proven within WINDOW_LIMIT_S: larger ones take longer still,
# and the time goes back to the search.
MAX_UNPROVEN = 2


def solve_window(ticked: Problem, j: int, time_limit_s: float, num_workers: int = 1, seed: int = 0,
                 known: dict[int, int] | None = None,
                 should_stop: Callable[[], bool] = lambda: False) -> tuple[int, bool]:
    """A proven lower bound on delta_j (in ticks) for the ticked problem: the least time from F(0, 0) to
    F(0, j) when microbatches 0 .. j run alone, and whether it is delta_j itself (CP-SAT proved it optimal
    within ``time_limit_s``).

    ``known`` maps windows i to proven lower bounds on delta_i; those with i < j cut the model (F(0, m + i) at
    least delta_i after F(0, m), see the module's docstring), the others are ignored. The solve ends early when
    ``should_stop()`` turns true; what it proved by then is still a bound."""
    if j < 1:
        raise ValueError("the window must hold at least two microbatches")
    problem = ticked
    count = j + 1
    model = cp_model.CpModel()
    horizon = int(math.ceil(problem.total_time())) * count + 1
    ops = [problem.op(kind, s, m) for m in range(count) for s in range(problem.num_model_stages)
           for kind in problem.kinds]
    start: dict[Op, cp_model.IntVar] = {op: model.new_int_var(0, horizon, "") for op in ops}
    length = {op: int(problem.duration(op)) for op in ops}
    for op in ops:
        for dep, lag in problem.dependencies(op):
            model.add(start[op] >= start[dep] + length[dep] + int(lag))
    for s in range(problem.num_model_stages):
        for kind in problem.kinds:
            for m in range(count - 1):
                before, after = problem.op(kind, s, m), problem.op(kind, s, m + 1)
                model.add(start[after] >= start[before] + length[before])
    for d in range(problem.num_devices):
        on_device = [op for op in ops if problem.device_of(op.stage) == d]
        model.add_no_overlap([model.new_fixed_size_interval_var(start[op], length[op], "") for op in on_device])
        add_budget(model, problem, d, count, start, length, horizon)
    smaller = {i: gap for i, gap in (known or {}).items() if i < j}
    for i, gap in smaller.items():
        for m in range(count - i):
            model.add(start[problem.op(OpKind.F, 0, m + i)] >= start[problem.op(OpKind.F, 0, m)] + gap)
    first, last = problem.op(OpKind.F, 0, 0), problem.op(OpKind.F, 0, j)
    model.add(start[first] == 0)
    model.minimize(start[last])
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = seed
    # Ctrl-C is the caller's: its handler makes should_stop() true, which also ends the window's solve.
    status = cpsat.run_stoppable(solver, model, should_stop)
    # The forwards on stage 0 alone are j apart, and the smaller windows chain: a floor that holds even when
    # CP-SAT proved nothing.
    floor = max(j * length[first], chain(smaller, j))
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return max(floor, int(math.ceil(solver.best_objective_bound - 1e-6))), status == cp_model.OPTIMAL
    return floor, False


def add_budget(model: cp_model.CpModel, problem: Problem, device: int, count: int,
                start: dict[Op, cp_model.IntVar], length: dict[Op, int], horizon: int) -> None:
    """The budget of ``device`` over microbatches 0 .. ``count`` - 1 as a cumulative (memory rules of
    :class:`Problem`: [start F, end B) and, split, [start F, end W)); ``start`` and ``length`` hold at least
    those microbatches' ops on ``device``."""
    budget = problem.budget
    if budget is None:
        return
    intervals, demands = [], []
    for s in problem.stages_on_device(device):
        for m in range(count):
            opens = start[problem.op(OpKind.F, s, m)]
            for kind in problem.kinds[1:]:
                demand = int(problem.released_by(kind, s))
                if demand <= 0:
                    continue
                closes = problem.op(kind, s, m)
                size = model.new_int_var(0, horizon, "")
                intervals.append(model.new_interval_var(opens, size, start[closes] + length[closes], ""))
                demands.append(demand)
    if sum(demands) > budget[device]:
        model.add_cumulative(intervals, demands, int(budget[device]))


def add_spacing_cuts(model: cp_model.CpModel, problem: Problem, start: dict[Op, cp_model.IntVar],
                     spacings: Mapping[int, int]) -> None:
    """The window bound's cuts in a model of the whole ``problem`` (or of a relaxation holding stage 0): F(0, m + j)
    starts at least ``spacings[j]`` (ticks, a proven lower bound on delta_j) after F(0, m), for every m."""
    for j, gap in spacings.items():
        for m in range(problem.num_microbatches - j):
            model.add(start[problem.op(OpKind.F, 0, m + j)] >= start[problem.op(OpKind.F, 0, m)] + gap)


def tail(problem: Problem) -> float:
    """From the start of F(0, N-1): its forwards up, backwards down to stage 0, the links between, W(0, N-1):
    stage 0's round trip (:func:`pipeplan.bounds.round_trips`), then B(0) and W(0)."""
    return round_trips(problem)[0] + problem.backward[0] + problem.backward_weight[0]


def chain(deltas: dict[int, int], gaps: int) -> int:
    """The least F(0, N-1) - F(0, 0) the window bounds imply, N - 1 = ``gaps``: max over splits of N - 1 into
    window sizes of the sum of their deltas (a dynamic programme); a part no window fits counts 0."""
    best = [0] * (gaps + 1)
    for x in range(1, gaps + 1):
        best[x] = max((delta + best[x - j] for j, delta in deltas.items() if j <= x), default=0)
    return best[gaps]


def spacing_bound(ticked: Problem, deadline: float, num_workers: int = 1, seed: int = 0,
                  should_stop: Callable[[], bool] = lambda: False) -> float:
    """A lower bound (ticks) on the makespan and on the stage span of the ticked problem from windows of
    growing size, solved until ``deadline`` (time.monotonic()) or a stop; 0 when memory cannot bind (no
    budget, or one that holds every microbatch). Windows too large to build are left out, so the bound may
    rest on delta_1 = F(0) alone."""
    return bound_from(ticked, window_deltas(ticked, deadline, num_workers, seed, should_stop))


def bound_from(ticked: Problem, deltas: dict[int, int]) -> float:
    """The bound (ticks) that proven spacings imply (:func:`window_deltas`): their chain over all N plus the
    tail after F(0, N-1); 0 without any."""
    if not deltas:
        return 0.0
    return float(chain(deltas, ticked.num_microbatches - 1)) + tail(ticked)


def window_deltas(ticked: Problem, deadline: float, num_workers: int = 1, seed: int = 0,
                  should_stop: Callable[[], bool] = lambda: False) -> dict[int, int]:
    """Proven lower bounds on delta_j (ticks) by window size j, from windows of growing size solved until
    ``deadline`` (time.monotonic()) or a stop, or until :data:`MAX_UNPROVEN` windows in a row are not proven:
    delta_1 = F(0) and every window tried; none when memory cannot bind (no budget, or one that holds every
    microbatch)."""
    problem = ticked
    n = problem.num_microbatches
    budget = problem.budget
    if n < 2 or budget is None or not memory_binds(problem):
        return {}
    per_microbatch = problem.num_model_stages * len(problem.kinds)
    # While j + 1 microbatches fit every device's budget, a schedule of them alone may run their forwards on
    # stage 0 back to back (nothing else needs stage 0's device first): delta_j = j F(0), which the chain
    # already counts through delta_1. Windows start where memory binds.
    fits = min(int(b // problem.footprint(d)) if problem.footprint(d) > 0 else n for d, b in enumerate(budget))
    deltas: dict[int, int] = {1: int(problem.forward[0])}
    unproven = 0  # windows in a row CP-SAT did not prove
    for j in range(max(1, fits), min(n - 1, max(1, fits) + MAX_WINDOW - 1) + 1):
        left = deadline - time.monotonic()
        if left < 0.05 or should_stop() or (j + 1) * per_microbatch > MAX_WINDOW_OPS or unproven >= MAX_UNPROVEN:
            break
        deltas[j], exact = solve_window(problem, j, min(WINDOW_LIMIT_S, left), num_workers, seed, known=deltas,
                                        should_stop=should_stop)
        unproven = 0 if exact else unproven + 1
    return deltas
