"""Metrics of a replayed schedule: time, utilization, bubble and activation memory.

- makespan: from the first op's start to the last op's end (all devices start together); with a synchronous
  optimizer step at the end, the step time.
- busy(d): total op time on device d; utilization = sum of busy / (P x makespan); bubble = 1 - utilization.
- stage span of device d: end of its last op - start of its first op. The Zero Bubble paper's cost is the
  largest stage span (it lets the next step's forwards overlap this step's tail instead of a synchronous step).
- activation memory: what each op allocates and releases is the problem's memory rule
  (:meth:`~pipeplan.problem.Problem.allocated_by`, :meth:`~pipeplan.problem.Problem.released_by`); live
  intervals are half-open, so a release at t comes before an allocation at t. A device's peak is the maximum of
  its live sum over time; a schedule is feasible when every device's peak is within its budget.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pipeplan.problem import OpKind, Problem, expect
from pipeplan.schedule import Schedule
from pipeplan.simulate import A_TIMELINE, Timeline

# Relative slack when comparing float memory sums to a budget (0.65 + 0.35 may land a hair above 1.0). Only
# relative: memory may be in any unit (bytes, GiB, or activations of 1e-9), so an absolute slack would let a
# peak over a budget measured in small units pass.
MEMORY_TOLERANCE = 1e-9


def fits_budget(level: float, budget: float) -> bool:
    """Whether memory ``level`` is within ``budget`` up to float noise relative to the budget."""
    return level <= budget * (1 + MEMORY_TOLERANCE)


@dataclass(frozen=True)
class Metrics:
    """What a schedule costs. Times in the config's time unit, memory in its memory unit."""

    schedule: str
    feasible: bool
    """True when every device's peak activation memory is within its budget (always, without a budget)."""
    makespan: float
    """First op start to last op end: the step time with a synchronous optimizer step."""
    stage_span: float
    """The largest per-device span (last end - first start): the Zero Bubble paper's cost."""
    utilization: float
    """Sum of busy time / (devices x makespan)."""
    bubble: float
    """1 - utilization."""
    peak_memory: float
    """Largest live activation memory on any device."""
    peak_memory_per_device: list[float]
    busy_per_device: list[float]
    stage_span_per_device: list[float]
    flushes: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract shared by ``simulate``, ``solve`` and the planner."""
        return asdict(self)


def memory_events(timeline: Timeline) -> list[list[tuple[float, float]]]:
    """Per device, (time, change in live activation memory) for every allocation and release.

    What each op allocates (at its start) and releases (at its end) is the problem's memory rule,
    :meth:`~pipeplan.problem.Problem.allocated_by` and :meth:`~pipeplan.problem.Problem.released_by`.
    """
    expect("timeline", timeline, Timeline, A_TIMELINE)
    problem = timeline.problem
    events: list[list[tuple[float, float]]] = [[] for _ in range(problem.num_devices)]
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        if op.kind is OpKind.F:
            events[device].append((start, problem.allocated_by(op.kind, op.stage)))
        else:
            events[device].append((end, -problem.released_by(op.kind, op.stage)))
    return events


def memory_timeline(timeline: Timeline) -> list[list[tuple[float, float]]]:
    """Per device, the live activation memory as steps: (time, level from this time on).

    Intervals are half-open: a release at t happens before an allocation at t, so they never stack.
    """
    steps: list[list[tuple[float, float]]] = []
    for device_events in memory_events(timeline):
        level = 0.0
        device_steps: list[tuple[float, float]] = [(0.0, 0.0)]
        for time, delta in sorted(device_events):  # by time, then releases (negative) first
            level += delta
            if device_steps[-1][0] == time:
                device_steps[-1] = (time, level)
            else:
                device_steps.append((time, level))
        steps.append(device_steps)
    return steps


def peak_memory_per_device(timeline: Timeline) -> list[float]:
    """The maximum live activation memory of each device over the step."""
    return [max(level for _, level in steps) for steps in memory_timeline(timeline)]


def order_peaks(problem: Problem, schedule: Schedule) -> list[float] | None:
    """The peak live activation memory of each device from ``schedule``'s orders alone, without a replay; None
    when some op of ``problem`` takes no time, or a time too small to move a float at the step's scale.

    A device runs its ops one after another, so when every op takes time, each op starts strictly after the ones
    before it on its device started, and ends strictly before the ones after it end. At the start of a forward
    the memory live on its device is then exactly what the ops before it in its order allocated and released
    (the release of an op that ends as the forward starts comes first, as in :func:`memory_timeline`), plus the
    forward's own activation; memory only grows at a forward's start, so the largest such sum is the device's
    peak, the same number :func:`peak_memory_per_device` reads from the replay (added in the same order). With
    ops of no time, ops on one device can start and end at one instant and the order alone does not say which
    of them come first in time; so too with an op time below the float spacing at its start (a start of 1e7
    plus 1e-10 is still 1e7), hence the margin against the longest any step takes.
    """
    costs = problem.forward + problem.backward + (problem.backward_weight if problem.split_backward else ())
    if min(costs) <= problem.total_time() * 2.0**-40:
        return None
    peaks = []
    for order in schedule.orders:
        level = peak = 0.0
        for op in order:
            if op.kind is OpKind.F:
                level += problem.allocated_by(op.kind, op.stage)
                peak = max(peak, level)
            else:
                level -= problem.released_by(op.kind, op.stage)
        peaks.append(peak)
    return peaks


def within_budget(peaks: list[float], budget: tuple[float, ...] | None) -> bool:
    """True when every peak fits its device's budget (with float slack), or there is no budget."""
    if budget is None:
        return True
    return all(fits_budget(p, b) for p, b in zip(peaks, budget))


def compute_metrics(timeline: Timeline) -> Metrics:
    """Every metric of this module for one replayed schedule."""
    expect("timeline", timeline, Timeline, A_TIMELINE)
    problem = timeline.problem
    num_devices = problem.num_devices
    busy = [0.0] * num_devices
    first = [float("inf")] * num_devices
    last = [float("-inf")] * num_devices
    for device, start, end in zip(timeline.device, timeline.start, timeline.end):
        busy[device] += end - start
        if start < first[device]:
            first[device] = start
        if end > last[device]:
            last[device] = end
    makespan = max(last) - min(first)
    spans = [last[d] - first[d] if last[d] >= first[d] else 0.0 for d in range(num_devices)]
    utilization = sum(busy) / (num_devices * makespan) if makespan > 0 else 1.0
    peaks = peak_memory_per_device(timeline)
    return Metrics(
        schedule=timeline.schedule.name,
        feasible=within_budget(peaks, problem.budget),
        makespan=makespan,
        stage_span=max(spans),
        utilization=utilization,
        bubble=1.0 - utilization,
        peak_memory=max(peaks),
        peak_memory_per_device=peaks,
        busy_per_device=busy,
        stage_span_per_device=spans,
        flushes=timeline.schedule.flushes,
    )
