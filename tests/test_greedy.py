"""The greedy list schedulers (the optimizer's warm starts): they never stall on a budget that admits a schedule
and every schedule they return is valid; the age-ordered admission lets a new microbatch in while an older one
is out on the device's other chunks."""

from __future__ import annotations

import pytest
from exhaustive import per_stage_problem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_valid

from pipeplan import compute_metrics, simulate
from pipeplan.bounds import makespan_lower_bound
from pipeplan.problem import Problem
from pipeplan.schedules.greedy import AGE_RULES, RULES, GreedyRule, greedy_schedule, rules_for


def family_problem(p: int, n: int, budget: float) -> Problem:
    """The benchmark's split-backward family: F:B:W = 1 : 1 : 0.5, comm 0.03, weight_activation 0.35."""
    return Problem.build(num_stages=p, num_microbatches=n, forward=1.0, backward=1.0, backward_weight=0.5,
                         comm=0.03, activation=1.0, weight_activation=0.35, budget=budget)

costs = st.integers(min_value=1, max_value=16).map(lambda x: x / 4)


@st.composite
def layouts(draw: st.DrawFn) -> Problem:
    """P 1..4, N 1..8, 1 to 3 chunks (loop or V for 2), split or not, uneven costs and activations, a budget
    from one microbatch's footprint (the least that admits a schedule) to about three."""
    p = draw(st.integers(1, 4))
    n = draw(st.integers(1, 8))
    num_chunks, placement = draw(st.sampled_from([(1, "loop"), (2, "loop"), (2, "v"), (3, "loop")]))
    budget = st.one_of(st.just(0.0), st.integers(min_value=0, max_value=16).map(lambda x: x / 8))
    return draw(per_stage_problem(p, n, draw(st.booleans()), costs, budget, num_chunks, placement))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_every_rule_completes_with_a_valid_schedule(problem: Problem) -> None:
    for rule in rules_for(problem):
        schedule = greedy_schedule(problem, rule)
        assert schedule is not None, f"{rule.name} stalled"
        timeline = simulate(problem, schedule)
        metrics = compute_metrics(timeline)
        assert_valid(problem, timeline, metrics)
        assert metrics.feasible, f"{rule.name} exceeds the budget"


def test_age_rules_run_only_with_several_chunks() -> None:
    one = family_problem(4, 8, 2)
    assert rules_for(one) == RULES
    assert rules_for(one.with_layout(2, "v")) == RULES + AGE_RULES
    assert {rule.name for rule in AGE_RULES} == {"greedy-bfw-budget-age", "greedy-bwf-budget-age",
                                                 "greedy-bfw-1f1b-age", "greedy-bwf-1f1b-age"}


@pytest.mark.parametrize("placement", ["loop", "v"])
def test_age_admission_overlaps_microbatches_at_one_microbatch_of_budget(placement: str) -> None:
    """At a budget of one microbatch's footprint a reservation admits one microbatch per device at a time (the
    pipeline runs microbatch after microbatch); by age, microbatch m + 1 starts its first chunk once m no longer
    needs the room, so the makespan falls to near the memory bound. Measured: P=8, N=16, F:B:W = 1:1:0.5 per
    device, loop 274.40 -> 213.65 (bound 207.05), V 273.44 -> 165.89 (bound 150.89)."""
    problem = family_problem(8, 16, 1).with_layout(2, placement)
    reserve = greedy_schedule(problem, GreedyRule("bfw", "budget"))
    by_age = greedy_schedule(problem, GreedyRule("bfw", "budget", "age"))
    assert reserve is not None and by_age is not None
    reserve_value = compute_metrics(simulate(problem, reserve)).makespan
    age_value = compute_metrics(simulate(problem, by_age)).makespan
    bound = makespan_lower_bound(problem)
    assert age_value < 0.8 * reserve_value
    assert age_value < 1.1 * bound
    assert age_value >= bound - 1e-9


def test_age_rules_run_on_long_pipelines() -> None:
    """The age rules look only at each stage's oldest forward, so they run at any N: at 600 microbatches (more
    than a scan of the held-back forwards could afford) every one completes within the budget."""
    problem = family_problem(2, 600, 1.0).with_layout(2, "v")
    assert set(AGE_RULES) <= set(rules_for(problem))
    for rule in AGE_RULES:
        schedule = greedy_schedule(problem, rule)
        assert schedule is not None, f"{rule.name} stalled"
        timeline = simulate(problem, schedule)
        metrics = compute_metrics(timeline)
        assert_valid(problem, timeline, metrics)
        assert metrics.feasible
        # One microbatch of budget: each device holds its chunk activations of one microbatch at a time (and
        # the weight activations), so the run is far from one microbatch after another.
        assert metrics.makespan < 600 * 2 * 2.5
