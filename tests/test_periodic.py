"""The periodic warm start: one microbatch's pattern on a circle, repeated every period."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from invariants import assert_valid
from strategies import binding_problems

from pipeplan import compute_metrics, simulate
from pipeplan.periodic import _free_start, least_period, periodic_schedule, place, scan, steady_peaks
from pipeplan.problem import OpKind, Problem
from pipeplan.solver import tick_problem, warm_starts


def two_stages(budget: float, n: int = 4) -> Problem:
    return Problem.build(num_stages=2, num_microbatches=n, forward=1.0, backward=1.0, comm=0.0, activation=1.0,
                         budget=budget)


def test_free_start_skips_occupied_arcs_and_wraps_around() -> None:
    # Circle of 10 with [2, 5) and [8, 11) = [8, 10) + [0, 1) taken.
    arcs = [(2.0, 3.0), (8.0, 3.0)]
    assert _free_start(arcs, 1.0, 1.0, 10.0) == 1.0
    assert _free_start(arcs, 1.5, 1.0, 10.0) == 5.0  # [1.5, 2.5) hits [2, 5)
    assert _free_start(arcs, 7.5, 1.0, 10.0) == 11.0  # [7.5, 8.5) hits [8, 11); 11 is phase 1, free
    assert _free_start(arcs, 5.0, 3.0, 10.0) == 5.0
    assert _free_start(arcs, 5.5, 3.0, 10.0) == 15.0  # [5.5, 8.5) hits [8, 11), at 11 [1, 4) hits [2, 5)
    assert _free_start(arcs, 13.0, 0.0, 10.0) == 13.0  # an empty op takes no arc
    assert _free_start(arcs, 0.0, 3.5, 10.0) is None  # 4.5 of 10 is free, but in gaps of 1 and 3


def test_two_stages_at_two_activations_give_1f1b() -> None:
    """Hand-traced: F(0) at 0, F(1) at 1, B(1) at 2 (phase 0 on device 1, free), B(0) at 3 (phase 1 on device 0,
    free). Device 0 holds [0, 4), two periods long: 2 activations; device 1 holds [1, 3): 1. The repetition is
    1F1B: (N + P - 1)(F + B) = 10 for N = 4."""
    problem = two_stages(2.0)
    assert least_period(problem) == pytest.approx(2.0)  # 1 x (F0 + F1 + B1 + B0) / 2
    offsets = place(problem, 2.0)
    assert offsets is not None
    assert {(op.kind, op.stage): at for op, at in offsets.items()} == {
        (OpKind.F, 0): 0.0, (OpKind.F, 1): 1.0, (OpKind.B, 1): 2.0, (OpKind.B, 0): 3.0}
    assert steady_peaks(problem, offsets, 2.0) == [2.0, 1.0]
    schedule = periodic_schedule(problem)
    assert schedule is not None
    metrics = compute_metrics(simulate(problem, schedule))
    assert metrics.makespan == pytest.approx(10.0) and metrics.peak_memory_per_device == [2.0, 1.0]


def test_two_stages_at_one_activation_run_one_microbatch_at_a_time() -> None:
    problem = two_stages(1.0)
    assert least_period(problem) == pytest.approx(4.0)
    assert steady_peaks(problem, place(problem, 3.0) or {}, 3.0)[0] == 2.0  # [0, 4) spans two phases of 3
    schedule = periodic_schedule(problem)
    assert schedule is not None
    assert compute_metrics(simulate(problem, schedule)).makespan == pytest.approx(16.0)


def test_nothing_to_do_when_memory_does_not_bind_or_time_is_up() -> None:
    assert periodic_schedule(two_stages(4.0)) is None  # holds all 4 microbatches
    assert periodic_schedule(two_stages(2.0, n=1)) is None
    assert periodic_schedule(two_stages(2.0), deadline=time.monotonic()) is None
    assert periodic_schedule(two_stages(2.0), should_stop=lambda: True) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binding_problems())
def test_every_pattern_is_a_valid_schedule_within_budget(problem: Problem) -> None:
    """The module's theorem on random problems with unequal costs: the pattern's own timing (offsets + m
    period) respects dependencies and never overlaps on a device, its steady state fits the budget, and the
    as-soon-as-possible replay of its orders is valid, no later and never holds more than the steady state."""
    ticked, scale, _ = tick_problem(problem)
    found = scan(ticked)
    if found is None:
        return
    period, offsets = found
    schedule = periodic_schedule(ticked, problem)
    assert schedule is not None
    n = problem.num_microbatches
    by_device: dict[int, list[tuple[float, float]]] = {}
    for op, at in offsets.items():
        for dep, lag in ticked.dependencies(op):
            assert at >= offsets[dep] + ticked.duration(dep) + lag
        for m in range(n):
            by_device.setdefault(ticked.device_of(op.stage), []).append(
                (at + m * period, at + m * period + ticked.duration(op)))
    for spans in by_device.values():
        spans.sort()
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))
    steady = steady_peaks(ticked, offsets, period)
    assert ticked.budget is not None and all(p <= b for p, b in zip(steady, ticked.budget))
    assert period >= math.floor(least_period(ticked))

    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    latest = max(at + ticked.duration(op) for op, at in offsets.items()) + (n - 1) * period
    assert metrics.makespan <= latest / scale + 1e-9
    memory_scale = ticked.budget[0] / problem.budget[0] if problem.budget and problem.budget[0] else 1.0
    for replayed, held in zip(metrics.peak_memory_per_device, steady):
        assert replayed <= held / memory_scale + 1e-9


def test_the_solver_gets_the_pattern_and_the_lattice_among_its_best_warm_starts() -> None:
    """Two chunks in V placement at 3 activations of 8 devices: the list schedulers collide; V-Min fitted to the
    budget (V-Min's peak is 3.35) with a hole of 2 slots after every 3 microbatches, the lattice (no microbatch
    waits; here the greedy one with a cap on the microbatches in flight) and the pattern (period 3.62 against 2.5
    of work per microbatch) are the three best warm starts, the other fitted ones (V-Min with whole empty block
    positions, V-Half) next, and the others far behind."""
    problem = Problem.build(num_stages=8, num_microbatches=16, forward=1.0, backward=1.0, backward_weight=0.5,
                            comm=0.03, activation=1.0, weight_activation=0.35, budget=3.0).with_layout(2, "v")
    candidates = warm_starts(problem, "makespan")
    assert [c.schedule.name for c in candidates[:3]] == ["v-min-fitted", "lattice", "periodic"]
    assert [c.objective for c in candidates[:3]] == pytest.approx([69.05, 69.55, 70.45])
    others = [c.objective for c in candidates
              if c.schedule.name not in ("periodic", "lattice") and not c.schedule.name.endswith("-fitted")]
    assert min(others) > 79
    # The other fitted ones come between them.
    fitted = [c.objective for c in candidates[3:] if c.schedule.name.endswith("-fitted")]
    assert fitted and 70.45 < min(fitted) < 79
