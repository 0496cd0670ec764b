"""The large-neighbourhood search: its windows, and moves that only ever keep valid, better schedules."""

from __future__ import annotations

import itertools
import time

from invariants import assert_valid

from pipeplan import Problem, compute_metrics, simulate
from pipeplan.config import SolverSettings
from pipeplan.lns import WIDTHS, windows
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.solver import _horizon, _Model, _neighbourhood_search, objective_of, tick_problem


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
