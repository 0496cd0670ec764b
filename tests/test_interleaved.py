"""Interleaved 1F1B (Megatron-LM's virtual pipeline): Megatron's order, the bubble (P-1)/(vN) and memory factor
1 + (P-1)/(Pv), any N (not only multiples of P), a full trace worked out by hand, and property tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import replay_valid
from strategies import uneven_stage_values

from pipeplan import Metrics, NotApplicable, Problem, Timeline, compute_metrics, generate, simulate
from pipeplan.formulas import (
    interleaved_bubble,
    interleaved_makespan,
    interleaved_memory_factor,
    interleaved_peak,
    one_f_one_b_makespan,
)
from pipeplan.schedules import CHUNKED, generate_applicable

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAME = "interleaved-1f1b"

# (F, B, W) of a device's whole share of the model (split evenly over its chunks); W = 0: unsplit backward.
COSTS = [(1.0, 2.0, 0.0), (1.0, 1.0, 1.0), (1.0, 1.2, 0.6), (2.0, 1.0, 0.5)]


def replay(problem: Problem, name: str = NAME) -> tuple[Timeline, Metrics]:
    """Generate, replay and check every invariant; return the timeline and metrics."""
    return replay_valid(problem, name)


def uniform(p: int, n: int, v: int, costs: tuple[float, float, float], **extra: Any) -> Problem:
    f, b, w = costs
    return Problem.build(p, n, forward=f, backward=b, backward_weight=w, num_chunks=v, **extra)


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_makespan_and_peak_match_closed_form(costs: tuple[float, float, float], v: int, p: int) -> None:
    f, b, w = costs
    for n in sorted({p, p + 1, 2 * p, 2 * p + 1, 3 * p - 1, 3 * p, 4 * p}):
        _, metrics = replay(uniform(p, n, v, costs))
        assert metrics.makespan == pytest.approx(interleaved_makespan(p, n, v, f, b, w))
        assert metrics.peak_memory_per_device[0] == pytest.approx(interleaved_peak(p, n, v))
        if w == 0:  # Megatron's bubble, relative to the ideal time N(F+B)
            ideal = n * (f + b)
            assert (metrics.makespan - ideal) / ideal == pytest.approx(interleaved_bubble(p, n, v))
        if n % p == 0 and n >= 2 * p:  # Megatron's memory factor over 1F1B's P activations
            assert metrics.peak_memory == pytest.approx(p * interleaved_memory_factor(p, v))


def test_bubble_is_1f1b_bubble_divided_by_v() -> None:
    p, n = 4, 16
    flat = Problem.build(p, n, forward=1, backward=2)
    one_f_one_b = compute_metrics(simulate(flat, generate("1f1b", flat)))
    assert one_f_one_b.makespan == one_f_one_b_makespan(p, n, 1, 2) == 57
    for v in (2, 3, 4):
        _, metrics = replay(uniform(p, n, v, (1.0, 2.0, 0.0)))
        assert metrics.makespan - 3 * n == pytest.approx((one_f_one_b.makespan - 3 * n) / v)


def test_n_not_a_multiple_of_p_keeps_the_bubble_and_grows_the_first_group() -> None:
    # P = 4, N = 10: groups of 5 and 5 (Megatron would refuse); rank 0 warms up 2(P-1) + (v-1) 5 = 11 chunk-ops.
    _, metrics = replay(uniform(4, 10, 2, (1.0, 2.0, 0.0)))
    assert metrics.makespan == pytest.approx(30 + 3 * 3 / 2)
    assert metrics.peak_memory_per_device[0] == pytest.approx(12 / 2)
    assert interleaved_peak(4, 10, 2) == 6 > 4 * interleaved_memory_factor(4, 2)


def test_megatron_order_for_n_a_multiple_of_p() -> None:
    # P = 2, v = 2, N = 4, written from Megatron's rule: groups of P, warm-up 2(P-r-1) + (v-1)P chunk-ops,
    # forward k -> chunk (k // P) % v, backward chunks reversed.
    problem = uniform(2, 4, 2, (1.0, 2.0, 0.0))
    orders = [[op.label for op in order] for order in generate(NAME, problem).orders]
    assert orders[0] == [
        "F0@s0", "F1@s0", "F0@s2", "F1@s2",  # warm-up: 2 + 2
        "F2@s0", "B0@s2", "F3@s0", "B1@s2", "F2@s2", "B0@s0", "F3@s2", "B1@s0",  # 1F1B
        "B2@s2", "B3@s2", "B2@s0", "B3@s0",  # cool-down
    ]
    assert orders[1] == [
        "F0@s1", "F1@s1",
        "F0@s3", "B0@s3", "F1@s3", "B1@s3", "F2@s1", "B0@s1", "F3@s1", "B1@s1", "F2@s3", "B2@s3", "F3@s3", "B3@s3",
        "B2@s1", "B3@s1",
    ]


def test_split_backward_puts_each_w_after_its_b() -> None:
    schedule = generate(NAME, uniform(3, 7, 2, (1.0, 1.0, 1.0)))
    for order in schedule.orders:
        for i, op in enumerate(order):
            if op.kind.value == "B":
                nxt = order[i + 1]
                assert (nxt.kind.value, nxt.stage, nxt.microbatch) == ("W", op.stage, op.microbatch)


# Full trace worked out by hand: P = 2, v = 2, N = 3 (one group of 3), per-stage F = 1, B = 2, no comm.
# Rank 0 warms up min(2 + 3, 6) = 5 chunk-ops, rank 1 min(0 + 3, 6) = 3. Per device, (label, start, end).
TRACE = [
    [("F0@s0", 0, 1), ("F1@s0", 1, 2), ("F2@s0", 2, 3), ("F0@s2", 3, 4), ("F1@s2", 4, 5), ("F2@s2", 5, 6),
     ("B0@s2", 7, 9), ("B1@s2", 10, 12), ("B2@s2", 13, 15), ("B0@s0", 15, 17), ("B1@s0", 17, 19),
     ("B2@s0", 19, 21)],
    [("F0@s1", 1, 2), ("F1@s1", 2, 3), ("F2@s1", 3, 4), ("F0@s3", 4, 5), ("B0@s3", 5, 7), ("F1@s3", 7, 8),
     ("B1@s3", 8, 10), ("F2@s3", 10, 11), ("B2@s3", 11, 13), ("B0@s1", 13, 15), ("B1@s1", 15, 17),
     ("B2@s1", 17, 19)],
]


def test_full_trace_p2_v2_n3() -> None:
    problem = Problem.build(2, 3, forward=[1, 1, 1, 1], backward=[2, 2, 2, 2], num_chunks=2)
    timeline, metrics = replay(problem)
    trace: list[list[tuple[str, float, float]]] = [[], []]
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        trace[device].append((op.label, start, end))
    assert trace == TRACE
    assert metrics.makespan == interleaved_makespan(2, 3, 2, 2, 4) == 21


def test_every_small_case_is_deadlock_free_and_valid() -> None:
    # Deadlock depends only on the orders, so unit costs cover every cost; comm is checked by the properties.
    for p in range(1, 7):
        for v in (2, 3, 4):
            for n in range(1, 2 * p + 4):
                replay(uniform(p, n, v, (1.0, 1.0, 1.0)))


def test_budget_is_never_silently_exceeded() -> None:
    problem = uniform(4, 8, 2, (1.0, 2.0, 0.0), budget=4)
    _, metrics = replay(problem)
    assert not metrics.feasible and metrics.peak_memory == pytest.approx(5.5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_chunks": 1}, "num_chunks >= 2"),
        ({"num_chunks": 2, "placement": "v"}, "in loop placement"),
        ({"num_chunks": 2, "placement": "v", "backward_weight": 1.0}, "in loop placement"),
    ],
)
def test_not_applicable(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(NotApplicable, match=message):
        generate(NAME, Problem.build(3, 6, **fields))


# Property tests: random uneven stages (per device or per model stage), comm, split or not, budgets.

@st.composite
def uneven_problems(draw: st.DrawFn) -> Problem:
    p = draw(st.integers(min_value=1, max_value=5))
    v = draw(st.integers(min_value=2, max_value=3))
    n = draw(st.integers(min_value=1, max_value=12))
    size = draw(st.sampled_from([p, p * v]))  # per device (split over chunks) or per model stage
    split = draw(st.booleans())
    values = draw(uneven_stage_values(size, p))
    if not split:
        values.update(backward_weight=0.0, weight_activation=0.0)
    return Problem.build(p, n, num_chunks=v, **values)


@SETTINGS
@given(problem=uneven_problems())
def test_property_valid_and_within_budget_when_feasible(problem: Problem) -> None:
    _, metrics = replay(problem)  # assert_valid checks the budget whenever feasible is reported
    if problem.budget is None:
        assert metrics.feasible
    else:  # infeasible is reported exactly when some device goes over
        over = [peak > budget + 1e-9 for peak, budget in zip(metrics.peak_memory_per_device, problem.budget)]
        assert metrics.feasible == (not any(over))


@pytest.mark.parametrize(("num_chunks", "placement"), [(2, "loop"), (3, "loop"), (2, "v")])
@pytest.mark.parametrize("backward_weight", [0.5, 0.0])
def test_a_one_chunk_schedule_skipped_for_chunks_names_the_chunked_ones_that_apply(
        num_chunks: int, placement: str, backward_weight: float) -> None:
    """The reason 1F1B gives for not running on chunks lists exactly the chunked schedules that do run on that
    layout (or, when none does, every chunked schedule by placement)."""
    problem = Problem.build(4, 8, forward=1.0, backward=1.0, backward_weight=backward_weight, activation=1.0,
                            weight_activation=0.35 if backward_weight else 0.0, num_chunks=num_chunks,
                            placement=placement)
    applicable, skipped = generate_applicable(problem)
    chunked = [schedule.name for schedule in applicable if schedule.name in CHUNKED]
    reason = skipped["1f1b"]
    assert reason.startswith(f"1f1b runs one chunk per device (got num_chunks {num_chunks}); ")
    if chunked:
        verb = "applies" if len(chunked) == 1 else "apply"
        assert reason.endswith(f"with this layout, {', '.join(chunked)} {verb}")
    else:
        assert reason.endswith("with chunks, interleaved-1f1b, interleaved-zb (loop placement); zb-v, dualpipe-v, "
                               "v-half, v-min (V placement) apply")
