"""The collision bound (pipeplan.collision_bound): where it applies, a row where it proves the optimum that the
other bounds do not reach, and the bound against every feasible order of tiny problems and every warm start of
random problems with unequal costs (against optima proven without it: test_relaxations_below_optima.py)."""

from __future__ import annotations

import time

import pytest
from exhaustive import brute_force, examples, family, tiny_problems
from hypothesis import HealthCheck, assume, given, settings
from strategies import binding_problems

from pipeplan import Problem, simulate
from pipeplan.bounds import makespan_lower_bound
from pipeplan.collision_bound import applies, in_flight, lower_bound
from pipeplan.solver import solve, tick_problem, warm_starts
from pipeplan.spacing import spacing_bound, window_deltas

EPS = 1e-9


def collision(problem: Problem, limit_s: float = 2.0, as_the_solver: bool = False) -> float:
    """The bound CP-SAT proves on the relaxation within ``limit_s`` (two workers), in the problem's unit; 0 where
    the relaxation does not apply. ``as_the_solver``: built as the solver builds it, with the window bound's
    spacings (1 s of windows), the best warm start as the hint and the closed-form bound as the floor."""
    ticked, scale, exact = tick_problem(problem)
    assert exact
    if not as_the_solver:
        return lower_bound(ticked, time.monotonic() + limit_s, num_workers=2) / scale
    deltas = window_deltas(ticked, time.monotonic() + 1.0, num_workers=2)
    hint = simulate(ticked, warm_starts(problem, "makespan")[0].schedule)
    floor = makespan_lower_bound(ticked)
    return lower_bound(ticked, time.monotonic() + limit_s, num_workers=2, floor=floor, hint=hint,
                       spacings=deltas) / scale


def test_it_applies_to_one_chunk_and_the_makespan_where_memory_binds() -> None:
    tight = family(4, 8, 2)
    assert applies(tight) and in_flight(tight, 0) == 2
    assert not applies(tight, "stage_span")
    assert not applies(tight.with_layout(2, "v"))
    assert not applies(family(4, 8, 8))  # eight activations hold every microbatch: memory never binds
    assert not applies(tight.with_budget(None))
    assert collision(tight.with_layout(2, "loop")) == 0.0


def test_it_proves_an_optimum_the_other_bounds_do_not_reach() -> None:
    """P=5, N=15, the split-backward family, budget 3: the closed form gives 55.70 and the window bound 60.46; the
    relaxation proves 61.34 at once, the makespan of a schedule the solver finds, so the solve ends OPTIMAL (in
    about 8 s alone). (The instance was P=6, N=18, budget 4, where the solve took 20 s and more.)"""
    problem = family(5, 15, 3)
    bound = collision(problem, limit_s=20)
    ticked, scale, _ = tick_problem(problem)
    assert makespan_lower_bound(problem) < bound - 1
    assert spacing_bound(ticked, time.monotonic() + 5, num_workers=2) / scale < bound - 0.5
    # A generous limit: the solve ends as soon as the search meets the bound.
    result = solve(problem, objective="makespan", time_limit_s=90, num_workers=2)
    assert result.status == "OPTIMAL"
    assert result.objective == pytest.approx(bound, abs=1e-6)


@settings(max_examples=examples(40, 100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_problems())
def test_never_above_any_feasible_order_of_a_tiny_problem(problem: Problem) -> None:
    assume(applies(problem))
    optimum = brute_force(problem)["makespan"]
    assert collision(problem) <= optimum + EPS


@settings(max_examples=examples(30, 60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binding_problems())
def test_never_above_a_warm_start_of_a_random_problem(problem: Problem) -> None:
    # Unequal costs per stage, split or not, budgets from one microbatch up: every warm start fits the budget,
    # so none may be faster than the bound.
    assume(applies(problem))
    bound = collision(problem, limit_s=1.0)
    starts = warm_starts(problem, "makespan")
    assert starts
    assert all(bound <= start.objective + EPS for start in starts), [start.schedule.name for start in starts]

