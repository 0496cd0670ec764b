"""The large-neighbourhood search: its windows, and moves that only ever keep valid, better schedules."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from invariants import assert_valid

import pipeplan.solver
from pipeplan import Problem, compute_metrics, simulate
from pipeplan.config import SolverSettings
from pipeplan.lns import WIDTHS, windows
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.solver import (
    RIVAL_MARGIN,
    _horizon,
    _Model,
    _neighbourhood_search,
    _rival,
    objective_of,
    solve,
    tick_problem,
    warm_starts,
)


def test_windows_slide_from_the_end_over_the_whole_schedule_then_go_random() -> None:
    makespan = 100
    first = list(itertools.islice(windows(makespan, seed=0), 200))
    assert (first[0].begin, first[0].end) == (100 - int(100 * WIDTHS[0]), 100)
    sliding = [w for w in first if w.end - w.begin == int(100 * WIDTHS[0])]
    covered = set().union(*(range(w.begin, w.end) for w in sliding))
    assert covered == set(range(makespan))
    assert all(0 <= w.begin < w.end <= makespan for w in first)


def test_improves_a_poor_incumbent_and_keeps_it_valid() -> None:
    # P=3, N=6, a budget of 2 activations and unequal costs; one microbatch at a time is far from optimal.
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, exact = tick_problem(problem)
    assert exact
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    settings = SolverSettings(num_workers=1)
    found = _neighbourhood_search(model, poor, settings, time.monotonic() + 3.0, stop=None)
    before = objective_of(compute_metrics(simulate(problem, poor)), "makespan")
    timeline = simulate(problem, found)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert metrics.makespan < before


def v_problem(budget: float) -> Problem:
    """P=4, N=16, 2 chunks in V placement, F:B:W = 1 : 1 : 0.5, comm 0.03: V-Half's pattern and the greedy rules
    come within 3 % of each other at a budget of 3 activations."""
    problem = Problem.build(4, 16, forward=1.0, backward=1.0, backward_weight=0.5, comm=0.03, activation=1.0,
                            weight_activation=0.35, budget=budget)
    return problem.with_layout(2, "v")


def test_the_rival_is_the_best_other_order_within_the_margin() -> None:
    candidates = warm_starts(v_problem(3), "makespan")
    best = candidates[0]
    rival = _rival(candidates, best.schedule, best.objective)
    assert rival is not None
    assert rival.orders != best.schedule.orders
    others = [c for c in candidates if c.schedule.orders != best.schedule.orders]
    assert rival is others[0].schedule
    assert others[0].objective <= best.objective * (1 + RIVAL_MARGIN)
    # Below the margin: no rival. Many greedy rules give the same orders; they are never each other's rival.
    assert _rival(candidates, best.schedule, others[0].objective / (1 + RIVAL_MARGIN) * 0.99) is None
    assert _rival([best, best], best.schedule, best.objective) is None


def test_the_search_probes_from_the_rival_too_and_returns_a_valid_better_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = v_problem(3)
    starts: list[str] = []
    search = pipeplan.solver._neighbourhood_search

    def recorded(model: _Model, incumbent: Any, *args: Any, **kwargs: Any) -> Any:
        starts.append(incumbent.name)
        return search(model, incumbent, *args, **kwargs)

    monkeypatch.setattr(pipeplan.solver, "_neighbourhood_search", recorded)
    result = solve(problem, time_limit_s=4, num_workers=2, random_seed=0)
    assert result.status != "OPTIMAL", "the case must leave a gap for the neighbourhood search"
    candidates = warm_starts(problem, "makespan")
    names = {c.schedule.name for c in candidates}
    # The incumbent, then the rival warm start, then the better of the two for the rest of the time.
    assert len(starts) == 3
    assert starts[1] in names and starts[1] != starts[0]
    assert_valid(problem, result.timeline, result.metrics)
    assert result.metrics.feasible
    assert result.objective <= candidates[0].objective
