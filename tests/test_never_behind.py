"""Never behind a shipped schedule: whatever the time limit, the optimizer's answer is no worse than the best
registered generator that fits the budget, on one chunk per device and on two (loop and V placement), with
unequal costs and memory."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_valid
from strategies import uneven_stage_values

from pipeplan import Problem, compute_metrics, simulate
from pipeplan.schedules import generate_applicable
from pipeplan.solver import objective_of, solve

EPS = 1e-6


@st.composite
def layouts(draw: st.DrawFn) -> Problem:
    """P 1..4, N 1..8, 1 or 2 chunks (loop or V), split backward or not, uneven costs, a budget that admits a
    schedule (at least one microbatch's activations on all of a device's chunks) or none."""
    p = draw(st.integers(1, 4))
    n = draw(st.integers(1, 8))
    num_chunks, placement = draw(st.sampled_from([(1, "loop"), (2, "loop"), (2, "v")]))
    values = draw(uneven_stage_values(num_chunks * p, p))
    if draw(st.booleans()):
        values["backward_weight"] = 0.0
        values["weight_activation"] = 0.0
    budget = values.pop("budget")
    problem = Problem.build(p, n, num_chunks=num_chunks, placement=placement, **values)
    if budget is None:
        return problem
    least = max(problem.footprint(d) for d in range(p))
    return problem.with_budget(max(float(budget), least))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.sampled_from(["makespan", "stage_span"]), st.sampled_from([0.05, 0.5]))
def test_never_behind_a_registered_schedule(problem: Problem, objective: str, time_limit_s: float) -> None:
    result = solve(problem, objective=objective, time_limit_s=time_limit_s, num_workers=1)
    assert_valid(problem, result.timeline, result.metrics)
    assert result.metrics.feasible
    for schedule in generate_applicable(problem)[0]:
        metrics = compute_metrics(simulate(problem, schedule))
        if metrics.feasible:
            value = objective_of(metrics, objective)
            assert result.objective <= value + EPS, f"{schedule.name} reaches {value}, solve {result.objective}"
    assert result.lower_bound <= result.objective + EPS
