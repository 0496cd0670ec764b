"""ZB-V: V placement, two chunks per device. Near-zero bubble at 1F1B's peak memory when F, B and W cost about
the same; the construction's measured closed form; small N; a full trace worked out by hand; property tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import replay_valid
from strategies import uneven_stage_values

from pipeplan import Metrics, NotApplicable, Problem, Timeline, generate
from pipeplan.formulas import zb_h1_stage_span, zb_v_peak, zb_v_stage_span

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAME = "zb-v"


def replay(problem: Problem, name: str = NAME) -> tuple[Timeline, Metrics]:
    """Generate, replay and check every invariant; return the timeline and metrics."""
    return replay_valid(problem, name)


def v_problem(p: int, n: int, costs: tuple[float, float, float], comm: float = 0.0, **extra: Any) -> Problem:
    """F, B, W are a device's totals, split evenly over its two chunks."""
    f, b, w = costs
    return Problem.build(p, n, forward=f, backward=b, backward_weight=w, comm=comm, num_chunks=2, placement="v",
                   weight_activation=0.4, **extra)


def test_near_zero_bubble_at_1f1b_peak() -> None:
    # ZB-V's claim: near-zero bubble at F = B = W = 1, no comm, P = 4, N = 16.
    p, n = 4, 16
    _, zbv = replay(v_problem(p, n, (1.0, 1.0, 1.0)))
    flat = Problem.build(p, n, forward=1, backward=1, backward_weight=1, weight_activation=0.4)
    _, one_f_one_b = replay(flat, "1f1b")
    _, h1 = replay(flat, "zb-h1")
    assert zbv.peak_memory_per_device == [p] * p  # every device, 1F1B's peak of device 0
    assert one_f_one_b.peak_memory == p
    assert zbv.stage_span == n * 3  # every device busy from its first op to its last
    assert zbv.makespan == pytest.approx(n * 3 + (p - 1) * 0.5)  # only the first chunk's fill remains
    assert zbv.bubble < 0.035
    assert zbv.bubble < one_f_one_b.bubble / 3
    assert zbv.bubble < h1.bubble


# Closed form of this construction (measured by replay, no published form): with W <= F <= B and N >= 2P - 1,
# stage span = N(F+B+W) + (P-1)(B-W) and every device peaks at P activations.

COSTS = [(1.0, 1.0, 1.0), (1.0, 1.2, 0.6), (1.0, 2.0, 1.0), (0.8, 1.5, 0.5)]


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_stage_span_and_peak_match_closed_form(costs: tuple[float, float, float], p: int) -> None:
    for n in (2 * p - 1, 2 * p, 3 * p + 1):
        _, metrics = replay(v_problem(p, n, costs))
        assert metrics.stage_span == pytest.approx(zb_v_stage_span(p, n, *costs))
        assert metrics.peak_memory_per_device == pytest.approx([zb_v_peak(p, n)] * p)
        assert zb_v_peak(p, n) == p


@pytest.mark.parametrize("p", [2, 4, 6])
def test_beats_zb_h1_and_1f1b_at_equal_memory(p: int) -> None:
    for costs in COSTS:
        n = 3 * p
        _, zbv = replay(v_problem(p, n, costs))
        flat = Problem.build(p, n, forward=costs[0], backward=costs[1], backward_weight=costs[2], weight_activation=0.4)
        _, one_f_one_b = replay(flat, "1f1b")
        assert zbv.peak_memory == one_f_one_b.peak_memory == p
        assert zbv.stage_span < zb_h1_stage_span(p, n, *costs) < one_f_one_b.stage_span


@pytest.mark.parametrize("costs", [*COSTS, (2.0, 1.0, 0.5), (1.0, 1.0, 2.0)])
@pytest.mark.parametrize("comm", [0.0, 0.3, 1.0])
def test_small_n_and_outside_the_regime_respect_every_invariant(costs: tuple[float, float, float],
                                                                 comm: float) -> None:
    for p in (1, 2, 3, 5):
        for n in range(1, 2 * p + 1):
            _, metrics = replay(v_problem(p, n, costs, comm))
            assert metrics.peak_memory_per_device[0] == pytest.approx(zb_v_peak(p, n))
            assert metrics.peak_memory <= p + 1e-9


# Full trace worked out by hand: P = 2, N = 3 (= 2P - 1), every op 1, no comm. Device 0 holds stages 0 and 3,
# device 1 stages 1 and 2. Per device, (label, start, end).
TRACE = [
    # rank 0: 3 F0, 2 x (F1 B1 W1), then B0 W0 F1 B1 W1, then 2 x (B0 W0).
    [("F0@s0", 0, 1), ("F1@s0", 1, 2), ("F2@s0", 2, 3), ("F0@s3", 3, 4), ("B0@s3", 4, 5), ("W0@s3", 5, 6),
     ("F1@s3", 6, 7), ("B1@s3", 7, 8), ("W1@s3", 8, 9), ("B0@s0", 9, 10), ("W0@s0", 10, 11), ("F2@s3", 11, 12),
     ("B2@s3", 12, 13), ("W2@s3", 13, 14), ("B1@s0", 14, 15), ("W1@s0", 15, 16), ("B2@s0", 16, 17),
     ("W2@s0", 17, 18)],
    # rank 1: 1 F0, (F1 F0), (F1 B1 W1), then F0 B0 W0 F1 B1 W1, then (B0 B1) holding Ws, (B0 W0), held Ws.
    [("F0@s1", 1, 2), ("F0@s2", 2, 3), ("F1@s1", 3, 4), ("F1@s2", 4, 5), ("B0@s2", 5, 6), ("W0@s2", 6, 7),
     ("F2@s1", 7, 8), ("B0@s1", 8, 9), ("W0@s1", 9, 10), ("F2@s2", 10, 11), ("B1@s2", 11, 12), ("W1@s2", 12, 13),
     ("B1@s1", 13, 14), ("B2@s2", 14, 15), ("B2@s1", 15, 16), ("W1@s1", 16, 17), ("W2@s2", 17, 18),
     ("W2@s1", 18, 19)],
]


def test_full_trace_p2_n3() -> None:
    problem = Problem.build(
        2, 3, forward=[1] * 4, backward=[1] * 4, backward_weight=[1] * 4, num_chunks=2, placement="v")
    timeline, metrics = replay(problem)
    trace: list[list[tuple[str, float, float]]] = [[], []]
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        trace[device].append((op.label, start, end))
    assert trace == TRACE
    assert metrics.stage_span == zb_v_stage_span(2, 3, 2, 2, 2) == 18


def test_budget_is_never_silently_exceeded() -> None:
    _, metrics = replay(v_problem(4, 12, (1.0, 1.0, 1.0), budget=3))
    assert not metrics.feasible and metrics.peak_memory == 4
    _, metrics = replay(v_problem(4, 12, (1.0, 1.0, 1.0), budget=4))
    assert metrics.feasible


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"backward_weight": 1.0}, "in V placement"),
        ({"backward_weight": 1.0, "num_chunks": 2}, "in V placement"),
        ({"backward_weight": 1.0, "num_chunks": 3}, "in V placement"),
        ({"num_chunks": 2, "placement": "v"}, "split backward"),
    ],
)
def test_not_applicable(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(NotApplicable, match=message):
        generate(NAME, Problem.build(3, 6, **fields))


# Property tests: random uneven stages (per device or per model stage), comm and budgets.

@st.composite
def uneven_problems(draw: st.DrawFn) -> Problem:
    p = draw(st.integers(min_value=1, max_value=6))
    n = draw(st.integers(min_value=1, max_value=14))
    size = draw(st.sampled_from([p, 2 * p]))  # per device (split over the two chunks) or per model stage
    return Problem.build(p, n, num_chunks=2, placement="v", **draw(uneven_stage_values(size, p)))


@SETTINGS
@given(problem=uneven_problems())
def test_property_valid_and_within_budget_when_feasible(problem: Problem) -> None:
    _, metrics = replay(problem)  # assert_valid checks the budget whenever feasible is reported
    if problem.budget is None:
        assert metrics.feasible
    else:  # infeasible is reported exactly when some device goes over
        over = [peak > budget + 1e-9 for peak, budget in zip(metrics.peak_memory_per_device, problem.budget)]
        assert metrics.feasible == (not any(over))
    # Never more than 2P chunk-activations live: P of the device's largest chunk activation, doubled.
    for device in range(problem.num_devices):
        largest = max(problem.activation[s] for s in problem.stages_on_device(device))
        assert metrics.peak_memory_per_device[device] <= 2 * problem.num_devices * largest + 1e-9
