"""The memory-time frontier: for each activation budget, every named schedule's objective and the optimizer's.

A larger budget admits every schedule of a smaller one, so the best objective can only fall as the budget grows.
The sweep runs the budgets in increasing order and gives each solve the previous budget's answer as a warm
start. Should a solve still come back worse than that answer (a time-limited search proves nothing), the
previous schedule is kept: it fits the larger budget unchanged. So the optimizer's curve never rises.

Bounds travel the other way: a lower bound proven at a larger budget also holds at every smaller one (the
optimum there can only be higher), so each budget's bound is the largest proven at it or above it.

Budgets are per device and uniform (the config's own budget is replaced), in the config's memory unit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from pipeplan.bounds import minimum_budget, prove
from pipeplan.config import SolverSettings
from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.planner import evaluate_named
from pipeplan.problem import ConfigError, Problem
from pipeplan.simulate import simulate
from pipeplan.solver import InfeasibleBudget, Progress, SolveResult, StopRequest, objective_of, solve

log = logging.getLogger(__name__)

# Status of the optimizer's row at a budget that admits no schedule at all.
INFEASIBLE = "INFEASIBLE"
# Relative slack when comparing objectives of the same schedule replayed twice.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FrontierRow:
    """One schedule at one budget. Times in the config's time unit, memory in its memory unit.

    Named schedules have ``status`` None. The optimizer's row (schedule "optimal") has status OPTIMAL,
    FEASIBLE or INFEASIBLE (no schedule fits this budget: ``note`` says why, and the measures are None).
    """

    budget: float
    schedule: str
    feasible: bool
    objective: float | None
    makespan: float | None
    stage_span: float | None
    utilization: float | None
    peak_memory: float | None
    status: str | None = None
    lower_bound: float | None = None
    gap: float | None = None
    solve_time_s: float | None = None
    source: str | None = None
    """Where the optimizer's order came from: "cp-sat", a warm start's name, or "budget X" when reused."""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SweepProgress:
    """Progress of a sweep: budget ``index`` (0-based) of ``total``, and the solve's own report once it runs."""

    index: int
    total: int
    budget: float
    solve: Progress | None = None


SweepCallback = Callable[[SweepProgress], None]


def _row(budget: float, metrics: Metrics, objective: str) -> FrontierRow:
    return FrontierRow(
        budget=budget,
        schedule=metrics.schedule,
        feasible=metrics.feasible,
        objective=objective_of(metrics, objective),
        makespan=metrics.makespan,
        stage_span=metrics.stage_span,
        utilization=metrics.utilization,
        peak_memory=metrics.peak_memory,
    )


def _optimal_row(budget: float, result: SolveResult) -> FrontierRow:
    return replace(
        _row(budget, result.metrics, result.objective_name),
        schedule="optimal",
        status=result.status,
        lower_bound=result.lower_bound,
        gap=result.gap,
        solve_time_s=result.solve_time_s,
        source=result.source,
    )


def _infeasible_row(budget: float, reason: str) -> FrontierRow:
    return FrontierRow(budget, "optimal", False, None, None, None, None, None, status=INFEASIBLE, note=reason)


def _keep_previous(problem: Problem, previous: SolveResult, previous_budget: float,
                   result: SolveResult) -> SolveResult:
    """``previous`` replayed under ``problem`` (a larger budget), with ``result``'s bound, which holds here."""
    timeline = simulate(problem, previous.schedule)
    metrics = compute_metrics(timeline)
    value = objective_of(metrics, result.objective_name)
    proof = prove(value, result.lower_bound)
    return replace(result, schedule=previous.schedule, timeline=timeline, metrics=metrics, objective=value,
                   lower_bound=proof.lower_bound, gap=proof.gap, status=proof.status,
                   source=f"budget {previous_budget:g}", solver_objective=None, solver_times=None)


def _carry_bounds_down(rows: list[FrontierRow]) -> list[FrontierRow]:
    """Give each optimizer row the largest lower bound proven at its budget or any larger one."""
    carried = float("-inf")
    out = list(rows)
    for i in sorted(range(len(rows)), key=lambda i: rows[i].budget, reverse=True):
        row = rows[i]
        if row.schedule != "optimal" or row.objective is None or row.lower_bound is None:
            continue
        carried = max(carried, row.lower_bound)
        if carried > row.lower_bound:
            proof = prove(row.objective, carried)
            out[i] = replace(row, lower_bound=proof.lower_bound, gap=proof.gap, status=proof.status)
    return out


def frontier(
    problem: Problem,
    budgets: Sequence[float],
    settings: SolverSettings,
    progress: SweepCallback | None = None,
    stop: StopRequest | None = None,
) -> list[FrontierRow]:
    """For each budget (increasing), every applicable named schedule's row and the optimizer's row.

    A budget that admits no schedule gets one optimizer row with status INFEASIBLE and the reason in ``note``.
    Raises :class:`~pipeplan.solver.InfeasibleBudget` (a :class:`ConfigError`) when no budget admits one,
    naming the smallest budget that would.
    ``stop`` ends the sweep early: the budget being solved keeps its best schedule so far and the larger budgets
    are left out.
    """
    ordered = sorted({float(b) for b in budgets})
    if not ordered:
        raise ConfigError("give at least one budget")
    rows: list[FrontierRow] = []
    previous: tuple[float, SolveResult] | None = None  # (budget, the optimizer's answer there)
    for index, budget in enumerate(ordered):
        if progress is not None:
            progress(SweepProgress(index, len(ordered), budget))
        try:
            at = problem.with_budget(budget)
        except ConfigError as exc:
            rows.append(_infeasible_row(budget, str(exc)))
            continue
        named, _ = evaluate_named(at)
        rows.extend(_row(budget, e.metrics, settings.objective) for e in named)

        def report(p: Progress, index: int = index, budget: float = budget) -> None:
            if progress is not None:
                progress(SweepProgress(index, len(ordered), budget, p))

        try:
            result = solve(at, settings, progress=report, hints=[] if previous is None else [previous[1].schedule],
                           stop=stop)
        except InfeasibleBudget as exc:
            rows.append(_infeasible_row(budget, str(exc)))
            continue
        if previous is not None and result.objective > previous[1].objective * (1 + _TOLERANCE) + _TOLERANCE:
            log.info("budget %g: the solve returned %g, worse than budget %g's %g; keeping that schedule",
                     budget, result.objective, previous[0], previous[1].objective)
            result = _keep_previous(at, previous[1], previous[0], result)
        rows.append(_optimal_row(budget, result))
        previous = (budget, result)
        if stop is not None and stop.requested:
            log.info("stop requested: the sweep ends after budget %g", budget)
            break
    if previous is None:
        need = max(minimum_budget(problem.with_budget(None)))
        raise InfeasibleBudget(
            f"no budget from {ordered[0]:g} to {ordered[-1]:g} admits a schedule; the smallest that does is "
            f"{need:g} (one microbatch's activations on all of a device's chunks)"
        )
    return _carry_bounds_down(rows)
