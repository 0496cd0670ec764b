"""V-Half and V-Min (Pipeline Parallelism with Controllable Memory): a full trace worked out by hand, the peak
memory the paper claims, the unit-cost figures, and invariants on random uneven problems."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_valid, peak_memory, replay_valid
from strategies import uneven_stage_values

from pipeplan import NotApplicable, Problem, compute_metrics, generate, simulate
from pipeplan.schedule import Schedule, check_complete
from pipeplan.schedules.controllable import (
    PERIOD,
    SlotTaken,
    _Grid,
    fitted,
    hole_starts,
    v_half_block,
    v_min_block,
)
from pipeplan.solver import warm_starts

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("v-half", "v-min")


def unit_problem(p: int, n: int, weight_share: float = 0.5) -> Problem:
    """F = B = W = 1 and activation 1 per chunk (so 1F1B's peak is 2P chunk-activations), no comm."""
    ones = [1.0] * (2 * p)
    return Problem.build(p, n, forward=ones, backward=ones, backward_weight=ones, activation=ones,
                         weight_activation=[weight_share] * (2 * p), num_chunks=2, placement="v")


def labels(order: tuple[object, ...]) -> str:
    return " ".join(f"{op.kind.value}{op.chunk}m{op.microbatch}" for op in order)  # type: ignore[attr-defined]


@pytest.mark.parametrize("block", [v_min_block, v_half_block])
@pytest.mark.parametrize("p", range(1, 41))
def test_block_offsets_never_share_a_slot_and_follow_the_v(block: object, p: int) -> None:
    for r in range(p):
        f0, f1, b1, b0 = block(p, r)  # type: ignore[operator]
        assert len({f0 % PERIOD, f1 % PERIOD, b1 % PERIOD, b0 % PERIOD}) == 4
        if r + 1 < p:  # chunk 0 forwards and chunk 1 backwards go down the devices, the others come back up
            nxt = block(p, r + 1)  # type: ignore[operator]
            assert nxt[0] > f0 and nxt[2] > b1 and nxt[1] < f1 and nxt[3] < b0
    f0, f1, b1, b0 = block(p, p - 1)  # type: ignore[operator]
    assert f1 > f0 and b0 > b1  # the turns at the bottom of the V
    assert block(p, 0)[2] > block(p, 0)[1]  # type: ignore[operator]  # the loss on device 0


def test_v_min_trace_p2_n2_by_hand() -> None:
    # Blocks (F0, F1, B1, B0): rank 0 at 0, 3, 4, 7 and rank 1 at 1, 2, 5, 6, plus 6 per microbatch. Rank 0's
    # free slots 1, 2 come before any B, so its Ws go to 5, 8, 11, 14; rank 1's to 9, 10, 13, 14. The squeeze
    # cannot move anything: F0m1 on rank 0 would fit in slot 1 or 2 only by raising its peak of 2 to 3, and every
    # other op already sits one slot after its input. 15 slots, so a makespan of 15 with unit costs.
    problem = unit_problem(2, 2)
    timeline, metrics = replay_valid(problem, "v-min")
    orders = generate("v-min", problem).orders
    assert labels(orders[0]) == "F0m0 F1m0 B1m0 W1m0 F0m1 B0m0 W0m0 F1m1 B1m1 W1m1 B0m1 W0m1"
    assert labels(orders[1]) == "F0m0 F1m0 B1m0 B0m0 F0m1 F1m1 W1m0 W0m0 B1m1 B0m1 W1m1 W0m1"
    assert metrics.makespan == 15
    assert metrics.peak_memory_per_device == [2.0, 3.0]


@pytest.mark.parametrize("p", [4, 6, 8, 12, 16, 32])
def test_peak_memory_is_a_half_and_a_third_of_1f1b(p: int) -> None:
    # The paper: V-Half holds about half of 1F1B's activation memory (P device-activations, 2P of one chunk),
    # V-Min about a third. Measured on this construction: V-Half exactly P/2 + 1 device-activations, V-Min at
    # most P/3 + 1, with the weight share 0.5 of each activation kept until W.
    n = 4 * p
    _, half = replay_valid(unit_problem(p, n), "v-half")
    _, low = replay_valid(unit_problem(p, n), "v-min")
    _, zbv = replay_valid(unit_problem(p, n), "zb-v")
    assert zbv.peak_memory == 2 * p
    assert half.peak_memory == 2 * (p / 2 + 1)
    assert low.peak_memory <= 2 * (p / 3 + 1)
    assert low.peak_memory < half.peak_memory < zbv.peak_memory


def test_unit_costs_p8_n16() -> None:
    # Makespans reported for the authors' implementation in this case: V-Min 123, V-Half 113. This V-Min
    # matches; this V-Half's single squeeze reaches 119 (see the module docstring for what differs).
    problem = unit_problem(8, 16)
    assert replay_valid(problem, "v-min")[1].makespan == 123
    assert replay_valid(problem, "v-half")[1].makespan == 119


@pytest.mark.parametrize("name", NAMES)
def test_needs_v_placement_and_a_split_backward(name: str) -> None:
    loop = Problem.build(4, 8, backward_weight=1.0, num_chunks=2)
    unsplit = Problem.build(4, 8, num_chunks=2, placement="v")
    for problem in (loop, unsplit):
        with pytest.raises(NotApplicable, match=name):
            generate(name, problem)


@SETTINGS
@given(data=st.data(), p=st.integers(1, 6), n=st.integers(1, 14), name=st.sampled_from(NAMES))
def test_valid_on_random_uneven_problems(data: st.DataObject, p: int, n: int, name: str) -> None:
    values = data.draw(uneven_stage_values(2 * p, p))
    problem = Problem.build(p, n, num_chunks=2, placement="v", **values)
    _, metrics = replay_valid(problem, name)
    # Each device's peak is what the building block gave it, never more than holding every microbatch.
    for d in range(p):
        assert metrics.peak_memory_per_device[d] <= n * problem.footprint(d) + 1e-9


def test_hole_starts_leave_a_hole_of_its_size_after_every_k_microbatches() -> None:
    assert hole_starts(5, None) == [0, 6, 12, 18, 24]
    assert hole_starts(7, 3) == [0, 6, 12, 24, 30, 36, 48]  # a whole block position empty after every 3
    assert hole_starts(4, 1) == [0, 12, 24, 36]
    assert hole_starts(7, 3, 2) == [0, 6, 12, 20, 26, 32, 40]


def test_fitted_schedules_fit_a_budget_below_v_mins_peak() -> None:
    """P = 4, N = 16, unit costs: V-Min peaks at 4 chunk-activations, so at a budget of 3.5 it does not fit;
    the fitted V-Min leaves holes between its blocks until its grid fits, and is slower for it."""
    problem = unit_problem(4, 16)
    v_min = compute_metrics(simulate(problem, generate("v-min", problem)))
    assert max(v_min.peak_memory_per_device) == pytest.approx(4.0)
    tight = problem.with_budget(3.5)
    schedules = fitted(tight)
    assert [s.name for s in schedules][:1] == ["v-min-fitted"]
    for schedule in schedules:
        metrics = compute_metrics(simulate(tight, schedule))
        assert metrics.feasible and max(metrics.peak_memory_per_device) <= 3.5 + 1e-9
    first = compute_metrics(simulate(tight, schedules[0]))
    assert first.makespan > v_min.makespan
    # Still better than what fits any budget, one microbatch at a time (182 against 288 here).
    one_at_a_time = [c for c in warm_starts(tight, "makespan") if c.schedule.name == "gpipe-1"]
    assert len(one_at_a_time) == 1 and first.makespan < one_at_a_time[0].objective
    assert fitted(problem) == []  # no budget
    assert fitted(problem.with_budget(4.0)) == []  # V-Min itself fits
    loop = Problem.build(4, 16, num_chunks=2, placement="loop", budget=3.5)
    assert fitted(loop) == []


def test_fitted_v_min_leaves_smaller_holes_than_a_block_where_they_fit() -> None:
    """The split-backward family (F : B : W = 1 : 1 : 0.5, comm 0.03, weight activation 0.35) at P = 8, N = 16,
    3 activations a device: V-Min peaks at 3.35. A whole empty block position after every k microbatches fits up
    to k = 3 at best (78.97); a hole of 2 slots after every 3 fits too, and the fitted V-Min takes it: 69.05,
    faster than every whole-position fit."""
    problem = Problem.build(8, 16, backward=1.0, backward_weight=0.5, comm=0.03, weight_activation=0.35,
                            budget=3.0).with_layout(2, "v")
    budget = list(problem.budget or ())
    whole = []
    for k in range(1, 16):
        grid = _Grid(problem, v_min_block, hole_starts(16, k), budget)
        if all(peak <= room + 1e-9 for peak, room in zip(grid.peak, budget)):
            grid.squeeze()
            whole.append(compute_metrics(simulate(problem, Schedule.from_lists("whole", grid.orders()))).makespan)
    assert len(whole) == 3 and min(whole) == pytest.approx(78.97)
    first = fitted(problem)[0]
    assert first.name == "v-min-fitted"
    metrics = compute_metrics(simulate(problem, first))
    assert metrics.feasible and max(metrics.peak_memory_per_device) <= 3.0 + 1e-9
    assert metrics.makespan == pytest.approx(69.05)


def test_the_squeeze_fills_a_device_up_to_a_limit_above_its_blocks_peak_and_no_further() -> None:
    """P = 4, N = 16, unit costs: V-Min's block peaks at 4, 4, 3.5 and 4. Squeezed with a limit of 5 every
    device fills up to 5; with a limit of 3, below the block's peaks, each keeps its own."""
    problem = unit_problem(4, 16)
    for limit, after in ((5.0, [5.0] * 4), (3.0, [4.0, 4.0, 3.5, 4.0])):
        grid = _Grid(problem, v_min_block, None, [limit] * 4)
        assert grid.peak == [4.0, 4.0, 3.5, 4.0]
        grid.squeeze()
        assert [max(live) for live in grid.live] == after
        timeline = simulate(problem, Schedule.from_lists("squeezed", grid.orders()))
        assert compute_metrics(timeline).peak_memory_per_device == pytest.approx(after)
    with pytest.raises(ValueError, match="rising slots"):
        _Grid(problem, v_min_block, [0, 12, 6, *range(18, 6 * 16, 6)])
    with pytest.raises(SlotTaken, match="taken twice"):
        _Grid(problem, v_min_block, range(16))  # blocks 1 slot apart: rank 0's F of chunk 1 (offset 7) meets
        # microbatch 7's F of chunk 0


def test_the_solver_gets_the_fitted_schedules_as_warm_starts() -> None:
    tight = unit_problem(4, 16).with_budget(3.5)
    names = {c.schedule.name for c in warm_starts(tight, "makespan")}
    assert "v-min-fitted" in names and "v-min" not in names  # V-Min itself does not fit
    unsplit = Problem.build(4, 16, num_chunks=2, placement="v", budget=3.5)
    assert fitted(unsplit) == []


@SETTINGS
@given(data=st.data(), p=st.integers(3, 6), n=st.integers(4, 14))
def test_fitted_schedules_are_valid_and_within_budget_on_random_uneven_problems(data: st.DataObject, p: int,
                                                                                n: int) -> None:
    """Unequal costs, activations and weight shares, a budget per device drawn around V-Min's own peak there
    (from a half of it up, never below one microbatch's footprint): every fitted schedule is complete, valid and
    within the budget by the tests' own memory count; there are none where V-Min itself fits. (At least 3 devices
    and 4 microbatches: with fewer, V-Min holds so few microbatches that no holes fit below its peak.)"""
    values = data.draw(uneven_stage_values(2 * p, p))
    problem = Problem.build(p, n, num_chunks=2, placement="v", **values)
    peaks = compute_metrics(simulate(problem, generate("v-min", problem))).peak_memory_per_device
    factors = data.draw(st.lists(st.sampled_from([0.5, 0.7, 0.8, 0.9, 1.0]), min_size=p, max_size=p))
    problem = problem.with_budget([max(problem.footprint(d), peaks[d] * f) for d, f in enumerate(factors)])
    assert problem.budget is not None
    schedules = fitted(problem)
    for schedule in schedules:
        check_complete(problem, schedule)
        timeline = simulate(problem, schedule)
        assert_valid(problem, timeline)
        assert all(peak <= room + 1e-9 for peak, room in zip(peak_memory(problem, timeline), problem.budget))
    if all(peak <= room + 1e-9 for peak, room in zip(peaks, problem.budget)):
        assert schedules == []  # V-Min itself fits
