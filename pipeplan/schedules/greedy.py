"""A memory-aware greedy list scheduler: the solver's warm starts beside the named schedules.

Whenever a device is idle it starts, among the ops whose dependencies have ended, the first kind in its
priority order that may run: B (oldest microbatch first) unblocks the previous stage, F is admitted only while
the budget (and an optional cap on microbatches in flight) allows, and W fills what is left. It is not
registered as a named schedule: frameworks do not ship it, it only seeds the optimizer.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from pipeplan.metrics import MEMORY_TOLERANCE
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule

_PRIORITIES: dict[str, tuple[OpKind, ...]] = {
    "bfw": (OpKind.B, OpKind.F, OpKind.W),
    "bwf": (OpKind.B, OpKind.W, OpKind.F),
}


@dataclass(frozen=True)
class GreedyRule:
    """One variant of the list scheduler.

    ``priority`` names the kind order (``bfw`` or ``bwf``); ``cap`` limits microbatches in flight per device:
    'budget' (only the budget), '1f1b' (P - d, 1F1B's warm-up) or '2x' (2(P - d), ZB-H2's).
    """

    priority: str = "bfw"
    cap: str = "budget"

    @property
    def name(self) -> str:
        return f"greedy-{self.priority}-{self.cap}"


RULES: tuple[GreedyRule, ...] = tuple(
    GreedyRule(priority, cap) for priority in _PRIORITIES for cap in ("budget", "1f1b", "2x")
)


def _in_flight_cap(problem: Problem, device: int, cap: str) -> int:
    depth = problem.num_devices - device
    if cap == "1f1b":
        return depth
    if cap == "2x":
        return 2 * depth
    return problem.num_microbatches


class _ListScheduler:
    """State of one greedy run: ready ops, device clocks and live memory, all in the problem's units."""

    def __init__(self, problem: Problem, rule: GreedyRule) -> None:
        self.problem = problem
        self.priority = _PRIORITIES[rule.priority]
        devices = range(problem.num_devices)
        self.cap = [_in_flight_cap(problem, d, rule.cap) for d in devices]
        self.first_stage = [min(problem.stages_on_device(d)) for d in devices]
        # Memory a microbatch needs on a device across all its chunks, reserved when it enters the device so
        # that its later chunks can never be locked out by newer microbatches.
        self.per_microbatch = [problem.footprint(d) for d in devices]
        budget = problem.budget
        self.budget = [float("inf")] * problem.num_devices if budget is None else list(budget)
        self.committed = [0.0] * problem.num_devices
        self.in_flight = [0] * problem.num_devices
        self.free_at = [0.0] * problem.num_devices
        # ready[d]: (ready time, op) of ops on device d whose dependency has ended.
        self.ready: list[list[tuple[float, Op]]] = [[] for _ in devices]
        # successors[op]: ops that wait for op; keyed by op.
        self.successors: dict[Op, list[tuple[Op, float]]] = {}
        for op in problem.all_ops():
            deps = problem.dependencies(op)
            if not deps:
                self.ready[problem.device_of(op.stage)].append((0.0, op))
            for dep, lag in deps:
                self.successors.setdefault(dep, []).append((op, lag))
        self.orders: list[list[Op]] = [[] for _ in devices]
        # releases[d]: heap of (time, amount) of memory returned when a B or W ends.
        self.releases: list[list[tuple[float, float]]] = [[] for _ in devices]

    def _admissible(self, device: int, op: Op) -> bool:
        if op.kind is not OpKind.F or op.stage != self.first_stage[device]:
            return True
        need = self.per_microbatch[device]
        fits = self.committed[device] + need <= self.budget[device] * (1 + MEMORY_TOLERANCE) + MEMORY_TOLERANCE
        return fits and self.in_flight[device] < self.cap[device]

    def _pick(self, device: int, now: float) -> Op | None:
        ready = [op for t, op in self.ready[device] if t <= now]
        for kind in self.priority:
            options = [op for op in ready if op.kind is kind and self._admissible(device, op)]
            if options:
                if kind is OpKind.F:
                    return min(options, key=lambda op: (-op.stage, op.microbatch))
                return min(options, key=lambda op: (op.microbatch, -op.stage))
        return None

    def _start(self, device: int, op: Op, now: float) -> float:
        problem = self.problem
        end = now + problem.duration(op)
        self.ready[device] = [(t, o) for t, o in self.ready[device] if o != op]
        self.orders[device].append(op)
        self.free_at[device] = end
        s = op.stage
        if op.kind is OpKind.F and s == self.first_stage[device]:
            self.committed[device] += self.per_microbatch[device]
            self.in_flight[device] += 1
        elif op.kind is not OpKind.F:
            heapq.heappush(self.releases[device], (end, problem.released_by(op.kind, s)))
        if op.kind is OpKind.B and s == self.first_stage[device]:
            self.in_flight[device] -= 1
        for succ, lag in self.successors.get(op, []):
            self.ready[problem.device_of(succ.stage)].append((end + lag, succ))
        return end

    def run(self, name: str) -> Schedule | None:
        problem = self.problem
        total = len(problem.all_ops())
        done = 0
        counter = itertools.count()
        events: list[tuple[float, int]] = [(0.0, next(counter))]
        while events:
            now, _ = heapq.heappop(events)
            while events and events[0][0] <= now:
                heapq.heappop(events)
            for device in range(problem.num_devices):
                releases = self.releases[device]
                while releases and releases[0][0] <= now:
                    self.committed[device] -= heapq.heappop(releases)[1]
            for device in range(problem.num_devices):
                while self.free_at[device] <= now:
                    op = self._pick(device, now)
                    if op is None:
                        break
                    end = self._start(device, op, now)
                    done += 1
                    heapq.heappush(events, (end, next(counter)))
                    for _, succ_lag in self.successors.get(op, []):
                        heapq.heappush(events, (end + succ_lag, next(counter)))
            for device in range(problem.num_devices):
                future = [t for t, _ in self.ready[device] if t > now]
                if future:
                    heapq.heappush(events, (min(future), next(counter)))
        if done != total:
            return None
        return Schedule.from_lists(name, self.orders)


def greedy_schedule(problem: Problem, rule: GreedyRule = GreedyRule()) -> Schedule | None:
    """The list schedule of ``rule``; None if it stalls (it cannot when the budget holds one microbatch)."""
    return _ListScheduler(problem, rule).run(rule.name)


def greedy_schedules(problem: Problem) -> list[Schedule]:
    """Every variant of :data:`RULES` that completes."""
    found = (greedy_schedule(problem, rule) for rule in RULES)
    return [schedule for schedule in found if schedule is not None]
