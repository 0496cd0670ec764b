"""Pick the schedule with the least bubble that fits the budget, among every registered generator.

This is the seed's quick answer (no solver): it simulates each named schedule, and GPipe with each flush size,
and keeps the feasible one with the lowest bubble; ties go to the simpler schedule.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from pipeplan import schedules
from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.problem import ConfigError, Problem
from pipeplan.schedule import NotApplicable, Schedule
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.simulate import simulate

log = logging.getLogger(__name__)

# Bubbles closer than this are a tie (float sums of the same schedule can differ in the last bits).
_TIE = 1e-9


def gpipe_flush_sizes(num_microbatches: int) -> list[int]:
    """Every flush size that gives a distinct number of flushes, largest first (O(sqrt N) sizes)."""
    sizes = {math.ceil(num_microbatches / flushes) for flushes in range(1, num_microbatches + 1)}
    return sorted(sizes, reverse=True)


def candidate_schedules(problem: Problem) -> list[Schedule]:
    """Every variant the planner considers: each applicable generator, and GPipe at every flush size."""
    variants: list[Schedule] = []
    for name in schedules.names():
        if name == "gpipe":
            variants.extend(gpipe_with_flush_size(problem, k) for k in gpipe_flush_sizes(problem.num_microbatches))
            continue
        try:
            variants.append(schedules.generate(name, problem))
        except NotApplicable as exc:
            log.info("skipping %s: %s", name, exc)
    return variants


def choose(metrics: list[Metrics]) -> Metrics | None:
    """The feasible entry with the lowest bubble; ties go to the simplest (earliest registered, fewest flushes)."""
    order = {name: i for i, name in enumerate(schedules.names())}
    feasible = [m for m in metrics if m.feasible]
    if not feasible:
        return None
    best = min(m.bubble for m in feasible)
    tied = [m for m in feasible if m.bubble <= best + _TIE]
    return min(tied, key=lambda m: (order.get(m.schedule, len(order)), m.flushes))


def plan(
    num_stages: int,
    total_microbatches: int,
    memory_budget: float | list[float] | None = None,
    *,
    forward: float | list[float] = 1.0,
    backward: float | list[float] = 2.0,
    backward_weight: float | list[float] = 0.0,
    comm: float | list[float] = 0.0,
    activation: float | list[float] = 1.0,
    weight_activation: float | list[float] = 0.0,
) -> dict[str, Any]:
    """Choose a schedule for a pipeline of ``num_stages`` devices and ``total_microbatches`` microbatches.

    ``memory_budget`` is the live activation memory each device may hold, in the unit of ``activation``
    (None: unlimited). Returns ``{"chosen": {...}, "candidates": [...]}``; each entry has the fields of
    :class:`~pipeplan.metrics.Metrics` plus ``fits`` (within the budget) and, for GPipe, ``microbatches_per_flush``.
    Raises :class:`ConfigError` (a ``ValueError``) on invalid input, e.g. a budget below one activation.
    """
    problem = Problem(
        num_stages=num_stages,
        num_microbatches=total_microbatches,
        forward=forward,
        backward=backward,
        backward_weight=backward_weight,
        comm=comm,
        activation=activation,
        weight_activation=weight_activation,
        budget=memory_budget,
    )
    evaluated = [compute_metrics(simulate(problem, schedule)) for schedule in candidate_schedules(problem)]
    chosen = choose(evaluated)
    if chosen is None:
        raise ConfigError("no schedule fits memory_budget; raise it (GPipe with one microbatch per flush needs "
                          "one activation per stage on each device)")
    n = problem.num_microbatches

    def entry(m: Metrics) -> dict[str, Any]:
        row = m.to_dict()
        row["fits"] = m.feasible
        if m.schedule == "gpipe":
            row["microbatches_per_flush"] = math.ceil(n / m.flushes)
        return row

    return {"chosen": entry(chosen), "candidates": [entry(m) for m in evaluated]}
