"""Times and memory may be in any unit: the same problem in seconds or nanoseconds, in activations or in units of
1e-9 (bytes, GiB, ...), gets the same schedules, the same feasibility verdicts and the same optimum.

Found by a new user's trial: with an activation of 1e-9 and a budget of 2.5e-9 the solver returned a schedule
holding 3e-9 as feasible and optimal (the memory check's slack was an absolute 1e-9, and CP-SAT saw every demand
rounded down to zero ticks)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import binding_problems

from pipeplan import Problem, simulate, solve
from pipeplan.metrics import compute_metrics
from pipeplan.schedules import generate_applicable
from pipeplan.solver import OPTIMAL, tick_problem


def scaled(problem: Problem, time_unit: float, memory_unit: float) -> Problem:
    """``problem`` with every time multiplied by ``time_unit`` and every memory amount by ``memory_unit``."""

    def times(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(v * time_unit for v in values)

    def memory(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(v * memory_unit for v in values)

    return replace(problem, forward=times(problem.forward), backward=times(problem.backward),
                   backward_weight=times(problem.backward_weight), comm=times(problem.comm),
                   activation=memory(problem.activation), weight_activation=memory(problem.weight_activation),
                   budget=None if problem.budget is None else memory(problem.budget))


def over_budget(problem: Problem, peaks: list[float]) -> bool:
    """Whether some peak is over its budget by more than float noise, judged in the problem's own unit."""
    assert problem.budget is not None
    return any(peak > room * (1 + 1e-9) for peak, room in zip(peaks, problem.budget))


@pytest.mark.parametrize("memory_unit", [1e-12, 1e-9, 1e-3, 1.0, 1e9])
def test_a_budget_in_small_units_holds_as_in_whole_activations(memory_unit: float) -> None:
    problem = scaled(Problem.build(3, 4, budget=2.5), 1.0, memory_unit)
    result = solve(problem, time_limit_s=10, num_workers=1)
    assert [peak / memory_unit for peak in result.metrics.peak_memory_per_device] == pytest.approx([2.0, 2.0, 1.0])
    assert result.status == OPTIMAL and result.objective == pytest.approx(21.0)


@pytest.mark.parametrize("time_unit", [1e-9, 1e-3, 1e6])
def test_times_in_small_or_large_units_give_the_same_optimum(time_unit: float) -> None:
    problem = scaled(Problem.build(3, 4, comm=0.03, budget=2), time_unit, 1.0)
    assert tick_problem(problem)[2]  # whole ticks, as in the unit of 1: no rounded relaxation
    result = solve(problem, time_limit_s=10, num_workers=1)
    assert result.status == OPTIMAL and result.objective / time_unit == pytest.approx(21.24)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=binding_problems(), time_exponent=st.sampled_from([-9, -3, 3]),
       memory_exponent=st.sampled_from([-12, -9, -3, 6]))
def test_every_verdict_and_answer_is_the_same_in_any_unit(problem: Problem, time_exponent: int,
                                                          memory_exponent: int) -> None:
    time_unit, memory_unit = 10.0**time_exponent, 10.0**memory_exponent
    other = scaled(problem, time_unit, memory_unit)
    assert tick_problem(other)[2] == tick_problem(problem)[2]
    # Every named schedule: the same orders, makespan and verdict on the budget.
    named, _ = generate_applicable(problem)
    named_other, _ = generate_applicable(other)
    assert [s.name for s in named] == [s.name for s in named_other]
    for schedule, schedule_other in zip(named, named_other):
        metrics, metrics_other = compute_metrics(simulate(problem, schedule)), compute_metrics(
            simulate(other, schedule_other))
        assert metrics_other.feasible == metrics.feasible, schedule.name
        assert metrics_other.feasible == (not over_budget(other, metrics_other.peak_memory_per_device))
        assert metrics_other.makespan == pytest.approx(metrics.makespan * time_unit, rel=1e-9)
    # The optimizer: a schedule within the budget in the small unit, and the same optimum when both are proven.
    result = solve(problem, time_limit_s=1, num_workers=1)
    result_other = solve(other, time_limit_s=1, num_workers=1)
    assert not over_budget(other, result_other.metrics.peak_memory_per_device)
    assert result_other.lower_bound <= result_other.objective * (1 + 1e-9)
    replayed = compute_metrics(simulate(problem, result_other.schedule))  # its orders in the unit of 1
    assert replayed.feasible and replayed.makespan == pytest.approx(result_other.objective / time_unit, rel=1e-6)
    if result.status == OPTIMAL and result_other.status == OPTIMAL:
        assert result_other.objective / time_unit == pytest.approx(result.objective, rel=1e-6)
