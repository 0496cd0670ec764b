"""Times and memory may be in any unit: the same problem in seconds or nanoseconds, in activations or in units of
1e-9 (bytes, GiB, ...), gets the same schedules, the same feasibility verdicts and the same optimum.

Found by a new user's trial: with an activation of 1e-9 and a budget of 2.5e-9 the solver returned a schedule
holding 3e-9 as feasible and optimal (the memory check's slack was an absolute 1e-9, and CP-SAT saw every demand
rounded down to zero ticks)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import binding_problems

from pipeplan import Problem, simulate, solve
from pipeplan.bounds import makespan_lower_bound
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


@pytest.mark.parametrize("budget", [3703701.3703704, 3703701.37037037, 3 * 1234567.123456789])
def test_a_budget_of_exactly_three_odd_activations_holds_three(budget: float) -> None:
    """An activation of 1234567.123456789 (bytes, say) and a budget of three of them, as a user computes it.
    At 10**6 ticks a unit the activation lies 0.21 of a tick from a whole number, which a tolerance relative to
    1.2e12 ticks counted as whole: rounded up, with the budget rounded down, the ticked problem held two where the
    real one holds three, and its bound (23) exceeded 1F1B's 21, an internal error (found by a new user's trial)."""
    problem = Problem.build(3, 5, activation=1234567.123456789, budget=budget)
    result = solve(problem, time_limit_s=5, num_workers=1)
    assert result.status == OPTIMAL and result.objective == result.lower_bound == 21.0
    assert result.metrics.feasible and max(result.metrics.peak_memory_per_device) == pytest.approx(budget)


@pytest.mark.parametrize(("eps", "count"), [(0.001, 1000), (0.000999, 1001), (0.0005, 2000), (0.0009, 1200)])
def test_the_ticked_budget_holds_every_count_the_real_one_does(eps: float, count: int) -> None:
    """An activation a hair (eps of a tick) below a whole number of ticks, rounded up to it as float noise, and a
    budget of exactly ``count`` of them: summed over a thousand activations the rounding was a whole tick, so the
    model CP-SAT solves held count - 1 (found by a review). The ticked budget now has the replay's own slack."""
    activation = (1234567890 + 1 - eps) / 1e6
    problem = Problem.build(2, count + 1, activation=activation, budget=count * activation)
    assert problem.max_in_flight(0) == count
    ticked, _, _ = tick_problem(problem)
    assert ticked.budget is not None
    assert count * ticked.activation[0] <= ticked.budget[0]
    # Budgets of fewer ticks keep their value: the slack is 1e-9 of the budget.
    for fields, budget in (({"activation": 0.29, "budget": 0.87}, 87.0), ({"activation": 1.0, "budget": 3}, 3.0),
                           ({"activation": 1.0, "weight_activation": 0.35, "budget": 6}, 600.0),
                           ({"activation": 2 / 3, "budget": 2}, 6.0)):
        assert tick_problem(Problem.build(3, 8, backward_weight=0.5, **fields))[0].budget == (budget,) * 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=binding_problems(), memory_unit=st.floats(min_value=1e3, max_value=1e10),
       time_unit=st.sampled_from([1.0, 1.0 / 3, 7.123456789e-4, 1234.5678901]))
# Found by hypothesis on the old rounding (1,000 examples): the budget holds two activations of 1.0, a unit of
# about 5e9 ticks whole only at a scale where the tolerance spans ticks, so the ticked budget held one.
@example(problem=Problem.build(4, 2, forward=0.25, backward=[0.5, 0.25, 0.25, 0.25], activation=[1, 1, 1, 2],
                               budget=2), memory_unit=5000000000.875, time_unit=1.0)
def test_the_ticked_bound_stays_below_every_fitting_schedule_in_odd_units(problem: Problem, memory_unit: float,
                                                                         time_unit: float) -> None:
    """In any unit, round or not (a byte count per activation), the closed-form bound of the problem CP-SAT sees
    (in ticks, rounded to a relaxation where the unit is not whole) is at most every named schedule that fits the
    real budget."""
    other = scaled(problem, time_unit, memory_unit)
    ticked, scale, _ = tick_problem(other)
    bound = makespan_lower_bound(ticked) / scale
    for schedule in generate_applicable(other)[0]:
        metrics = compute_metrics(simulate(other, schedule))
        if metrics.feasible:
            assert bound <= metrics.makespan * (1 + 1e-9), schedule.name


def test_seconds_beside_bytes_keep_cp_sat_within_its_integers() -> None:
    """Times in seconds with many digits (10**6 ticks a unit) and memory in bytes (2.5e9 a microbatch): the memory
    scale alone allowed ticks whose products with the time ticks passed what CP-SAT's cumulative holds in 64 bits,
    and it answered INFEASIBLE on a model that has a solution, an internal error (found by a new user's trial).
    The memory scale is held below 2**61 over the time ticks; memory then rounds, as a relaxation."""
    a = 2499904865.71188
    seconds = Problem.build(num_stages=4, num_microbatches=8, forward=1.2345678, backward=1.2345678,
                            backward_weight=0.61728395, activation=a, weight_activation=0.35 * a, budget=3 * a)
    # Nanoseconds beside bytes: even a tick of one byte is too fine, so memory counts in thousands of bytes.
    nanoseconds = Problem.build(num_stages=4, num_microbatches=16, forward=123456.789, backward=234567.891,
                                backward_weight=111111.123, comm=3000.5, activation=a, weight_activation=0.35 * a,
                                budget=3 * a)
    for problem in (seconds, nanoseconds):
        ticked, scale, _ = tick_problem(problem)
        assert ticked.budget is not None and problem.total_time() * scale * max(ticked.budget) <= 2**61
        result = solve(problem, time_limit_s=2, num_workers=1)
        assert result.metrics.feasible and result.lower_bound <= result.objective
        for schedule in generate_applicable(problem)[0]:
            metrics = compute_metrics(simulate(problem, schedule))
            if metrics.feasible:
                assert result.objective <= metrics.makespan * (1 + 1e-9), schedule.name
    assert tick_problem(nanoseconds)[0].activation[0] == 2499904.0  # a thousand bytes a tick, rounded down
