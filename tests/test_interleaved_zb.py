"""Interleaved zero bubble (torch's ScheduleInterleavedZeroBubble with 2+ chunks per device): an order worked out
by hand from the rule, its warm-up and memory, how it compares with interleaved 1F1B, any N, and property tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from invariants import assert_valid, replay_valid
from strategies import uneven_stage_values

from pipeplan import (
    Metrics,
    NotApplicable,
    Problem,
    Schedule,
    ScheduleError,
    Timeline,
    compute_metrics,
    generate,
    simulate,
)
from pipeplan.problem import OpKind
from pipeplan.schedules import interleaved_zb
from pipeplan.schedules.interleaved import chunk_table, group_sizes
from pipeplan.schedules.interleaved_zb import _orders, smaller_groups, warmup_counts
from pipeplan.solver import solve, warm_starts

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAME = "interleaved-zb"


def replay(problem: Problem, name: str = NAME) -> tuple[Timeline, Metrics]:
    """Generate, replay and check every invariant; return the timeline and metrics."""
    return replay_valid(problem, name)


def uniform(p: int, n: int, v: int, costs: tuple[float, float, float] = (1.0, 1.0, 1.0), **extra: Any) -> Problem:
    """F, B, W are a device's totals, split evenly over its chunks."""
    f, b, w = costs
    return Problem.build(p, n, forward=f, backward=b, backward_weight=w, num_chunks=v, **extra)


def labels(problem: Problem) -> list[list[str]]:
    return [[op.label for op in order] for order in generate(NAME, problem).orders]


def test_order_worked_out_by_hand_p2_n4_v2() -> None:
    # Two groups of 2: forward chunk-ops (m, c) = (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1); backward k is
    # entry k with the chunk reversed. Rank 0 warms up (v-1)G + P-1 = 3 and sends every W at once (k >= 0);
    # rank 1 warms up 2 and holds one W back (k >= 1).
    orders = labels(uniform(2, 4, 2))
    assert orders[0] == [
        "F0@s0", "F1@s0", "F0@s2",
        "F1@s2", "B0@s2", "W0@s2", "F2@s0", "B1@s2", "W1@s2", "F3@s0", "B0@s0", "W0@s0", "F2@s2", "B1@s0", "W1@s0",
        "F3@s2", "B2@s2", "W2@s2", "B3@s2", "W3@s2", "B2@s0", "W2@s0", "B3@s0", "W3@s0",
    ]
    assert orders[1] == [
        "F0@s1", "F1@s1",
        "F0@s3", "B0@s3", "F1@s3", "B1@s3", "W0@s3", "F2@s1", "B0@s1", "W1@s3", "F3@s1", "B1@s1", "W0@s1",
        "F2@s3", "B2@s3", "W1@s1", "F3@s3", "B3@s3", "W2@s3", "B2@s1", "W3@s3", "B3@s1", "W2@s1", "W3@s1",
    ]


@pytest.mark.parametrize("v", [2, 3])
@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_peak_is_the_warm_up_plus_one(p: int, v: int) -> None:
    # Without a weight share (weight_activation 0) a held-back W keeps nothing alive, so rank r peaks at its
    # warm-up plus the first steady forward: (v-1)G + P - r chunk-activations of activation / v each.
    for n in sorted({p, 2 * p, 3 * p + 1, 4 * p}):
        _, metrics = replay(uniform(p, n, v))
        g = group_sizes(p, n)[0]
        want = [min((v - 1) * g + p - r, n * v) / v for r in range(p)]
        assert metrics.peak_memory_per_device == pytest.approx(want)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_faster_than_interleaved_1f1b_with_a_lower_peak(p: int) -> None:
    # F = B = W per device: interleaved 1F1B pays (P-1)(F+B)/v of bubble, this one (P-1)F/v.
    for n in (2 * p, 3 * p, 4 * p):
        _, zb = replay(uniform(p, n, 2))
        _, one_f_one_b = replay(uniform(p, n, 2), "interleaved-1f1b")
        assert zb.makespan == pytest.approx(3 * n + (p - 1) / 2)
        assert one_f_one_b.makespan == pytest.approx(3 * n + (p - 1))
        assert zb.peak_memory < one_f_one_b.peak_memory


def test_uneven_costs_keep_the_order_and_the_invariants() -> None:
    problem = Problem.build(3, 7, forward=[1.0, 1.5, 0.5, 2.0, 1.0, 1.25], backward=[2, 1, 1, 3, 1, 2],
                            backward_weight=[0.5, 1, 1, 0.25, 2, 1], comm=0.25, num_chunks=2,
                            activation=[1, 2, 1, 2, 1, 2], weight_activation=[0.5, 1, 0.5, 1, 0.5, 1])
    _, metrics = replay(problem)
    assert metrics.makespan > max(problem.device_work(d) for d in range(3))


def test_every_small_case_is_deadlock_free_and_valid() -> None:
    # Including every N that torch refuses (N not a multiple of its number of groups): uneven groups.
    for p in range(1, 7):
        for v in (2, 3, 4):
            for n in range(1, 3 * p + 3):
                replay(uniform(p, n, v, weight_activation=0.5))


def test_budget_is_never_silently_exceeded() -> None:
    _, metrics = replay(uniform(4, 8, 2, budget=3))
    assert not metrics.feasible and metrics.peak_memory == pytest.approx(4)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_chunks": 1, "backward_weight": 1.0}, "set pipeline.num_chunks: 2"),
        ({"num_chunks": 2, "placement": "v", "backward_weight": 1.0}, "set pipeline.placement: loop"),
        ({"num_chunks": 2}, "set costs.backward_weight > 0"),
    ],
)
def test_not_applicable(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(NotApplicable, match=message):
        generate(NAME, Problem.build(3, 6, **fields))


@st.composite
def uneven_problems(draw: st.DrawFn) -> Problem:
    p = draw(st.integers(min_value=1, max_value=5))
    v = draw(st.integers(min_value=2, max_value=3))
    n = draw(st.integers(min_value=1, max_value=12))
    size = draw(st.sampled_from([p, p * v]))  # per device (split over chunks) or per model stage
    return Problem.build(p, n, num_chunks=v, **draw(uneven_stage_values(size, p)))


@SETTINGS
@given(problem=uneven_problems())
def test_property_valid_and_feasible_exactly_when_within_budget(problem: Problem) -> None:
    _, metrics = replay(problem)
    if problem.budget is None:
        assert metrics.feasible
    else:
        over = [peak > budget + 1e-9 for peak, budget in zip(metrics.peak_memory_per_device, problem.budget)]
        assert metrics.feasible == (not any(over))


# ------------------------------------------------------------------ smaller groups (warm starts, not registered)


def test_smaller_groups_fit_a_budget_the_registered_order_does_not() -> None:
    """P=8, N=16, two chunks, the benchmark family (F:B:W = 1:1:0.5 per device, comm 0.03, weight_activation
    0.35) at 6 activations: the registered order's rank 0 holds (v-1)·8 + 8 = 16 chunk-activations (8), too
    many. Groups of 7, 6 and 5 hold 7.5, 7 and 6.5; groups of 4 hold (v-1)·4 + 8 = 12 chunk-activations, 6, and
    are the one order given. Its makespan, 50.14, is far below GPipe's 68.22, the best named schedule that
    fits. Without a budget, or at the registered order's own peak, there is nothing to give."""
    problem = Problem.build(8, 16, forward=1.0, backward=1.0, backward_weight=0.5, comm=0.03, num_chunks=2,
                            weight_activation=0.35, budget=6)
    (schedule,) = smaller_groups(problem)
    assert schedule.name == "interleaved-zb-g4"
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible and metrics.peak_memory_per_device[0] == pytest.approx(6.0)
    assert metrics.makespan == pytest.approx(50.14)
    assert smaller_groups(problem.with_budget(None)) == []
    assert smaller_groups(problem.with_budget(8)) == []


def test_the_optimizer_starts_from_smaller_groups() -> None:
    """The same problem: the groups of 4 are the optimizer's best warm start, and its answer is no worse."""
    problem = Problem.build(8, 16, forward=1.0, backward=1.0, backward_weight=0.5, comm=0.03, num_chunks=2,
                            weight_activation=0.35, budget=6)
    best = warm_starts(problem, "makespan")[0]
    assert best.schedule.name == "interleaved-zb-g4" and best.objective == pytest.approx(50.14)
    result = solve(problem, objective="makespan", time_limit_s=3, num_workers=1)
    assert result.objective <= 50.14 + 1e-9


def test_smaller_groups_below_half_of_p_would_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of g < (P - 1) / 2 are never tried: rank 0's warm-up would reach a later group's second chunk
    (here P=8, g=3: 3 + 7 = 10 forwards, past the 9 of group 0 and group 1's first chunk), whose forward waits
    on the last rank, which waits on rank 0's first B. The replay finds exactly that deadlock. At a budget of
    4.5 activations the groups of 4 and more overflow rank 0 and those of 1 to 3 would not, yet none of these
    is replayed."""
    problem = Problem.build(8, 16, forward=1.0, backward=1.0, backward_weight=0.5, num_chunks=2, budget=4.5)
    replayed: list[str] = []

    def spy(problem: Problem, schedule: Schedule) -> Timeline:
        replayed.append(schedule.name)
        return simulate(problem, schedule)

    monkeypatch.setattr(interleaved_zb, "simulate", spy)
    assert smaller_groups(problem) == [] and replayed == []
    orders = _orders(problem, chunk_table(8, 16, 2, [3] * 5 + [1]), 3)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(problem, Schedule.from_lists("g3", orders))


def test_group_sizes_must_split_the_microbatches() -> None:
    with pytest.raises(ValueError, match="do not split 16"):
        chunk_table(8, 16, 2, [4, 4, 4])


@st.composite
def budgeted_loop_problems(draw: st.DrawFn) -> Problem:
    """Uneven costs, 2 to 6 devices, 2 or 3 chunks in loop placement, a split backward, a budget from one
    microbatch's footprint up to the registered order's peak."""
    p = draw(st.integers(min_value=2, max_value=6))
    v = draw(st.integers(min_value=2, max_value=3))
    n = draw(st.integers(min_value=2, max_value=14))
    values = draw(uneven_stage_values(p * v, p))  # a split backward: every W takes some time
    values.pop("budget")
    problem = Problem.build(p, n, num_chunks=v, **values)
    peak = max(compute_metrics(simulate(problem, generate(NAME, problem))).peak_memory_per_device)
    low = max(problem.footprint(d) for d in range(p))
    return problem.with_budget(draw(st.floats(min_value=low, max_value=max(low, peak))))


@SETTINGS
@given(problem=budgeted_loop_problems())
def test_property_smaller_groups_are_valid_and_hold_less_on_rank_0(problem: Problem) -> None:
    """Every order given runs (no deadlock), is complete, keeps every dependency, never overlaps, and rank 0
    holds its warm-up plus one forward before its first B, no more than the budget allows."""
    given = smaller_groups(problem)
    event(f"orders given: {min(len(given), 2)}+")
    for schedule in given:
        timeline = simulate(problem, schedule)
        metrics = compute_metrics(timeline)
        assert_valid(problem, timeline, metrics)
        g = int(schedule.name.removeprefix("interleaved-zb-g"))
        assert (problem.num_devices - 1) / 2 <= g < group_sizes(problem.num_devices, problem.num_microbatches)[0]
        first_b = next(i for i, op in enumerate(schedule.orders[0]) if op.kind == OpKind.B)
        held = sum(problem.activation[op.stage] for op in schedule.orders[0][:first_b])
        assert first_b == warmup_counts(problem.num_devices, problem.num_microbatches, problem.num_chunks, g)[0] + 1
        assert held <= problem.budget[0] + 1e-9
