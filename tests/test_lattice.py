"""The lattice warm start: microbatches started on a grid of cells, each crossing the pipeline without waiting."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_valid, peak_memory
from strategies import binding_problems

from pipeplan import compute_metrics, lattice, simulate, solver
from pipeplan.lattice import (
    cell,
    fits,
    greedy_lattice,
    greedy_schedule,
    lattice_schedule,
    least_rate,
    patterns,
    search,
    start_cells,
)
from pipeplan.periodic import least_period
from pipeplan.problem import OpKind, Problem
from pipeplan.schedule import check_complete
from pipeplan.solver import warm_starts


def one_chunk(p: int, n: int, budget: float | None, forward: float = 1.0, backward: float = 2.0,
              weight: float = 1.0, comm: float = 0.5) -> Problem:
    return Problem.build(num_stages=p, num_microbatches=n, forward=forward, backward=backward,
                         backward_weight=weight, comm=comm, activation=1.0, weight_activation=0.25, budget=budget)


def test_patterns_are_the_words_that_start_a_microbatch_and_do_not_repeat_a_shorter_one() -> None:
    assert sorted(patterns(3)) == [(1,), (1, 0), (1, 0, 0), (1, 0, 1), (1, 1, 0)]
    assert (1, 0, 1, 0) not in set(patterns(4)) and (1, 1, 0, 1) in set(patterns(4))
    assert start_cells((1, 1, 0, 0, 0), 5) == [0, 1, 5, 6, 10]
    assert start_cells((1,), 3) == [0, 1, 2]


def test_two_stages_every_other_cell_hand_traced() -> None:
    """P = 2, F = 1, B = 2, W = 1, link 0.5: the cell is 1 + 2 + 2 x 0.5 = 4. Microbatches in cells 0 and 2
    start at 0 and 8. Microbatch 0: F(0) [0, 1), F(1) [1.5, 2.5), B(1) [2.5, 4.5), B(0) [5, 7); W(1) [4.5, 5.5)
    and W(0) [7, 8), just before F(0) of microbatch 1, which repeats it 8 later: makespan 16, one microbatch
    live at a time on device 0."""
    problem = one_chunk(2, 2, 1.0)
    assert cell(problem) == pytest.approx(4.0)
    schedule = lattice_schedule(problem, start_cells((1, 0), 2), 4.0)
    labels = [[op.label for op in order] for order in schedule.orders]
    assert labels[0] == ["F0@s0", "B0@s0", "W0@s0", "F1@s0", "B1@s0", "W1@s0"]
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert metrics.makespan == pytest.approx(16.0)
    assert metrics.peak_memory_per_device == [1.0, 1.0] and metrics.feasible and fits(problem, schedule)
    assert timeline.start_of(problem.op(OpKind.W, 0, 0)) == pytest.approx(7.0)
    assert timeline.start_of(problem.op(OpKind.F, 0, 1)) == pytest.approx(8.0)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 6), n=st.integers(1, 10), words=st.lists(st.booleans(), min_size=1, max_size=6),
       forward=st.sampled_from([0.5, 1.0, 1.5]), backward=st.sampled_from([0.5, 1.0, 2.0]),
       comm=st.sampled_from([0.0, 0.125, 0.5]))
def test_with_one_chunk_and_equal_stages_forwards_and_backwards_never_collide(
        p: int, n: int, words: list[bool], forward: float, backward: float, comm: float) -> None:
    """The module's claim: one chunk, equal stage costs, any set of cells: at their no-wait times each device's
    forwards and backwards fall in disjoint parts of the cells, and the replay runs none of them later."""
    problem = one_chunk(p, n, None, forward, backward, 0.5, comm)
    cells = start_cells((1, *(int(w) for w in words)), n)
    width = cell(problem)
    timeline = simulate(problem, lattice_schedule(problem, cells, width))
    trip = p * forward + (p - 1) * comm
    for s in range(p):
        spans = []
        for m, c in enumerate(cells):
            ahead = c * width + s * (forward + comm)
            back = c * width + trip + (p - 1 - s) * (backward + comm)
            spans += [(ahead, ahead + forward), (back, back + backward)]
            assert timeline.start_of(problem.op(OpKind.F, s, m)) <= ahead + 1e-9
            assert timeline.start_of(problem.op(OpKind.B, s, m)) <= back + 1e-9
        spans.sort()
        assert all(later[0] >= earlier[1] - 1e-9 for earlier, later in zip(spans, spans[1:]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=binding_problems(), words=st.lists(st.booleans(), min_size=0, max_size=7),
       multiple=st.sampled_from([0.5, 1.0, 2.0]))
def test_every_lattice_order_is_a_complete_valid_schedule_and_fits_agrees_with_the_replay(
        problem: Problem, words: list[bool], multiple: float) -> None:
    """Any pattern and cell width, unequal costs, 1 or 2 chunks: the orders are complete, the replay never
    deadlocks and respects every rule, and the quick budget check says what the replay measures."""
    schedule = lattice_schedule(problem, start_cells((1, *(int(w) for w in words)), problem.num_microbatches),
                                multiple * cell(problem))
    check_complete(problem, schedule)
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert fits(problem, schedule) == metrics.feasible


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binding_problems())
def test_the_search_returns_a_valid_schedule_within_budget(problem: Problem) -> None:
    """Checked by the test's own rules (dependencies, one op at a time, live memory) on the replay."""
    found = search(problem)
    if found is None:
        return
    schedule, _ = found
    check_complete(problem, schedule)
    timeline = simulate(problem, schedule)
    assert_valid(problem, timeline)
    assert problem.budget is not None
    assert all(peak <= room + 1e-9 for peak, room in zip(peak_memory(problem, timeline), problem.budget))


def test_greedy_three_stages_hand_traced() -> None:
    """P = 3, N = 4, F = 1, B = 2, W = 1, link 0.5, budget 2: the cell is 4. On device 0 a microbatch starting at
    t holds its activation from F [t, t + 1) to B [t + 9, t + 11). Microbatches 0 and 1 take cells 0 and 1; in
    cell 2 (t = 8) microbatch 2 would make three live on device 0 (0's B ends at 11), so it takes cell 3: at 12
    microbatch 0's B and its W [11, 12) have ended. Microbatch 3 fits in cell 4 (1's B [13, 15) and W [15, 16)
    are done by 16). Device 0 then runs F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3, the last W [27, 28)."""
    problem = one_chunk(3, 4, 2.0)
    for strict in (True, False):
        schedule = greedy_schedule(problem, cell(problem), strict)
        assert schedule is not None
        assert [op.label for op in schedule.orders[0]] == [
            "F0@s0", "F1@s0", "B0@s0", "W0@s0", "F2@s0", "B1@s0", "W1@s0", "F3@s0", "B2@s0", "W2@s0", "B3@s0",
            "W3@s0"]
        metrics = compute_metrics(simulate(problem, schedule))
        assert metrics.makespan == pytest.approx(28.0) and metrics.peak_memory_per_device[0] == 2.0


def test_greedy_moves_a_w_that_a_later_microbatch_meets_hand_traced() -> None:
    """P = 2, N = 2, F = 1, B = 2, W = 1.5, link 0.5, cell 4. Microbatch 0 puts W(1, 0) at [4.5, 6), just after
    its B on device 1. Microbatch 1 in cell 1 runs F(1, 1) at [5.5, 6.5), so W(1, 0) moves to the next gap long
    enough, after B(1, 1) [6.5, 8.5): device 1 then holds W(1, 0)'s weight share (0.25) when F(1, 1) starts,
    1.25 in all. With 1.25 on device 1 that fits; with 1.2 microbatch 1 waits for cell 2, where W(1, 0) stays
    in place and W(0, 0) moves after F(0, 1) [8, 9) instead (device 0 has room for it)."""
    def problem(room: float) -> Problem:
        return Problem.build(num_stages=2, num_microbatches=2, forward=1.0, backward=2.0, backward_weight=1.5,
                             comm=0.5, activation=1.0, weight_activation=0.25, budget=[2.0, room])

    for strict in (True, False):
        moved = greedy_schedule(problem(1.25), 4.0, strict)
        assert moved is not None
        assert [op.label for op in moved.orders[1]] == ["F0@s1", "B0@s1", "F1@s1", "B1@s1", "W0@s1", "W1@s1"]
        assert fits(problem(1.25), moved) and not fits(problem(1.2), moved)
        assert compute_metrics(simulate(problem(1.25), moved)).peak_memory_per_device == [2.0, 1.25]
        waited = greedy_schedule(problem(1.2), 4.0, strict)
        assert waited is not None
        assert [op.label for op in waited.orders[0]] == ["F0@s0", "B0@s0", "F1@s0", "W0@s0", "B1@s0", "W1@s0"]
        assert [op.label for op in waited.orders[1]] == ["F0@s1", "B0@s1", "W0@s1", "F1@s1", "B1@s1", "W1@s1"]


def test_greedy_cap_hand_traced() -> None:
    """The case above: without a cap at most two microbatches are in flight (from its start to the no-wait end
    of its B on stage 0, 11 after it). With a cap of one each waits for the previous one's B(0) to end: cells 0,
    3, 6 and 9, and the last W ends at 36 + 12 = 48."""
    problem = one_chunk(3, 4, 2.0)
    found = greedy_lattice(problem, cell(problem))
    assert found is not None and found[1] == 2
    capped = greedy_lattice(problem, cell(problem), cap=1)
    assert capped is not None and capped[1] == 1
    timeline = simulate(problem, capped[0])
    assert compute_metrics(timeline).makespan == pytest.approx(48.0)
    labels = [op.label for op in capped[0].orders[0]]
    assert labels == [f"{kind}{m}@s0" for m in range(4) for kind in "FBW"]
    with pytest.raises(ValueError, match="cap must be at least 1"):
        greedy_lattice(problem, cell(problem), cap=0)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=binding_problems(), strict=st.booleans(), cap=st.sampled_from([None, 1, 2, 3]))
def test_greedy_lattices_are_complete_valid_and_within_budget(problem: Problem, strict: bool,
                                                                cap: int | None) -> None:
    """Unequal costs, 1 or 2 chunks, loop and V, a budget of at least one microbatch's footprint, with or without
    a cap: the greedy always places every microbatch, its orders pass the quick budget check it was built with,
    and the replay respects every rule and the budget by the tests' own memory count."""
    schedule = greedy_schedule(problem, cell(problem), strict, cap)
    assert schedule is not None
    check_complete(problem, schedule)
    assert fits(problem, schedule)
    timeline = simulate(problem, schedule)
    assert_valid(problem, timeline)
    assert problem.budget is not None
    assert all(peak <= room + 1e-9 for peak, room in zip(peak_memory(problem, timeline), problem.budget))


def test_the_search_keeps_the_greedy_where_it_beats_every_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark family at P = 4, N = 16, two chunks in loop placement, budget 3: the greedy fills the
    pipeline faster than any repeating pattern (49.65 against 50.77)."""
    problem = Problem.build(num_stages=4, num_microbatches=16, forward=1.0, backward=1.0, backward_weight=0.5,
                            comm=0.03, activation=1.0, weight_activation=0.35, budget=3.0).with_layout(2, "loop")
    found = search(problem)
    assert found is not None and found[1].makespan == pytest.approx(49.65)
    monkeypatch.setattr(lattice, "greedy_lattice", lambda *args, **kwargs: None)
    patterns_only = search(problem)
    assert patterns_only is not None and patterns_only[1].makespan == pytest.approx(50.77)


def test_the_patterns_stop_at_their_own_time_limit() -> None:
    """Unequal costs, P = 4, N = 8, two chunks in loop placement: a repeating pattern beats the greedy lattices
    (73.5 against 77.5); when the patterns' time is up before they start, the greedy lattice is what is left."""
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=3.0, backward=2.0, backward_weight=1.5,
                            comm=0.5, activation=1.0, weight_activation=0.5, budget=3.5).with_layout(2, "loop")
    found = search(problem)
    assert found is not None and found[1].makespan == pytest.approx(73.5)
    greedy_only = search(problem, patterns_until=time.monotonic())
    assert greedy_only is not None and greedy_only[1].makespan == pytest.approx(77.5)


@pytest.mark.parametrize(("placement", "strict_first"), [("loop", True), ("v", False)])
def test_a_greedy_lattice_with_a_large_peak_is_tried_with_more_caps(monkeypatch: pytest.MonkeyPatch,
                                                                    placement: str, strict_first: bool) -> None:
    """Caps of 1 .. 3 fewer in flight than the uncapped greedy had, or down to a sixth of its peak below it when
    that is more: the uncapped greedy is made to report peaks of 30 (strict) and 12 (not), and the search then
    asks for caps 29 .. 25 and 11 .. 9, those of the form that did better without a cap first, each from the
    smallest cut. P = 4, N = 16, budget 3: strict does better in loop placement (49.65 against 51.99), the other
    form in V (49.63 against 60.71)."""
    assert [lattice.greedy_caps(peak) for peak in (1, 6, 23, 24, 30, 40)] == [3, 3, 3, 4, 5, 6]
    problem = Problem.build(num_stages=4, num_microbatches=16, forward=1.0, backward=1.0, backward_weight=0.5,
                            comm=0.03, activation=1.0, weight_activation=0.35, budget=3.0).with_layout(2, placement)
    real = lattice.greedy_lattice
    uncapped = {}
    for strict in (True, False):
        found = real(problem, cell(problem), strict)
        assert found is not None
        uncapped[strict] = compute_metrics(simulate(problem, found[0])).makespan
    assert (uncapped[True] < uncapped[False]) == strict_first
    asked: list[tuple[bool, int | None]] = []

    def spy(problem: Problem, width: float, strict: bool = True, cap: int | None = None,
            chain: object = None, deadline: float = float("inf")) -> tuple[object, int] | None:
        asked.append((strict, cap))
        found = real(problem, width, strict, cap, chain, deadline)  # type: ignore[arg-type]
        if found is None or cap is not None:
            return found
        return found[0], 30 if strict else 12

    monkeypatch.setattr(lattice, "greedy_lattice", spy)
    assert search(problem) is not None
    caps = {True: [(True, cap) for cap in range(29, 24, -1)], False: [(False, cap) for cap in range(11, 8, -1)]}
    assert asked == [(True, None), (False, None), *caps[strict_first], *caps[not strict_first]]


def test_the_least_rate_counts_only_devices_that_cannot_hold_every_microbatch() -> None:
    """P = 8, N = 4: devices 0-6 hold all four microbatches, device 7 one. Little's law on device 7 alone: its
    activation lives through F and B on it (3, one stage at the end of the chain) and its weight share through W
    (0.25 x 1), so 3.25 per microbatch; the least period of a steady state over all devices is 7.75 (device 0's
    round trip) and would skip every pattern of 4 cells, though one fits."""
    problem = Problem.build(num_stages=8, num_microbatches=4, forward=1.0, backward=2.0, backward_weight=1.0,
                            comm=0.5, activation=1.0, weight_activation=0.25, budget=[4.0] * 7 + [1.0])
    assert least_rate(problem) == pytest.approx(3.25)
    assert least_period(problem) > least_rate(problem)
    schedule = lattice_schedule(problem, start_cells((1,), 4), cell(problem))
    assert fits(problem, schedule) and compute_metrics(simulate(problem, schedule)).feasible


def test_nothing_to_do_when_memory_does_not_bind_or_time_is_up() -> None:
    assert search(one_chunk(3, 6, 6.0)) is None  # holds every microbatch
    assert search(one_chunk(3, 6, 2.0), deadline=time.monotonic()) is None
    assert search(one_chunk(3, 6, 2.0), should_stop=lambda: True) is None
    assert greedy_schedule(one_chunk(3, 6, 2.0), 4.0, deadline=time.monotonic()) is None
    assert search(one_chunk(3, 6, 2.0)) is not None


def test_it_is_a_warm_start_of_the_solver_where_memory_binds() -> None:
    """Two chunks in loop placement, P = 4, N = 8, budget 3: the lattice is among the warm starts, replayed
    and within budget."""
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0, backward_weight=0.5,
                            comm=0.03, activation=1.0, weight_activation=0.35, budget=3.0).with_layout(2, "loop")
    found = search(problem)
    assert found is not None
    named = {c.schedule.name: c for c in warm_starts(problem, "makespan")}
    assert "lattice" in named and named["lattice"].metrics.feasible
    assert named["lattice"].metrics.makespan == pytest.approx(found[1].makespan)
    # A warm start that already meets a lower bound makes the lattice pointless: it is not run.
    met = warm_starts(problem, "makespan", bound=min(c.objective for n, c in named.items() if n != "lattice"))
    assert "lattice" not in {c.schedule.name for c in met}


def test_the_solver_gives_the_lattice_and_its_patterns_their_shares_of_the_time_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lattice's deadline is LATTICE_SHARE of the time left when it starts, its patterns' PATTERN_SHARE."""
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0, backward_weight=0.5,
                            comm=0.03, activation=1.0, weight_activation=0.35, budget=3.0).with_layout(2, "loop")
    calls: list[tuple[float, float, float]] = []

    def spy(problem: Problem, deadline: float, should_stop: object, patterns_until: float) -> None:
        calls.append((time.monotonic(), deadline, patterns_until))

    monkeypatch.setattr(lattice, "search", spy)
    deadline = time.monotonic() + 1000.0
    warm_starts(problem, "makespan", deadline=deadline)
    assert len(calls) == 1
    called, lattice_until, patterns_until = calls[0]
    left = deadline - called  # a little more than the time left when the solver computed the shares
    assert solver.LATTICE_SHARE * left - 1.0 < lattice_until - called <= solver.LATTICE_SHARE * left
    assert solver.PATTERN_SHARE * left - 1.0 < patterns_until - called <= solver.PATTERN_SHARE * left
