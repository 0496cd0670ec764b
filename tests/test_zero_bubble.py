"""ZB-H1 and ZB-H2: closed forms (pipeplan/formulas.py), invariants where the forms stop holding, a full trace
worked out by hand, and property tests with uneven stages, comm and budgets.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import replay_valid
from strategies import uneven_stage_values

from pipeplan import NotApplicable, Problem, generate
from pipeplan.formulas import zb_h1_peak, zb_h1_stage_span, zb_h2_peak, zb_h2_stage_span

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (F, B, W) per stage: equal, the Zero Bubble paper's ratio, and unequal ones (B != W != F).
COSTS = [(1.0, 1.0, 1.0), (1.0, 1.2, 0.6), (1.5, 2.0, 1.0), (2.0, 1.0, 0.5)]


def uniform(p: int, n: int, costs: tuple[float, float, float], comm: float = 0.0, **extra: Any) -> Problem:
    f, b, w = costs
    return Problem.build(p, n, forward=f, backward=b, backward_weight=w, comm=comm, weight_activation=0.5, **extra)


# Closed forms. They hold in the paper's regime, W <= min(F, B) and 2C <= W, for N > P (ZB-H1) and N >= 2P - 1
# (ZB-H2): a little wider than the N >= 2P usually quoted. The grid covers both edges and a larger N.


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("comm_share", [0.0, 0.25, 0.5])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_zb_h1_stage_span_and_peak_match_closed_form(costs: tuple[float, float, float], comm_share: float,
                                                     p: int) -> None:
    comm = comm_share * costs[2]  # up to W / 2
    for n in (p + 1, 2 * p, 3 * p + 1):
        _, metrics = replay_valid(uniform(p, n, costs, comm), "zb-h1")
        assert metrics.stage_span == pytest.approx(zb_h1_stage_span(p, n, *costs, comm=comm))
        assert metrics.peak_memory_per_device[0] == pytest.approx(zb_h1_peak(p, n))
        assert metrics.peak_memory == pytest.approx(p)


@pytest.mark.parametrize("costs", COSTS)
@pytest.mark.parametrize("comm_share", [0.0, 0.25, 0.5])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_zb_h2_stage_span_and_peak_match_closed_form(costs: tuple[float, float, float], comm_share: float,
                                                     p: int) -> None:
    comm = comm_share * costs[2]
    for n in (2 * p - 1, 2 * p, 3 * p + 1):
        _, metrics = replay_valid(uniform(p, n, costs, comm), "zb-h2")
        assert metrics.stage_span == pytest.approx(zb_h2_stage_span(p, n, *costs, comm=comm))
        assert metrics.peak_memory_per_device[0] == pytest.approx(zb_h2_peak(p, n))
        assert metrics.peak_memory == pytest.approx(2 * p - 1)


def test_closed_forms_give_the_published_figures() -> None:
    # ZB-H1 at P=8, N=64, F=B=W=1: 199, the best value known for that case with a budget of P activations.
    assert zb_h1_stage_span(8, 64, 1, 1, 1) == 199
    assert zb_h2_stage_span(4, 16, 1, 1, 1) == 48
    assert zb_h1_stage_span(4, 16, 1, 1.2, 0.6, comm=0.1) == pytest.approx(16 * 2.8 + 3 * 2.0)
    assert zb_h2_stage_span(4, 16, 1, 1.2, 0.6, comm=0.1) == pytest.approx(16 * 2.8 + 3 * 1.2)


def test_zero_bubble_beats_1f1b_at_the_same_peak() -> None:
    problem = uniform(4, 16, (1.0, 1.0, 1.0))
    _, one_f_one_b = replay_valid(problem, "1f1b")
    _, h1 = replay_valid(problem, "zb-h1")
    _, h2 = replay_valid(problem, "zb-h2")
    assert h1.peak_memory == one_f_one_b.peak_memory == 4
    assert h1.stage_span < one_f_one_b.stage_span
    assert h2.stage_span == 48  # N(F+B+W): no bubble at all
    # The Zero Bubble cost is the stage span; the makespan keeps the fill and drain (ZB-H2's equals ZB-H1's here).
    assert h2.makespan == h1.makespan < one_f_one_b.makespan


# Where the closed forms stop holding (N small, W above F or B, comm above W / 2) the replay is the truth: it
# must still respect every invariant, and the peak bounds still hold.


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2"])
@pytest.mark.parametrize("costs", [*COSTS, (1.0, 1.0, 2.0)])
@pytest.mark.parametrize("comm", [0.0, 0.4, 1.0])
def test_small_n_and_outside_the_regime_respect_every_invariant(name: str, costs: tuple[float, float, float],
                                                                 comm: float) -> None:
    for p in (1, 2, 3, 5):
        for n in range(1, 2 * p + 1):
            _, metrics = replay_valid(uniform(p, n, costs, comm), name)
            bound = zb_h1_peak(p, n) if name == "zb-h1" else zb_h2_peak(p, n)
            assert metrics.peak_memory <= bound + 1e-9


def test_formula_does_not_hold_for_n_below_p() -> None:
    # N < P: rank 0 runs out of forwards before the first backward comes back, and waits.
    _, metrics = replay_valid(uniform(3, 2, (1.0, 1.0, 1.0)), "zb-h1")
    assert metrics.stage_span == 9 > zb_h1_stage_span(3, 2, 1, 1, 1)


# Full traces, worked out by hand: P = 2, N = 3, F = 1, B = 2, W = 1, no comm. Per device in run order,
# (kind, microbatch, start, end).

ZB_H1_TRACE = [
    # rank 0: 1 warm-up F; step i: F, B_i, W (i >= 0); step 2 has no F left.
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 4, 6), ("W", 0, 6, 7), ("F", 2, 7, 8), ("B", 1, 8, 10),
     ("W", 1, 10, 11), ("B", 2, 11, 13), ("W", 2, 13, 14)],
    # rank 1: no warm-up; W held back one step, the last W after the last B.
    [("F", 0, 1, 2), ("B", 0, 2, 4), ("F", 1, 4, 5), ("B", 1, 5, 7), ("W", 0, 7, 8), ("F", 2, 8, 9),
     ("B", 2, 9, 11), ("W", 1, 11, 12), ("W", 2, 12, 13)],
]

ZB_H2_TRACE = [
    # rank 0: 2 warm-up Fs, then F2 B0 W0, B1 W1, B2 W2.
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("B", 0, 4, 6), ("W", 0, 6, 7), ("B", 1, 7, 9),
     ("W", 1, 9, 10), ("B", 2, 10, 12), ("W", 2, 12, 13)],
    # rank 1: W held back two steps.
    [("F", 0, 1, 2), ("B", 0, 2, 4), ("F", 1, 4, 5), ("B", 1, 5, 7), ("F", 2, 7, 8), ("B", 2, 8, 10),
     ("W", 0, 10, 11), ("W", 1, 11, 12), ("W", 2, 12, 13)],
]


@pytest.mark.parametrize(("name", "expected"), [("zb-h1", ZB_H1_TRACE), ("zb-h2", ZB_H2_TRACE)])
def test_full_trace_p2_n3(name: str, expected: list[list[tuple[str, int, float, float]]]) -> None:
    problem = Problem.build(2, 3, forward=1, backward=2, backward_weight=1)
    timeline, _ = replay_valid(problem, name)
    trace: list[list[tuple[str, int, float, float]]] = [[], []]
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        trace[device].append((op.kind.value, op.microbatch, start, end))
    assert trace == expected


def test_budget_is_never_silently_exceeded() -> None:
    # ZB-H2 needs 2P - 1 = 7 activations on device 0; with a budget of 4 it must be reported infeasible.
    problem = uniform(4, 12, (1.0, 1.0, 1.0), budget=4)
    _, h2 = replay_valid(problem, "zb-h2")
    assert not h2.feasible and h2.peak_memory == 7
    _, h1 = replay_valid(problem, "zb-h1")
    assert h1.feasible and h1.peak_memory == 4


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2"])
def test_not_applicable_without_split_backward_or_with_chunks(name: str) -> None:
    with pytest.raises(NotApplicable, match="split backward"):
        generate(name, Problem.build(3, 6, forward=1, backward=2))
    with pytest.raises(NotApplicable, match="one chunk per device"):
        generate(name, Problem.build(3, 6, backward_weight=1, num_chunks=2))
    with pytest.raises(NotApplicable, match="one chunk per device"):
        generate(name, Problem.build(3, 6, backward_weight=1, num_chunks=2, placement="v"))


# Property tests: random uneven stages (lists, or the embedding / LM-head shape), random comm and budgets.

@st.composite
def uneven_problems(draw: st.DrawFn) -> Problem:
    p = draw(st.integers(min_value=1, max_value=6))
    n = draw(st.integers(min_value=1, max_value=14))
    return Problem.build(p, n, **draw(uneven_stage_values(p, p)))


@SETTINGS
@given(problem=uneven_problems(), name=st.sampled_from(["zb-h1", "zb-h2"]))
def test_property_valid_and_within_budget_when_feasible(problem: Problem, name: str) -> None:
    _, metrics = replay_valid(problem, name)  # assert_valid checks the budget whenever feasible is reported
    if problem.budget is None:
        assert metrics.feasible
    else:  # infeasible is reported exactly when some device goes over
        over = [peak > budget + 1e-9 for peak, budget in zip(metrics.peak_memory_per_device, problem.budget)]
        assert metrics.feasible == (not any(over))
    # The peak never exceeds the construction's bound: P (ZB-H1) or 2P - 1 (ZB-H2) of the device's activation.
    p, n = problem.num_devices, problem.num_microbatches
    bound = zb_h1_peak(p, n) if name == "zb-h1" else zb_h2_peak(p, n)
    for device, peak in enumerate(metrics.peak_memory_per_device):
        assert peak <= bound * problem.activation[device] + 1e-9


@SETTINGS
@given(p=st.integers(1, 5), n=st.integers(1, 10), chunks=st.sampled_from([(1, "loop", True), (1, "loop", False),
                                                                      (2, "loop", True), (3, "loop", True),
                                                                      (2, "v", True)]))
def test_property_not_applicable_exactly_when_expected(p: int, n: int, chunks: tuple[int, str, bool]) -> None:
    num_chunks, placement, split = chunks
    problem = Problem.build(p, n, backward_weight=1 if split else 0, num_chunks=num_chunks, placement=placement)
    for name in ("zb-h1", "zb-h2"):
        if num_chunks == 1 and split:
            replay_valid(problem, name)
        else:
            with pytest.raises(NotApplicable):
                generate(name, problem)
