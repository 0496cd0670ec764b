"""The memory-time frontier: for each activation budget, every named schedule's objective and the optimizer's.

A larger budget admits every schedule of a smaller one, so the best objective can only fall as the budget grows.
The sweep runs the budgets in increasing order and gives each solve the previous budget's answer as a warm
start. Should a solve still come back worse than that answer (a time-limited search proves nothing), the
previous schedule is kept: it fits the larger budget unchanged. So the optimizer's curve never rises.

Given an executor (or a store), the budgets are instead solved at once, each on its own; the same promise is
then kept afterwards: in increasing order, an answer worse than a smaller budget's is replaced by that budget's
schedule, replayed here.

Bounds travel the other way: a lower bound proven at a larger budget also holds at every smaller one (the
optimum there can only be higher), so each budget's bound is the largest proven at it or above it.

Budgets are per device and uniform (the config's own budget is replaced), in the config's memory unit.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from pipeplan.bounds import OPTIMAL, Proof, minimum_budget, prove
from pipeplan.config import SolverSettings
from pipeplan.executors import Executor, check_executor
from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.planner import evaluate_named
from pipeplan.problem import A_PROBLEM, ConfigError, Problem, expect, is_number, renamed
from pipeplan.schedule import Schedule, check_complete
from pipeplan.simulate import Timeline, simulate
from pipeplan.solver import (
    InfeasibleBudget,
    Progress,
    SolveResult,
    StopRequest,
    check_hooks,
    checked_arguments,
    objective_of,
    solve_checked,
)
from pipeplan.store import Progress as TaskProgress
from pipeplan.store import (
    Store,
    StoredRow,
    Task,
    TaskOutput,
    check_store,
    record_of,
    require_fields,
    run_tasks,
    schedule_of,
    task_key,
)

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
    """The row of a budget that admits no schedule. The reason comes from the problem with this budget, which
    names the config's key; a sweep sets the budget itself, so it says "the budget" ("raise memory.budget" sent
    the reader to a key the sweep ignores)."""
    return FrontierRow(budget, "optimal", False, None, None, None, None, None, status=INFEASIBLE,
                       note=renamed(reason, {"memory.budget": "the budget"}))


def _replay(problem: Problem, schedule: Schedule, objective: str, bound: float) -> tuple[Timeline, Metrics, float,
                                                                                          Proof]:
    """``schedule`` replayed under ``problem``, its objective, and what ``bound`` (proven there) proves of it."""
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    value = objective_of(metrics, objective)
    return timeline, metrics, value, prove(value, bound)


def _keep_previous(problem: Problem, previous: SolveResult, previous_budget: float,
                   result: SolveResult) -> SolveResult:
    """``previous`` replayed under ``problem`` (a larger budget), with ``result``'s bound, which holds here."""
    timeline, metrics, value, proof = _replay(problem, previous.schedule, result.objective_name, result.lower_bound)
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
    settings: SolverSettings | None = None,
    progress: SweepCallback | None = None,
    stop: StopRequest | None = None,
    *,
    executor: Executor | None = None,
    store: Store | None = None,
    refresh: bool = False,
    task_progress: Callable[[TaskProgress], None] | None = None,
    stats: dict[str, Any] | None = None,
    objective: str | None = None,
    time_limit_s: float | None = None,
    num_workers: int | None = None,
    random_seed: int | None = None,
) -> list[FrontierRow]:
    """For each budget (increasing), every applicable named schedule's row and the optimizer's row.

    ``settings``: the optimizer's (:class:`~pipeplan.config.SolverSettings`; a config's ``solver``), its
    defaults when None; as in :func:`~pipeplan.solver.solve`, the keywords ``objective``, ``time_limit_s`` (of
    each budget's solve), ``num_workers`` and ``random_seed`` override single fields of it.

    Without ``executor`` the budgets are solved one after another, each warm-started from the previous answer.
    With one (see :mod:`pipeplan.executors`), they are solved at once, each on its own; then, in increasing
    order, an answer worse than a smaller budget's is replaced by that smaller budget's schedule replayed here
    (it fits unchanged), so the curve never rises either way. With ``store``, each budget's solve is looked up
    there first (unless ``refresh``) and written as it finishes; ``task_progress`` then reports tasks done.
    ``stats``, when given, is filled with "total", "reused", "ran" (tasks run this time, not counting one a stop
    cut short) and "failures" (budget: error).

    A budget that admits no schedule gets one optimizer row with status INFEASIBLE and the reason in ``note``.
    Raises :class:`~pipeplan.solver.InfeasibleBudget` (a :class:`ConfigError`) when no budget admits one,
    naming the smallest budget that would.
    ``stop`` ends the sweep early: without ``executor`` and ``store`` the budget being solved keeps its best
    schedule so far and the larger budgets are left out; with either, every budget whose task had not finished is
    left out (and not stored: a re-run solves it in full).
    """
    expect("problem", problem, Problem, A_PROBLEM)
    ordered = _checked_budgets(budgets)
    settings, _ = checked_arguments(problem, settings, progress=progress, stop=stop, objective=objective,
                                    time_limit_s=time_limit_s, num_workers=num_workers, random_seed=random_seed)
    check_hooks(task_progress, progress_name="task_progress")
    check_executor(executor)
    check_store(store)
    if executor is not None or store is not None:
        return _frontier_tasks(problem, ordered, settings, executor, store, refresh, task_progress, stop,
                               {} if stats is None else stats)
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
            # The previous answer goes in under its budget's name: "source" then says "budget X" when it wins.
            hints = [] if previous is None else [replace(previous[1].schedule, name=f"budget {previous[0]:g}")]
            result = solve_checked(at, settings, progress=report, hints=hints, stop=stop,
                                   named=[(e.schedule, e.metrics) for e in named])
        except InfeasibleBudget as exc:
            rows.append(_infeasible_row(budget, str(exc)))
            continue
        if previous is not None and result.objective > previous[1].objective * (1 + _TOLERANCE):
            log.info("budget %g: the solve returned %g, worse than budget %g's %g; keeping that schedule",
                     budget, result.objective, previous[0], previous[1].objective)
            result = _keep_previous(at, previous[1], previous[0], result)
        row = _optimal_row(budget, result)
        if result.interrupted and result.status != OPTIMAL:
            row = replace(row, note=STOPPED_NOTE)
        rows.append(row)
        previous = (budget, result)
        if stop is not None and stop.requested:
            log.info("stop requested: the sweep ends after budget %g", budget)
            break
    if previous is None:
        _raise_none_fits(problem, ordered)
    return _carry_bounds_down(rows)


def _raise_none_fits(problem: Problem, ordered: list[float]) -> None:
    need = max(minimum_budget(problem.with_budget(None)))
    raise InfeasibleBudget(
            f"no budget from {ordered[0]:g} to {ordered[-1]:g} admits a schedule; the smallest that does is "
            f"{need:g} (one microbatch's activations on all of a device's chunks)"
        )


# The note of the optimizer's row at the budget a stop cut short (in process, without a store).
STOPPED_NOTE = "stopped early (Ctrl-C): the best schedule found by then, not proven optimal"

# Status of the optimizer's row at a budget whose task raised (the error is in ``note``).
FAILED = "FAILED"


def _checked_budgets(budgets: object) -> list[float]:
    """The budgets in increasing order, without repeats; :class:`ConfigError` naming the first bad one."""
    hint = "give budgets as a list of positive numbers in the problem's memory unit, e.g. [4, 6, 8]"
    if isinstance(budgets, (str, bytes)) or not isinstance(budgets, Iterable):
        raise ConfigError(f"budgets must be a list of numbers, got {budgets!r}; {hint}")
    values = []
    for index, budget in enumerate(budgets):
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real):
            raise ConfigError(f"budgets[{index}] must be a number, got {budget!r}; {hint}")
        if not math.isfinite(budget) or budget <= 0:
            raise ConfigError(f"budgets[{index}] must be a finite number > 0, got {budget!r}; {hint}")
        values.append(float(budget))
    if not values:
        raise ConfigError(f"give at least one budget; {hint}")
    return sorted(set(values))


def _solve_budget(job: tuple[Problem, SolverSettings, StopRequest | None]) -> TaskOutput:
    """One budget's solve, on its own (a module-level function, so that worker processes can run it): the
    answer's proof and schedule, or the reason no schedule fits. A solve the stop request ended early (the task
    ran in this process) is cut short: its answer is not the time limit's, so it is neither stored nor shown."""
    problem, settings, stop = job
    # The named schedules, replayed once: the optimizer's warm starts, and the budget's rows (their metrics go back
    # in the record, so the parent need not replay them again).
    named, _ = evaluate_named(problem)
    rows = [e.metrics.to_dict() for e in named]
    try:
        result = solve_checked(problem, settings, stop=stop, named=[(e.schedule, e.metrics) for e in named])
    except InfeasibleBudget as exc:
        return TaskOutput({"infeasible": str(exc), "named": rows})
    if result.interrupted:
        return TaskOutput({}, cut_short=True)
    record = {"lower_bound": result.lower_bound, "solve_time_s": result.solve_time_s, "source": result.source,
              "named": rows}
    return TaskOutput.of(record, problem, result.schedule)


# What a stored record of a budget that has a schedule holds, besides the schedule and the named metrics.
_SOLVED_FIELDS = ("lower_bound", "solve_time_s", "source")


def _check_stored(row: StoredRow, problem: Problem) -> None:
    """Refuse (ValueError) a stored budget the frontier cannot read, which then runs again (see
    :meth:`pipeplan.store.Store.get`): a record that neither says why no schedule fits nor has the fields of a
    solve, or a solve's schedule that does not read or is not one of ``problem``'s (the budget's, whose hash is
    the row's key). Named metrics that do not read are replayed instead (:func:`_named_metrics`)."""
    record = row.record or {}
    if "infeasible" in record:
        return
    require_fields(record, _SOLVED_FIELDS)
    for name in ("lower_bound", "solve_time_s"):
        if not is_number(record[name]):
            raise ValueError(f"its {name} is not a number")
    try:
        schedule = schedule_of(row)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"its schedule does not read ({exc!r})") from None
    if schedule is None:
        raise ValueError("it has no schedule")
    check_complete(problem, schedule)  # a ScheduleError (a ValueError) for orders that are not the problem's


def _named_metrics(problem: Problem, record: dict[str, Any]) -> list[Metrics]:
    """The named schedules' metrics at one budget: as its task's record has them, or replayed here for a record
    without them (written by an earlier pipeplan, or damaged)."""
    stored = record.get("named")
    if isinstance(stored, list):
        try:
            return [Metrics(**row) for row in stored]
        except TypeError:
            log.info("the stored named schedules' metrics are malformed; replaying them")
    return [e.metrics for e in evaluate_named(problem)[0]]


def _frontier_tasks(problem: Problem, ordered: list[float], settings: SolverSettings, executor: Executor | None,
                    store: Store | None, refresh: bool, progress: Callable[[TaskProgress], None] | None,
                    stop: StopRequest | None, stats: dict[str, Any]) -> list[FrontierRow]:
    """The frontier with every budget solved as its own task (see :func:`frontier`)."""
    at: dict[float, Problem] = {}  # keyed by budget: the problem under it
    rows_at: dict[float, list[FrontierRow]] = {}  # keyed by budget: its rows so far
    for budget in ordered:
        try:
            at[budget] = problem.with_budget(budget)
        except ConfigError as exc:
            rows_at[budget] = [_infeasible_row(budget, str(exc))]
    tasks = {budget: Task(task_key("frontier", {"problem": p, "settings": settings}), f"budget {budget:g}",
                          (p, settings, stop)) for budget, p in at.items()}  # keyed by budget
    problem_of = {task.key: at[budget] for budget, task in tasks.items()}  # keyed by task key
    outcome = run_tasks(list(tasks.values()), _solve_budget, kind="frontier", executor=executor, store=store,
                        refresh=refresh, num_cpus=settings.num_workers, progress=progress,
                        should_stop=None if stop is None else (lambda: stop.requested),
                        check=lambda row: _check_stored(row, problem_of[row.key]))
    stats.update(total=len(tasks), reused=outcome.reused, ran=outcome.ran,
                 failures={tasks[b].label: outcome.failures[t.key] for b, t in tasks.items()
                           if t.key in outcome.failures})
    previous: tuple[float, Schedule, float] | None = None  # (budget, schedule, objective) of the best answer below
    for budget, task in tasks.items():
        if task.key in outcome.failures:
            rows_at[budget] = [FrontierRow(budget, "optimal", False, None, None, None, None, None, status=FAILED,
                                           note=f"failed: {outcome.failures[task.key]}")]
            continue
        if task.key not in outcome.records:
            continue  # stopped before this budget finished: left out
        answer = outcome.records[task.key]
        record = record_of(answer)
        rows_at[budget] = [_row(budget, m, settings.objective) for m in _named_metrics(at[budget], record)]
        if "infeasible" in record:
            rows_at[budget].append(_infeasible_row(budget, str(record["infeasible"])))
            continue
        schedule = schedule_of(answer)
        assert schedule is not None
        source = str(record["source"])
        _, metrics, value, proof = _replay(at[budget], schedule, settings.objective, float(record["lower_bound"]))
        if previous is not None and value > previous[2] * (1 + _TOLERANCE):
            log.info("budget %g: the solve returned %g, worse than budget %g's %g; keeping that schedule",
                     budget, value, previous[0], previous[2])
            schedule, source = previous[1], f"budget {previous[0]:g}"
            _, metrics, value, proof = _replay(at[budget], schedule, settings.objective, proof.lower_bound)
        rows_at[budget].append(replace(_row(budget, metrics, settings.objective), schedule="optimal",
                                       status=proof.status, lower_bound=proof.lower_bound, gap=proof.gap,
                                       solve_time_s=float(record["solve_time_s"]), source=source))
        previous = (budget, schedule, value)
    if previous is None and not outcome.stopped and not outcome.failures:
        _raise_none_fits(problem, ordered)
    rows = [row for budget in ordered for row in rows_at.get(budget, [])]
    return _carry_bounds_down(rows)
