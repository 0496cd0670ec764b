"""Independent checks that a replayed schedule is valid; shared by the tests of every generator and the solver.

They recompute everything from the op times alone (not from the simulator's or metrics' internals): every op
once on its own device, durations right, dependencies respected, no overlap on a device, memory within budget
whenever the schedule is reported feasible.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from pipeplan import Metrics, OpKind, Problem, Timeline, compute_metrics, generate, simulate

EPS = 1e-6


def peak_memory(problem: Problem, timeline: Timeline) -> list[float]:
    """Peak live activation memory per device, by checking the live sum at every allocation instant."""
    intervals: dict[int, list[tuple[float, float, float]]] = defaultdict(list)  # device -> (alloc, free, amount)
    times = {op: (s, e) for op, s, e in zip(timeline.ops, timeline.start, timeline.end)}
    for op in problem.all_ops():
        if op.kind is not OpKind.F:
            continue
        device = problem.device_of(op.stage)
        alloc = times[op][0]
        act = problem.activation[op.stage]
        wact = problem.weight_activation[op.stage]
        b_end = times[problem.op(OpKind.B, op.stage, op.microbatch)][1]
        if problem.split_backward:
            w_end = times[problem.op(OpKind.W, op.stage, op.microbatch)][1]
            intervals[device].append((alloc, b_end, act - wact))
            intervals[device].append((alloc, w_end, wact))
        else:
            intervals[device].append((alloc, b_end, act))
    peaks = []
    for device in range(problem.num_devices):
        if not intervals[device]:
            peaks.append(0.0)
            continue
        alloc, free, amount = (np.array(column, dtype=float) for column in zip(*intervals[device]))
        # live[i, j]: interval j is live at the instant interval i allocates (every pair, as a matrix)
        live = (alloc[None, :] <= alloc[:, None]) & (alloc[:, None] < free[None, :])
        peaks.append(max(0.0, float((live * amount[None, :]).sum(axis=1).max())))
    return peaks


def assert_valid(problem: Problem, timeline: Timeline, metrics: Metrics | None = None) -> None:
    """Assert that ``timeline`` is a complete, dependency-respecting, non-overlapping schedule of ``problem``.

    With ``metrics``, also assert that its peak memory agrees with an independent count and that a schedule
    reported feasible is within the budget.
    """
    times = {}
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        assert op not in times, f"{op.label} runs twice"
        assert device == problem.device_of(op.stage), f"{op.label} on device {device}"
        assert abs((end - start) - problem.duration(op)) < EPS, f"{op.label} lasts {end - start}"
        assert start >= -EPS, f"{op.label} starts at {start}"
        times[op] = (start, end)
    assert set(times) == set(problem.all_ops()), "ops missing or foreign ops present"
    for op, (start, _) in times.items():
        for dep, lag in problem.dependencies(op):
            assert start >= times[dep][1] + lag - EPS, f"{op.label} starts before {dep.label} ends (+{lag})"
    by_device: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for op, (start, end) in times.items():
        by_device[problem.device_of(op.stage)].append((start, end))
    for device, spans in by_device.items():
        spans.sort()
        for (_, e1), (s2, _) in zip(spans, spans[1:]):
            assert s2 >= e1 - EPS, f"device {device} runs two ops at once around t={s2}"
    if metrics is not None:
        peaks = peak_memory(problem, timeline)
        for got, want in zip(metrics.peak_memory_per_device, peaks):
            assert abs(got - want) < EPS, f"reported peak {got}, counted {want}"
        if metrics.feasible and problem.budget is not None:
            for device, (peak, budget) in enumerate(zip(peaks, problem.budget)):
                assert peak <= budget + EPS, f"device {device} peaks at {peak} over budget {budget}"
        makespan = max(e for _, e in times.values()) - min(s for s, _ in times.values())
        assert abs(metrics.makespan - makespan) < EPS


def replay_valid(problem: Problem, name: str) -> tuple[Timeline, Metrics]:
    """Generate the named schedule, replay it and check every invariant; return the timeline and metrics."""
    timeline = simulate(problem, generate(name, problem))
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    return timeline, metrics
