"""Exhaustive search over every per-device order of tiny problems: the ground truth for optima and bounds."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Sequence

from hypothesis import strategies as st
from ortools.sat.python import cp_model

from pipeplan import Op, Problem, Schedule, ScheduleError, Timeline, compute_metrics, simulate
from pipeplan.lattice import order_fits
from pipeplan.solver import _Model, tick_problem

OBJECTIVES = ("makespan", "stage_span")


def examples(ci: int, local: int) -> int:
    """How many examples a costly property test draws: ``ci`` when the CI variable is set (the suite must stay
    within its time on CI's two cores), ``local`` otherwise."""
    return ci if os.environ.get("CI") else local


def orders_of(ops: Sequence[Op], before: set[tuple[Op, Op]]) -> Iterator[list[Op]]:
    """Every order of ``ops`` that keeps each pair (a, b) of ``before`` with a first."""
    preds = {op: {a for a, b in before if b == op} for op in ops}

    def extend(placed: list[Op], left: list[Op]) -> Iterator[list[Op]]:
        if not left:
            yield list(placed)
        for op in left:
            if preds[op] <= set(placed):
                yield from extend([*placed, op], [o for o in left if o != op])

    yield from extend([], list(ops))


def feasible_timelines(problem: Problem) -> Iterator[Timeline]:
    """The replay of every per-device order that runs (no deadlock) and fits the budget.

    Only orders that keep each same-device dependency are tried (any other deadlocks). When every op takes time,
    peak memory depends only on the order (a device runs its ops one after another; F allocates at its start, B
    and W release at their end), so orders over a device's budget are dropped before the devices' orders are
    combined. The replay starts every op as early as its order allows, so these timelines include an optimal
    schedule for every objective.
    """
    # With an op of no time, ops at one instant are not in their order's sequence (the replay puts releases
    # first), so the orders are then only checked on their replays.
    by_order = all(problem.duration(op) > 0 for op in problem.all_ops())

    def fits_budget(order: Sequence[Op], device: int) -> bool:
        return problem.budget is None or order_fits(problem, order, problem.budget[device])

    per_device = []
    for d in range(problem.num_devices):
        ops = [op for op in problem.all_ops() if problem.device_of(op.stage) == d]
        before = {(dep, op) for op in ops for dep, _ in problem.dependencies(op) if problem.device_of(dep.stage) == d}
        per_device.append([order for order in orders_of(ops, before) if not by_order or fits_budget(order, d)])
    for orders in itertools.product(*per_device):
        try:
            timeline = simulate(problem, Schedule.from_lists("candidate", orders))
        except ScheduleError:
            continue  # deadlocks across devices
        feasible = compute_metrics(timeline).feasible
        assert feasible or not by_order, "an order within budget replays within budget"
        if feasible:
            yield timeline


def value_of(timeline: Timeline, objective: str) -> float:
    """Makespan or the largest per-device span, from the op times alone."""
    if objective == "makespan":
        return max(timeline.end) - min(timeline.start)
    spans = []
    for d in range(timeline.problem.num_devices):
        mine = [i for i, dev in enumerate(timeline.device) if dev == d]
        spans.append(max(timeline.end[i] for i in mine) - min(timeline.start[i] for i in mine))
    return max(spans)


def brute_force(problem: Problem) -> dict[str, float]:
    """The least makespan and stage span over every per-device order that replays and fits the budget."""
    best = {objective: float("inf") for objective in OBJECTIVES}
    for timeline in feasible_timelines(problem):
        for objective in OBJECTIVES:
            best[objective] = min(best[objective], value_of(timeline, objective))
    return best


quarters = st.integers(min_value=1, max_value=12).map(lambda x: x / 4)
comms = st.integers(min_value=0, max_value=4).map(lambda x: x / 8)


@st.composite
def per_stage_problem(draw: st.DrawFn, p: int, n: int, split: bool, times: st.SearchStrategy[float],
                      budget: st.SearchStrategy[float | None], num_chunks: int = 1,
                      placement: str = "loop") -> Problem:
    """A problem with unequal per-stage costs drawn from ``times`` (one value per model stage), random comm (one or
    per stage), activations of 1 to 3, weight shares in quarters (split only) and a budget of one microbatch's
    footprint on the busiest device times (1 + ``budget``) (None: unlimited)."""
    size = p * num_chunks
    per_stage = st.lists(times, min_size=size, max_size=size)
    activation = draw(st.lists(st.integers(min_value=1, max_value=3), min_size=size, max_size=size))
    fractions = draw(st.lists(st.integers(min_value=0, max_value=4), min_size=size, max_size=size))
    problem = Problem.build(
        num_stages=p,
        num_microbatches=n,
        num_chunks=num_chunks,
        placement=placement,
        forward=draw(per_stage),
        backward=draw(per_stage),
        backward_weight=draw(per_stage) if split else 0.0,
        comm=draw(st.one_of(comms, st.lists(comms, min_size=size, max_size=size))),
        activation=[float(a) for a in activation],
        weight_activation=[a * q / 4 for a, q in zip(activation, fractions)] if split else 0.0,
    )
    extra = draw(budget)
    if extra is None:
        return problem
    least = max(problem.footprint(d) for d in range(p))
    return problem.with_budget(least * (1 + extra))


@st.composite
def tiny_problems(draw: st.DrawFn) -> Problem:
    """Problems small enough for :func:`brute_force` (2 x 2 split, 3 x 2 unsplit or one device), budget or none."""
    p, n, split = draw(st.sampled_from([(2, 2, True), (3, 2, False), (1, 3, True), (1, 4, False)]))
    budget = st.one_of(st.none(), st.integers(min_value=0, max_value=8).map(lambda x: x / 8))
    return draw(per_stage_problem(p, n, split, quarters, budget))


@st.composite
def tiny_chunk_problems(draw: st.DrawFn) -> Problem:
    """Two chunks per device small enough for :func:`brute_force` (a few thousand orders at most): one device
    with 2 microbatches (unsplit), two devices with 1 microbatch (unsplit in either placement, split in V);
    unequal per-stage costs and activations, a budget from one microbatch's footprint up to about two, or none."""
    p, n, split, placement = draw(st.sampled_from([
        (1, 2, False, "loop"), (1, 2, False, "v"), (2, 1, False, "loop"), (2, 1, False, "v"), (2, 1, True, "v"),
    ]))
    budget = st.one_of(st.none(), st.integers(min_value=0, max_value=8).map(lambda x: x / 8))
    return draw(per_stage_problem(p, n, split, quarters, budget, num_chunks=2, placement=placement))


small_costs = st.integers(min_value=1, max_value=8).map(lambda x: x / 4)


@st.composite
def small_problems(draw: st.DrawFn) -> Problem:
    """P 2..3, N 3..5, 1 or 2 chunks (loop or V), split or not, uneven costs, a budget from one microbatch's
    footprint to about two."""
    p = draw(st.integers(2, 3))
    n = draw(st.integers(3, 5))
    chunks, placement = draw(st.sampled_from([(1, "loop"), (2, "loop"), (2, "v")]))
    budget = st.integers(min_value=0, max_value=8).map(lambda x: x / 8)
    return draw(per_stage_problem(p, n, draw(st.booleans()), small_costs, budget, chunks, placement))


@st.composite
def larger_problems(draw: st.DrawFn) -> Problem:
    """P 2..5, N 2..8, 1 or 2 chunks (loop or V), split, uneven costs, a budget of one to about three
    microbatches' footprint."""
    p = draw(st.integers(2, 5))
    n = draw(st.integers(2, 8))
    chunks, placement = draw(st.sampled_from([(1, "loop"), (2, "loop"), (2, "v")]))
    budget = st.integers(min_value=0, max_value=16).map(lambda x: x / 8)
    return draw(per_stage_problem(p, n, True, small_costs, budget, chunks, placement))


def proven_optimum(problem: Problem, objective: str, limit_s: float = 1.0) -> float | None:
    """The optimum CP-SAT proves on the solver's model, which knows the closed-form bounds but not the window
    bound; None when it does not finish within ``limit_s`` (the property tests that ``assume`` an optimum replace
    such an example by another, so a short limit keeps them quick)."""
    ticked, scale, exact = tick_problem(problem)
    assert exact
    # The total time bounds the optimal makespan (one microbatch at a time fits the budget); for the stage span,
    # with F(0, 0) at 0 every device's first op starts within the optimal span S <= total time, so every op ends
    # by 2 S (see the solver's _horizon).
    horizon = int(math.ceil(2 * ticked.total_time()))
    model = _Model(ticked, objective, horizon)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit_s
    solver.parameters.num_workers = 2
    if solver.solve(model.model) != cp_model.OPTIMAL:
        return None
    return solver.objective_value / scale


def family(p: int, n: int, budget: float) -> Problem:
    """F:B:W = 1 : 1 : 0.5, comm 0.03, weight_activation 0.35 (the benchmark's split-backward family)."""
    return Problem.build(num_stages=p, num_microbatches=n, forward=1.0, backward=1.0, backward_weight=0.5,
                         comm=0.03, weight_activation=0.35, budget=budget)
