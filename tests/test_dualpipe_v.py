"""DualPipeV (torch's ScheduleDualPipeV): an order worked out by hand from the rule, its memory, how it compares
with ZB-V, small N, and property tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import replay_valid
from strategies import uneven_stage_values

from pipeplan import Metrics, NotApplicable, Op, OpKind, Problem, Timeline, generate

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAME = "dualpipe-v"


def replay(problem: Problem, name: str = NAME) -> tuple[Timeline, Metrics]:
    """Generate, replay and check every invariant; return the timeline and metrics."""
    return replay_valid(problem, name)


def v_problem(p: int, n: int, costs: tuple[float, float, float] = (1.0, 1.0, 1.0), **extra: Any) -> Problem:
    """F, B, W are a device's totals, split evenly over its two chunks."""
    f, b, w = costs
    return Problem.build(p, n, forward=f, backward=b, backward_weight=w, num_chunks=2, placement="v", **extra)


def test_order_worked_out_by_hand_p2_n4() -> None:
    # Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. A full backward is its B with the W right after.
    orders = [[op.label for op in order] for order in generate(NAME, v_problem(2, 4)).orders]
    assert orders[0] == [
        "F0@s0", "F1@s0",                                # 1. 2(P-r-1) F0
        "F2@s0", "F0@s3",                                # 2. r+1 (F0, F1)
        "B0@s3", "W0@s3", "F1@s3",                       # 3. input-only B1, the owed W, F1
        "F3@s0", "B1@s3", "W1@s3", "F2@s3", "B0@s0", "W0@s0",  # 4. N-2P+r+1 (F0, full B1, F1, full B0)
        "B2@s3", "W2@s3", "F3@s3", "B1@s0", "W1@s0",     # 5. P-r-1 (full B1, F1, full B0)
        "B3@s3", "W3@s3", "B2@s0",                       # 6. middle step 0 on an even rank: only B0 input-only
        "W2@s0", "B3@s0",                                # 7. W, input-only B0
        "W3@s0",                                         # 8. r+1 W
    ]
    assert orders[1] == [
        "F0@s1", "F0@s2", "F1@s1", "F1@s2",              # 2. r+1 (F0, F1)
        "F2@s1", "B0@s2", "W0@s2", "F2@s2", "B0@s1", "W0@s1",  # 4. (the last rank does not overlap step 0)
        "F3@s1", "B1@s2", "W1@s2", "F3@s2", "B1@s1", "W1@s1",
        "B2@s2", "W2@s2", "B2@s1", "W2@s1",              # 6. full before the middle (step 1) ...
        "B3@s2", "B3@s1",                                # ... input-only from it on an odd rank
        "W3@s2", "W3@s1",                                # 8. r+1 W
    ]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 6, 8])
def test_same_step_time_as_zb_v_at_half_an_activation_more(p: int) -> None:
    # F = B = W per device and no weight share: both pay only (P-1)F/2 of fill; DualPipeV holds 2P + 1
    # chunk-activations on every rank, ZB-V 2P.
    for n in (2 * p, 3 * p, 4 * p + 1):
        _, dual = replay(v_problem(p, n))
        _, zbv = replay(v_problem(p, n), "zb-v")
        assert dual.makespan == pytest.approx(3 * n + (p - 1) / 2) == zbv.makespan
        assert dual.peak_memory_per_device == pytest.approx([(2 * p + 1) / 2] * p)
        assert zbv.peak_memory_per_device == pytest.approx([p] * p)


def test_rank_0_never_defers_a_w_and_the_last_rank_defers_its_cool_down() -> None:
    # Rank 0 runs each owed W right after its input-only B; rank P - 1 (odd, middle step 2 of 4) runs its last
    # two (B1, B0) pairs input-only and their four Ws at the end, filling the drain.
    orders = generate(NAME, v_problem(4, 16)).orders

    def deferred(order: tuple[Op, ...]) -> list[str]:
        return [a.label for a, b in zip(order, (*order[1:], None))
                if a.kind is OpKind.B and (b is None or (b.kind, b.stage, b.microbatch) != (OpKind.W, a.stage,
                                                                                          a.microbatch))]

    assert deferred(orders[0]) == []
    assert deferred(orders[3]) == ["B14@s4", "B14@s3", "B15@s4", "B15@s3"]
    assert [op.label for op in orders[3][-4:]] == ["W14@s4", "W14@s3", "W15@s4", "W15@s3"]


def test_small_n_drops_padding_microbatches() -> None:
    # Torch refuses N < 2P; here the order is planned for 2P microbatches and the extra ones dropped.
    for p in range(1, 7):
        for n in range(1, 2 * p + 3):
            _, metrics = replay(v_problem(p, n, weight_activation=0.5))
            assert metrics.peak_memory <= (2 * p + 1) / 2 + 1e-9


def test_budget_is_never_silently_exceeded() -> None:
    _, metrics = replay(v_problem(4, 8, budget=4))
    assert not metrics.feasible and metrics.peak_memory == pytest.approx(4.5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_chunks": 1, "backward_weight": 1.0}, "set pipeline.num_chunks: 2, pipeline.placement: v"),
        ({"num_chunks": 2, "backward_weight": 1.0}, "set pipeline.placement: v"),
        ({"num_chunks": 2, "placement": "v"}, "set costs.backward_weight > 0"),
    ],
)
def test_not_applicable(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(NotApplicable, match=message):
        generate(NAME, Problem.build(3, 6, **fields))


@st.composite
def uneven_problems(draw: st.DrawFn) -> Problem:
    p = draw(st.integers(min_value=1, max_value=5))
    n = draw(st.integers(min_value=1, max_value=14))
    size = draw(st.sampled_from([p, 2 * p]))  # per device (split over chunks) or per model stage
    return Problem.build(p, n, num_chunks=2, placement="v", **draw(uneven_stage_values(size, p)))


@SETTINGS
@given(problem=uneven_problems())
def test_property_valid_and_feasible_exactly_when_within_budget(problem: Problem) -> None:
    _, metrics = replay(problem)
    if problem.budget is None:
        assert metrics.feasible
    else:
        over = [peak > budget + 1e-9 for peak, budget in zip(metrics.peak_memory_per_device, problem.budget)]
        assert metrics.feasible == (not any(over))
