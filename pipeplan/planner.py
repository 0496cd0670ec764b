"""Choose a schedule: the quick planner over named schedules, and the comparison with the optimizer.

:func:`plan` is the seed's quick answer (no solver): it simulates each named schedule, and GPipe with each flush
size, and keeps the feasible one with the lowest bubble; ties go to the simpler schedule. :func:`compare` is
what ``pipeplan solve`` shows: every named schedule beside the CP-SAT optimum, and the one to run.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pipeplan import schedules
from pipeplan.bounds import minimum_budget
from pipeplan.config import SolverSettings, warn_mixed_forms
from pipeplan.metrics import Metrics, compute_metrics, order_peaks, within_budget
from pipeplan.problem import ConfigError, Problem, fields_named_as
from pipeplan.schedule import Schedule
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.simulate import Timeline, simulate
from pipeplan.solver import (
    ProgressCallback,
    SolveResult,
    StopRequest,
    checked_arguments,
    objective_of,
    solve_checked,
)

log = logging.getLogger(__name__)

# Bubbles closer than this are a tie (float sums of the same schedule can differ in the last bits).
_TIE = 1e-9


def gpipe_flush_sizes(num_microbatches: int) -> list[int]:
    """Every flush size that gives a distinct number of flushes, largest first (O(sqrt N) sizes)."""
    sizes = {math.ceil(num_microbatches / flushes) for flushes in range(1, num_microbatches + 1)}
    return sorted(sizes, reverse=True)


# The model layouts plan() tries when the caller does not fix one: (num_chunks, placement).
LAYOUTS: tuple[tuple[int, str], ...] = ((1, "loop"), (2, "loop"), (2, "v"))


def candidate_schedules(problem: Problem) -> Iterator[Schedule]:
    """Every variant the planner considers on one layout: with one chunk per device GPipe at every flush size
    (with chunks GPipe is left out: see :func:`plan`), then each applicable generator. One at a time, so that
    each can be replayed and let go before the next is built (as a list they held 650 MB at P=8, N=3,000)."""
    if problem.num_chunks == 1:
        for k in gpipe_flush_sizes(problem.num_microbatches):
            yield gpipe_with_flush_size(problem, k)
    built, reasons = schedules.generate_applicable(problem, skip=("gpipe",))
    for name, reason in reasons.items():
        log.info("skipping %s: %s", name, reason)
    yield from built


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a batch of replays, and resumed after it (when it was on).
    The replays make and drop millions of small objects and no reference cycles; each automatic collection
    walks every object alive. At P=8, N=1,500, plan() took 9.9 s with it on and 6.6 s with it off; with the
    candidates one at a time, 12.8 s and 7.0 s."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def choose(metrics: list[Metrics], chunks: list[int] | None = None) -> int | None:
    """Index of the feasible entry with the lowest bubble; ties go to the simplest (earliest registered,
    fewest flushes, fewest chunks per device). ``chunks[i]`` is entry i's num_chunks (default 1)."""
    order = {name: i for i, name in enumerate(schedules.names())}
    chunks = chunks or [1] * len(metrics)
    feasible = [i for i, m in enumerate(metrics) if m.feasible]
    if not feasible:
        return None
    best = min(metrics[i].bubble for i in feasible)
    tied = [i for i in feasible if metrics[i].bubble <= best + _TIE]
    return min(tied, key=lambda i: (order.get(metrics[i].schedule, len(order)), metrics[i].flushes, chunks[i]))


# Config field -> the keyword of :func:`plan` that sets it, so that plan's errors name its own arguments.
_PLAN_KEYWORDS = {
    "pipeline.num_stages": "num_stages",
    "pipeline.num_microbatches": "total_microbatches",
    "pipeline.num_chunks": "num_chunks",
    "pipeline.placement": "placement",
    "costs.forward": "forward",
    "costs.backward": "backward",
    "costs.backward_weight": "backward_weight",
    "costs.comm": "comm",
    "memory.activation": "activation",
    "memory.weight_activation": "weight_activation",
    "memory.budget": "memory_budget",
}



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
    num_chunks: int | None = None,
    placement: str | None = None,
) -> dict[str, Any]:
    """Choose a schedule for a pipeline of ``num_stages`` devices and ``total_microbatches`` microbatches.

    ``memory_budget`` is the live activation memory each device may hold, in the unit of ``activation``
    (None: unlimited). Costs and memory are per device (a number, or a list of ``num_stages`` values). Without
    ``num_chunks`` the planner also tries 2 chunks per device, in loop and V placement (:data:`LAYOUTS`), for
    interleaved 1F1B and ZB-V; the model is the same, each device's share split evenly over its chunks. With
    ``placement`` ("loop" or "v") but no ``num_chunks`` it tries that placement's layouts only; with
    ``num_chunks``, that many chunks in ``placement`` (default "loop").

    Returns ``{"chosen": {...}, "candidates": [...]}``; each entry has the fields of
    :class:`~pipeplan.metrics.Metrics` plus ``fits`` (within the budget), ``num_chunks``, ``placement`` and, for
    GPipe, ``microbatches_per_flush``. Raises :class:`ConfigError` (a ``ValueError``) on invalid input, e.g. a
    budget below one activation.
    """
    if num_chunks is not None:
        layouts: Sequence[tuple[int, str]] = ((num_chunks, placement or "loop"),)
    elif placement is not None:  # an unknown placement: Problem.build names the ones there are
        layouts = [layout for layout in LAYOUTS if layout[1] == placement] or [(1, placement)]
    else:
        layouts = LAYOUTS
    problems: list[Problem] = []  # every layout is built (and checked) before any is replayed
    split = {"forward": forward, "backward": backward, "backward_weight": backward_weight, "activation": activation,
             "weight_activation": weight_activation}  # a device's share, or one value per model stage
    # As a config's fields: a keyword left at its default (plan's are Problem.build's) is not given.
    defaults = inspect.signature(Problem.build).parameters
    given = {key: value for key, value in split.items()
             if not (isinstance(value, (int, float)) and value == defaults[key].default)}
    for chunks, where in layouts:
        try:
            with fields_named_as(_PLAN_KEYWORDS):
                problems.append(Problem.build(num_stages=num_stages, num_microbatches=total_microbatches, comm=comm,
                                              budget=memory_budget, num_chunks=chunks, placement=where, **split))
        except ConfigError as exc:
            if num_chunks is not None or not problems:
                raise
            # A layout the caller did not ask for, e.g. 2 chunks on a pipeline too large to replay twice over.
            log.info("plan: skipping %d chunks in %s placement: %s", chunks, where, exc)
            continue
        warn_mixed_forms(given, problems[-1], _PLAN_KEYWORDS)
    with _collection_paused():
        evaluated = [(problem, compute_metrics(simulate(problem, s)))
                     for problem in problems for s in candidate_schedules(problem)]
    picked = choose([m for _, m in evaluated], [p.num_chunks for p, _ in evaluated])
    if picked is None and all(problem.num_chunks > 1 for problem in problems):
        # No layout of one chunk is tried (the caller fixed the chunks, or V placement) and nothing else fits:
        # GPipe on the chunks, so that a budget it fits never meets "no schedule fits". Only then: it ties
        # interleaved 1F1B's bubble at more memory, and ties go to GPipe.
        evaluated += [(problem, compute_metrics(simulate(problem, schedules.generate("gpipe", problem))))
                      for problem in problems]
        picked = choose([m for _, m in evaluated], [p.num_chunks for p, _ in evaluated])
    if picked is None:
        least = min(max(minimum_budget(problem)) for problem in problems)
        raise ConfigError(f"no schedule fits memory_budget {memory_budget}; the least that fits one is {least:g} "
                          "(GPipe with one microbatch per flush holds one microbatch's activations on each device)")

    def entry(problem: Problem, m: Metrics) -> dict[str, Any]:
        row = m.to_dict()
        row.update(fits=m.feasible, num_chunks=problem.num_chunks, placement=problem.placement)
        if m.schedule == "gpipe":
            row["microbatches_per_flush"] = math.ceil(problem.num_microbatches / m.flushes)
        return row

    return {"chosen": entry(*evaluated[picked]), "candidates": [entry(p, m) for p, m in evaluated]}


@dataclass(frozen=True)
class Evaluated:
    """One named schedule replayed on a problem."""

    schedule: Schedule
    timeline: Timeline
    metrics: Metrics


@dataclass(frozen=True)
class Comparison:
    """Every named schedule and the optimizer's answer on one problem, and the one to run.

    ``chosen`` is the feasible schedule with the best objective; a named schedule wins a tie with the optimizer,
    since frameworks already implement it, and among tied named schedules the one with less peak memory, then
    the simpler one. ``skipped`` says, per schedule name, why it does not apply. ``other_layouts`` lists named
    schedules that would beat the chosen one within the budget if the model were cut into other chunks
    (:data:`LAYOUTS`): the optimizer only searches the config's layout, so this says where else to look.
    """

    problem: Problem
    objective: str
    named: list[Evaluated]
    optimal: SolveResult
    skipped: dict[str, str]
    chosen: str
    other_layouts: list[dict[str, Any]]
    other_layouts_whole: bool = True
    """False when a stop left some named schedules on the other layouts unreplayed (``other_layouts`` may then
    lack some)."""

    def rows(self) -> list[dict[str, Any]]:
        """One JSON-ready record per schedule: ``simulate``'s fields, plus status, bound and gap for the optimizer."""
        rows = [e.metrics.to_dict() for e in self.named]
        opt = self.optimal.metrics.to_dict()
        opt.update(
            status=self.optimal.status,
            lower_bound=self.optimal.lower_bound,
            gap=self.optimal.gap,
            solve_time_s=self.optimal.solve_time_s,
            source=self.optimal.source,
            search=self.optimal.search,
            interrupted=self.optimal.interrupted,
        )
        rows.append(opt)
        return rows

    def summary(self, name: str) -> dict[str, Any]:
        """The ``solve --format json`` object."""
        budget = self.problem.budget
        memory_budget: float | list[float] | None
        if budget is None:
            memory_budget = None
        elif len(set(budget)) == 1:
            memory_budget = budget[0]
        else:
            memory_budget = list(budget)
        return {
            "name": name,
            "num_stages": self.problem.num_devices,
            "num_microbatches": self.problem.num_microbatches,
            "num_chunks": self.problem.num_chunks,
            "memory_budget": memory_budget,
            "objective": self.objective,
            "schedules": self.rows(),
            "skipped": self.skipped,
            "chosen": self.chosen,
            "other_layouts": self.other_layouts,
            "interrupted": self.optimal.interrupted,
        }

    def timelines(self) -> dict[str, Timeline]:
        """Replayed timeline of every schedule, keyed by schedule name."""
        found = {e.schedule.name: e.timeline for e in self.named}
        found["optimal"] = self.optimal.timeline
        return found


def evaluate_named(problem: Problem, fitting_only: bool = False) -> tuple[list[Evaluated], dict[str, str]]:
    """Replay every registered schedule that applies; return them and, keyed by name, why others were skipped.

    ``fitting_only``: leave out, unreplayed, the schedules whose orders alone show a peak above the budget
    (:func:`~pipeplan.metrics.order_peaks`; a replay takes about a second at 200,000 ops)."""
    named, skipped, _ = replay_named(problem, fitting_only)
    return named, skipped


def replay_named(problem: Problem, fitting_only: bool = False,
                 stop: StopRequest | None = None) -> tuple[list[Evaluated], dict[str, str], bool]:
    """:func:`evaluate_named`, leaving out the schedules not replayed yet once ``stop`` is requested; the third
    value says whether none was left out so."""
    named: list[Evaluated] = []
    built, skipped = schedules.generate_applicable(problem)
    for schedule in built:
        if fitting_only and problem.budget is not None:
            peaks = order_peaks(problem, schedule)
            if peaks is not None and not within_budget(peaks, problem.budget):
                continue
        if stop is not None and stop.requested:
            log.info("stop requested: %s and the named schedules after it not replayed", schedule.name)
            return named, skipped, False
        timeline = simulate(problem, schedule)
        named.append(Evaluated(schedule, timeline, compute_metrics(timeline)))
    return named, skipped, True


def compare(
    problem: Problem,
    settings: SolverSettings | None = None,
    progress: ProgressCallback | None = None,
    hints: Sequence[Schedule] = (),
    stop: StopRequest | None = None,
    *,
    objective: str | None = None,
    time_limit_s: float | None = None,
    num_workers: int | None = None,
    random_seed: int | None = None,
    phase: Callable[[str], None] | None = None,
) -> Comparison:
    """Replay every named schedule, run the optimizer, and choose the feasible schedule with the best objective.

    ``settings`` and the keywords as in :func:`~pipeplan.solver.solve` (the defaults when None, a keyword over
    its field). ``stop`` ends the optimizer's search early (its answer is then the best found so far, marked
    interrupted); once the search is over it ends the comparison with the other layouts (the comparison's
    ``other_layouts_whole`` is then False). ``phase``, when given, hears each step as it begins: "named" (the named
    schedules replayed), "search" (the optimizer) and "layouts" (the named schedules on the other layouts)."""
    settings, hints = checked_arguments(problem, settings, hints=hints, progress=progress, stop=stop,
                                        objective=objective, time_limit_s=time_limit_s, num_workers=num_workers,
                                        random_seed=random_seed)
    if phase is not None:
        phase("named")
    named, skipped = evaluate_named(problem)
    if phase is not None:
        phase("search")
    optimal = solve_checked(problem, settings, progress=progress, hints=hints, stop=stop,
                            named=[(e.schedule, e.metrics) for e in named])
    order = {name: i for i, name in enumerate(schedules.names())}
    # (objective, is the optimizer, peak memory, simplicity, name) of every feasible schedule.
    feasible = [
        (objective_of(e.metrics, settings.objective), False, e.metrics.peak_memory, order[e.schedule.name],
         e.schedule.name)
        for e in named
        if e.metrics.feasible
    ]
    feasible.append((optimal.objective, True, optimal.metrics.peak_memory, len(order), "optimal"))
    best = min(entry[0] for entry in feasible)
    tied = [entry for entry in feasible if entry[0] <= best * (1 + _TIE) + _TIE]
    chosen = min(tied, key=lambda entry: entry[1:])[-1]
    if phase is not None:
        phase("layouts")
    others, whole = better_on_other_layouts(problem, settings.objective, best, stop)
    return Comparison(problem, settings.objective, named, optimal, skipped, chosen, others, whole)


def better_on_other_layouts(problem: Problem, objective: str, value: float,
                            stop: StopRequest | None = None) -> tuple[list[dict[str, Any]], bool]:
    """Named schedules on the other layouts of :data:`LAYOUTS` that fit the budget and beat ``value``, and whether
    every one was replayed: the layouts not replayed yet, and the schedules not replayed yet on the layout under
    way, are left out once ``stop`` is requested (their replays take a minute at the size limit)."""
    found = []
    whole = True
    for chunks, placement in LAYOUTS:
        if (chunks, placement) == (problem.num_chunks, problem.placement):
            continue
        if stop is not None and stop.requested:
            log.info("stop requested: named schedules on the other layouts from %s x %s on not replayed", chunks,
                     placement)
            whole = False
            break
        try:
            other = problem.with_layout(chunks, placement)
        except ConfigError as exc:
            log.info("layout %s x %s does not fit: %s", chunks, placement, exc)
            continue
        replayed, _, all_replayed = replay_named(other, fitting_only=True, stop=stop)
        whole = whole and all_replayed
        for e in replayed:
            if e.metrics.feasible and objective_of(e.metrics, objective) < value * (1 - _TIE):
                found.append({"schedule": e.schedule.name, "num_chunks": chunks, "placement": placement,
                              "makespan": e.metrics.makespan, "stage_span": e.metrics.stage_span,
                              "peak_memory": e.metrics.peak_memory})
    return sorted(found, key=lambda row: row[objective]), whole
