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
    """State of one greedy run: ready ops, device clocks and live memory, all in the problem's units.

    Per device, ops wait in ``pending`` (a heap by the time their inputs arrive) until the clock reaches that
    time, then move to one heap per kind ordered by the kind's preference, so each pick costs a logarithm.
    """

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
        # pending[d]: heap of (ready time, sequence, op) of ops on device d whose dependency has ended.
        self.pending: list[list[tuple[float, int, Op]]] = [[] for _ in devices]
        # ready[d][kind]: heap of (preference key, op) of ops on device d whose inputs have arrived.
        self.ready: list[dict[OpKind, list[tuple[tuple[int, int], Op]]]] = [
            {kind: [] for kind in OpKind} for _ in devices
        ]
        self.sequence = itertools.count()
        # successors[op]: ops that wait for op; keyed by op.
        self.successors: dict[Op, list[tuple[Op, float]]] = {}
        for op in problem.all_ops():
            deps = problem.dependencies(op)
            if not deps:
                self._arrive(op, 0.0)
            for dep, lag in deps:
                self.successors.setdefault(dep, []).append((op, lag))
        self.orders: list[list[Op]] = [[] for _ in devices]
        # releases[d]: heap of (time, amount) of memory returned when a B or W ends.
        self.releases: list[list[tuple[float, float]]] = [[] for _ in devices]

    def _arrive(self, op: Op, at: float) -> None:
        heapq.heappush(self.pending[self.problem.device_of(op.stage)], (at, next(self.sequence), op))

    def _admit_arrivals(self, device: int, now: float) -> None:
        pending = self.pending[device]
        while pending and pending[0][0] <= now:
            _, _, op = heapq.heappop(pending)
            # F: the highest stage first (it is closest to its backward), then the oldest microbatch;
            # B and W: the oldest microbatch first, then the highest stage.
            key = (-op.stage, op.microbatch) if op.kind is OpKind.F else (op.microbatch, -op.stage)
            heapq.heappush(self.ready[device][op.kind], (key, op))

    def _admissible(self, device: int, op: Op) -> bool:
        if op.kind is not OpKind.F or op.stage != self.first_stage[device]:
            return True
        need = self.per_microbatch[device]
        fits = self.committed[device] + need <= self.budget[device] * (1 + MEMORY_TOLERANCE) + MEMORY_TOLERANCE
        return fits and self.in_flight[device] < self.cap[device]

    def _pick(self, device: int, now: float) -> Op | None:
        """The preferred ready op of the first kind in priority order that may run, taken off its heap.

        Only a forward on the device's first stage can be held back (by memory or the in-flight cap), and it
        sorts after every other forward, so the top of each heap decides."""
        self._admit_arrivals(device, now)
        for kind in self.priority:
            heap = self.ready[device][kind]
            if heap and self._admissible(device, heap[0][1]):
                return heapq.heappop(heap)[1]
        return None

    def _start(self, device: int, op: Op, now: float) -> float:
        problem = self.problem
        end = now + problem.duration(op)
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
            self._arrive(succ, end + lag)
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
                future = self.pending[device]
                if future and future[0][0] > now:
                    heapq.heappush(events, (future[0][0], next(counter)))
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
