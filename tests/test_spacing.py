"""The window bound (pipeplan.spacing): hand-derived windows, the chaining, and the bound against every feasible
order of tiny problems (against optima that CP-SAT proves without it: test_relaxations_below_optima.py)."""

from __future__ import annotations

import time

import pytest
from exhaustive import (
    examples,
    family,
    feasible_timelines,
    small_problems,
    tiny_chunk_problems,
    tiny_problems,
    value_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan import Problem, simulate, spacing
from pipeplan.bounds import makespan_lower_bound
from pipeplan.problem import OpKind
from pipeplan.schedules.greedy import GreedyRule, greedy_schedule
from pipeplan.solver import OPTIMAL, solve, tick_problem
from pipeplan.spacing import chain, solve_window, spacing_bound, tail, window_deltas

EPS = 1e-9


def test_windows_measure_the_memory_chain_on_one_chunk() -> None:
    """P=4, room for 2 activations. Two microbatches fit: F(0, 1) follows F(0, 0) by one F. A third needs the
    first's B(0) to end, a round trip (4 F + 3 B + 6 links = 7.18) plus B after F(0, 0) starts, and W(0, 0)'s
    share to be gone or B(0, 1) to have ended, another min(W, B) = 0.5: 8.68 (in ticks of 0.01)."""
    ticked, scale, exact = tick_problem(family(4, 16, 2))
    assert exact and scale == 100
    assert solve_window(ticked, 1, 10)[0] == 100
    assert solve_window(ticked, 2, 10)[0] == 868


def test_window_at_one_microbatch_in_v_sees_the_turn() -> None:
    """P=4, 2 chunks in V, room for one microbatch (both chunks, 0.5 each). Microbatch 1 may enter device 0
    once microbatch 0 no longer needs that room: after F(7, 0) (3.5 of forwards and 6 links), B(7, 0) and
    W(7, 0) (0.5 + 0.5 + 0.25): 4.93. Two apart it is more than twice that: at the turn (device 3 holds stages
    3 and 4) microbatch 1's forwards meet microbatch 0's backwards."""
    ticked, scale, _ = tick_problem(family(4, 12, 1).with_layout(2, "v"))
    one = solve_window(ticked, 1, 10)[0]
    assert one == round(4.93 * scale)
    assert solve_window(ticked, 2, 10)[0] > 2 * one


def test_smaller_windows_given_cut_the_model() -> None:
    """The window of 4 microbatches (j = 3) on P=4, room for 2 activations, told that any two microbatches'
    forwards on stage 0 are 20 apart (more than the true 8.68, to see the cut at work): F(0, 3) is then at least
    F(0, 1) + 20, and F(0, 1) at least F(0, 0) + 1, so 21; the chain of the given windows alone says 20, the
    true spacing is less."""
    ticked, _, _ = tick_problem(family(4, 16, 2))
    assert solve_window(ticked, 3, 10)[0] < 2000
    assert solve_window(ticked, 3, 10, known={2: 2000})[0] >= 2100
    # A window not smaller than j does not cut it.
    assert solve_window(ticked, 2, 10, known={2: 5000, 3: 9000})[0] == 868


def test_chain_takes_the_best_split() -> None:
    # 5 gaps with windows of 1 (1 apart) and 2 (5 apart): 2 + 2 + 1 gives 11.
    assert chain({1: 1, 2: 5}, 5) == 11
    assert chain({1: 3, 2: 5}, 4) == 12
    assert chain({1: 1}, 0) == 0
    # Without a window of 1, one gap is left uncounted (0).
    assert chain({2: 5}, 3) == 5
    assert chain({}, 3) == 0


def test_no_bound_where_memory_cannot_bind() -> None:
    assert spacing_bound(tick_problem(family(4, 8, 32))[0], time.monotonic() + 5) == 0.0
    unlimited = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0)
    assert spacing_bound(tick_problem(unlimited)[0], time.monotonic() + 5) == 0.0


def test_windows_stop_growing_after_unproven_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows grow while CP-SAT proves them; after MAX_UNPROVEN in a row it cannot, no larger one is tried.
    The solves are the real ones, their verdicts replaced by a fixed pattern: proven, not, proven, not, not."""
    verdicts = iter([True, False, True, False, False, True, True])
    tried: list[int] = []

    def judged(ticked: Problem, j: int, *args: object, **kwargs: object) -> tuple[int, bool]:
        tried.append(j)
        return solve_window(ticked, j, *args, **kwargs)[0], next(verdicts)  # type: ignore[arg-type]

    monkeypatch.setattr(spacing, "solve_window", judged)
    assert spacing.MAX_UNPROVEN == 2
    ticked, _, _ = tick_problem(family(4, 16, 2))
    deltas = window_deltas(ticked, time.monotonic() + 60)
    assert tried == [2, 3, 4, 5, 6]  # the first window whose three microbatches overflow a budget of two is j = 2
    assert sorted(deltas) == [1, *tried]


def _window_bound(problem: Problem) -> float:
    ticked, scale, _ = tick_problem(problem)
    return spacing_bound(ticked, time.monotonic() + 10, num_workers=1) / scale


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(tiny_problems(), tiny_chunk_problems()))
def test_bound_holds_for_every_feasible_order_of_tiny_problems(problem: Problem) -> None:
    bound = _window_bound(problem)
    for timeline in feasible_timelines(problem):
        for objective in ("makespan", "stage_span"):
            assert bound <= value_of(timeline, objective) + EPS


def test_solver_reports_the_window_bound_where_it_is_stronger() -> None:
    """P=4, N=12, V, room for one microbatch: the closed-form bound is 60.09; the first window alone gives
    11 x 4.93 + the last microbatch's trip (8 F, 8 B, W(0), 12 links: 8.61) = 62.84."""
    problem = family(4, 12, 1).with_layout(2, "v")
    assert makespan_lower_bound(problem) == pytest.approx(60.09)
    result = solve(problem, objective="makespan", time_limit_s=2, num_workers=2)
    assert result.lower_bound >= 62.84 - 1e-9
    assert result.lower_bound <= result.objective + 1e-9
    if result.status == OPTIMAL:
        assert result.objective == pytest.approx(result.lower_bound)


def test_tail_is_the_last_microbatchs_trip() -> None:
    problem = family(4, 12, 1).with_layout(2, "v")
    # 8 forwards and 8 backwards of 0.5, W(0) 0.25, 6 links each way between the 4 devices.
    assert tail(problem) == pytest.approx(8 * 0.5 + 8 * 0.5 + 0.25 + 12 * 0.03)


def test_a_window_stopped_by_its_time_limit_still_gives_a_bound() -> None:
    """P=4, N=8, 2 chunks in V, budget 2: the window of six microbatches is not solved in 10 ms. What comes back
    must still be a lower bound: at least the floor of j forwards on stage 0, at most the spacing of a real
    schedule of those microbatches alone (a greedy one, whose kinds run in microbatch order)."""
    j = 5
    ticked, _, _ = tick_problem(family(4, j + 1, 2).with_layout(2, "v"))
    bound = solve_window(ticked, j, 0.01)[0]
    schedule = greedy_schedule(ticked, GreedyRule("bfw", "budget", "age"))
    assert schedule is not None
    timeline = simulate(ticked, schedule)
    start = dict(zip(timeline.ops, timeline.start))
    spacing = start[ticked.op(OpKind.F, 0, j)] - start[ticked.op(OpKind.F, 0, 0)]
    assert j * ticked.forward[0] <= bound <= spacing


@settings(max_examples=examples(5, 8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_smaller_windows_cut_the_model_without_changing_its_optimum(problem: Problem) -> None:
    """Each window's model may be given the proven spacings of the smaller windows (F(0, m + i) at least
    delta_i after F(0, m)); on small random problems, where both models are solved to the end, the answers are
    the same."""
    ticked = tick_problem(problem)[0]
    known: dict[int, int] = {}
    for j in range(1, ticked.num_microbatches):
        alone, alone_exact = solve_window(ticked, j, 1)
        cut, cut_exact = solve_window(ticked, j, 1, known=known)
        if alone_exact and cut_exact:
            assert cut == alone
        if not cut_exact:
            break
        known[j] = cut
