"""The fluid bound (pipeplan.fluid_bound): a hand-traced case, a case where it beats the closed form, the
programme's feasibility rising with the horizon, the bound against every feasible order of tiny problems and
every warm start of random problems with unequal costs, both linear solvers, and the solver passing it on
(against optima proven without it: test_relaxations_below_optima.py)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest
from exhaustive import (
    OBJECTIVES,
    family,
    feasible_timelines,
    larger_problems,
    small_problems,
    tiny_chunk_problems,
    tiny_problems,
    value_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan import Problem
from pipeplan import fluid_bound as fluid
from pipeplan import solver as solver_module
from pipeplan.bounds import makespan_lower_bound, stage_span_lower_bound
from pipeplan.solver import solve, tick_problem, warm_starts

EPS = 1e-9
# A coarse grid keeps the random tests quick; the bound is valid on any grid.
TEST_STEPS = 60


def _bound(problem: Problem, objective: str, high: float, steps: int = TEST_STEPS) -> float:
    """The largest fluid bound over every device (the problem's unit), on a grid of ``steps`` over ``high``."""
    ticked, scale, exact = tick_problem(problem)
    assert exact
    return max(fluid.device_bound(ticked, d, objective, 0.0, high * scale, steps)
               for d in range(problem.num_devices)) / scale


def test_one_stage_with_room_for_one_microbatch_runs_them_one_after_another() -> None:
    """One stage, F = B = 1 (unsplit), budget one activation: F(m + 1) cannot start before B(m) ends, so the
    makespan is 2N = 10. In the programme: live memory x_F - x_B <= 1 and x_B(t) <= x_F(t - 2) give x_F(t) <=
    1 + x_F(t - 2), so x_F(2j) <= j + 1 and x_B(2j) <= j: x_B reaches 5 only at t = 10. The grid (a step of
    0.1 over 10) proves 10 less one step."""
    problem = Problem.build(num_stages=1, num_microbatches=5, forward=1.0, backward=1.0, budget=1.0)
    assert not problem.split_backward
    bound = _bound(problem, "makespan", high=10.0, steps=100)
    assert bound == pytest.approx(9.9)
    assert _bound(problem, "stage_span", high=10.0, steps=100) == pytest.approx(9.9)


def test_fluid_bound_proves_more_than_the_closed_form() -> None:
    """P=4, N=8, 2 chunks in loop placement, budget 2: the closed forms prove 27.11 for both objectives; device
    0's fluid bound 29.28 (on a grid of 300 steps), below the optimum (31.09, proven by CP-SAT on the whole
    model in about two minutes) and the best warm start."""
    problem = family(4, 8, 2).with_layout(2, "loop")
    ticked, scale, _ = tick_problem(problem)
    best = warm_starts(problem, "makespan")[0].objective
    closed_forms = {"makespan": makespan_lower_bound(ticked), "stage_span": stage_span_lower_bound(ticked)}
    for objective, closed in closed_forms.items():
        assert closed / scale == pytest.approx(27.1145, abs=1e-3)
        bound = fluid.device_bound(ticked, 0, objective, closed, best * scale, steps=300) / scale
        assert bound == pytest.approx(29.2777, abs=1e-3)
        assert bound <= 31.09 + EPS and bound <= best + EPS


def test_lower_bound_never_goes_below_its_floor_nor_works_above_the_incumbent() -> None:
    problem = family(4, 8, 2).with_layout(2, "loop")
    ticked, scale, _ = tick_problem(problem)
    assert fluid.lower_bound(ticked, "makespan", 3000.0, 3302.0) == 3000.0  # above what it proves (2944)
    started = time.monotonic()
    assert fluid.lower_bound(ticked, "makespan", 2800.0, 2800.0) == 2800.0  # the incumbent meets the floor
    assert fluid.lower_bound(ticked.with_budget(None), "makespan", 0.0, 3302.0) == 0.0  # memory cannot bind
    assert time.monotonic() - started < 1


def test_a_passed_deadline_or_a_stop_proves_nothing() -> None:
    problem = family(4, 8, 2).with_layout(2, "loop")
    ticked, _, _ = tick_problem(problem)
    started = time.monotonic()
    assert fluid.lower_bound(ticked, "makespan", 2711.0, 3302.0, deadline=started) == 2711.0
    assert fluid.lower_bound(ticked, "makespan", 2711.0, 3302.0, should_stop=lambda: True) == 2711.0
    assert time.monotonic() - started < 1


def test_highs_proves_what_glop_proves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback linear solver reads the same programme and reaches the same verdicts."""
    problem = family(4, 8, 2).with_layout(2, "loop")
    glop = _bound(problem, "makespan", high=33.02)
    monkeypatch.setattr(fluid, "_BACKENDS", ("HIGHS",))
    assert _bound(problem, "makespan", high=33.02) == pytest.approx(glop)
    assert glop > 27.12


def test_unknown_objective_is_refused() -> None:
    ticked, _, _ = tick_problem(family(2, 4, 2))
    with pytest.raises(ValueError, match="objective"):
        fluid.feasible(ticked, 0, "throughput", 10.0, 5)


def test_rows_shift_counts_drop_what_falls_off_the_grid_and_sum_repeated_counts() -> None:
    """The programme's rows as the argument writes them: event 1's count two steps back and event 0's count, with
    event 0 named twice in the same row (the coefficients add up), on a grid of 4 steps (5 times)."""
    rows = fluid._Rows(events=2, horizon=4)
    rows.fix(0, first=1, last=3, n=7.0)
    rows.fix(1, first=0, last=4, n=7.0)
    rows.add([(0, 0, 1.0), (1, -2, -0.5), (0, 0, 2.0)], np.arange(5.0))
    assert not rows.impossible
    programme = rows.programme()
    assert programme.num_variables() == 10 and programme.num_constraints() == 5
    for k in range(5):
        terms = dict(zip(programme.constraint_var_indices(k), programme.constraint_coefficients(k), strict=True))
        expected = {k: 3.0} | ({5 + k - 2: -0.5} if k >= 2 else {})  # event 1's counts are variables 5 .. 9
        assert terms == expected
        assert programme.constraint_upper_bound(k) == k
    # bounds: event 0 is 0 before time 1 and 7 from time 3; event 1 reaches 7 at time 4
    assert [programme.var_upper_bound(v) for v in range(5)] == [0.0, 7.0, 7.0, 7.0, 7.0]
    assert [programme.var_lower_bound(v) for v in range(5)] == [0.0, 0.0, 0.0, 7.0, 7.0]
    assert [programme.var_lower_bound(v) for v in range(5, 10)] == [0.0, 0.0, 0.0, 0.0, 7.0]
    assert programme.constraint_lower_bound(0) == -math.inf
    # a row left without counts (every term before the grid) holds when its bound is at least 0, not below
    rows.add([(1, -9, 1.0)], np.array([0.0]))
    assert not rows.impossible
    rows.add([(1, -9, 1.0)], np.array([-1.0]))
    assert rows.impossible
    # no condition reads a count past the horizon: a row that would is refused, not cut short
    with pytest.raises(ValueError, match="past the horizon"):
        rows.add([(0, 1, 1.0)], np.zeros(5))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(), st.sampled_from(OBJECTIVES))
def test_feasibility_rises_with_the_horizon(problem: Problem, objective: str) -> None:
    """What the bisection relies on: once the programme is feasible, it stays feasible for every longer horizon
    (every count delayed by one step meets every condition)."""
    ticked, scale, exact = tick_problem(problem)
    assert exact
    high = ticked.total_time()
    # One float above high / 30, so that 30 steps reach high: the programme reads the step exactly, and high / 30
    # rounded down left 30 steps a hair short of high, where a schedule taking all of high (P=2, N=5, budget 1:
    # one microbatch at a time) rightly does not fit.
    step = math.nextafter(high / 30, math.inf)
    verdicts = [fluid.feasible(ticked, 0, objective, step, k) for k in range(31)]
    first = verdicts.index(True) if True in verdicts else len(verdicts)
    assert all(verdicts[first:]), verdicts
    assert verdicts[-1]  # every op run one after another fits the longest horizon


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(tiny_problems(), tiny_chunk_problems()))
def test_bound_holds_for_every_feasible_order_of_tiny_problems(problem: Problem) -> None:
    high = problem.total_time()
    bounds = {objective: _bound(problem, objective, high) for objective in OBJECTIVES}
    for timeline in feasible_timelines(problem):
        for objective in OBJECTIVES:
            assert bounds[objective] <= value_of(timeline, objective) + EPS


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(larger_problems(), st.sampled_from(OBJECTIVES))
def test_bound_never_exceeds_a_warm_start(problem: Problem, objective: str) -> None:
    """Every named schedule, greedy rule and pattern that fits the budget is a feasible schedule; the bound is
    the solver's own (the screen, then the fine grid on the best devices), on coarser grids to keep it quick,
    with the best of them as the top of its grid."""
    ticked, scale, _ = tick_problem(problem)
    candidates = warm_starts(problem, objective, deadline=time.monotonic() + 20)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fluid, "STEPS", 2 * TEST_STEPS)
        patch.setattr(fluid, "SCREEN_STEPS", TEST_STEPS)
        bound = fluid.lower_bound(ticked, objective, 0.0, candidates[0].objective * scale) / scale
    for candidate in candidates:
        assert bound <= candidate.objective + EPS, candidate.schedule.name


def test_solver_reports_the_fluid_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solver passes the fluid bound on as its own: whatever the bound proves in the time the solver gives it
    (here on coarse grids, with most of the time and no device relaxation, whose bound on this problem, 30.71, is
    higher), the answer's bound is at least that, and above the closed form's 27.11. The whole-model search gets a
    tenth of the time, so that the fluid bound has about 6 s: with 2 s it fell short of the closed form once on a
    machine whose host took a third of its time."""
    monkeypatch.setattr(fluid, "STEPS", 200)
    monkeypatch.setattr(fluid, "SCREEN_STEPS", 100)
    monkeypatch.setattr(solver_module, "SEARCH_SHARE", 0.1)
    monkeypatch.setattr(solver_module, "SPACING_SHARE", 0.05)
    monkeypatch.setattr(solver_module, "FLUID_SHARE", 0.9)
    monkeypatch.setattr(solver_module, "DEVICE_SHARE", 0.0)
    proven: list[float] = []
    real = fluid.lower_bound

    def recorded(*args: Any, **kwargs: Any) -> float:
        found = real(*args, **kwargs)
        proven.append(found)
        return found

    monkeypatch.setattr(fluid, "lower_bound", recorded)
    problem = family(4, 8, 2).with_layout(2, "loop")
    _, scale, _ = tick_problem(problem)
    result = solve(problem, objective="makespan", time_limit_s=8, num_workers=2)
    assert len(proven) == 1
    assert proven[0] / scale > 27.12
    assert result.lower_bound >= proven[0] / scale - 1e-6
    assert result.lower_bound <= result.objective + EPS


def test_short_solves_skip_the_fluid_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below FLUID_MIN_S of its share the solver leaves the time to the search."""
    called: list[float] = []
    monkeypatch.setattr(fluid, "lower_bound", lambda *args, **kwargs: called.append(1.0) or 0.0)
    ticked, _, _ = tick_problem(family(4, 8, 2).with_layout(2, "loop"))
    floor = math.ceil(makespan_lower_bound(ticked))
    now = time.monotonic()
    assert solver_module._fluid_bound(ticked, solver_module.SolverSettings(), now + 1.0, None, floor, 3302) == floor
    assert not called
