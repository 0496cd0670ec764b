"""A memory-aware greedy list scheduler: the solver's warm starts beside the named schedules.

Whenever a device is idle it starts, among the ops whose dependencies have ended, the first kind in its
priority order that may run: B (oldest microbatch first) unblocks the previous stage, F is admitted only while
the budget (and an optional cap on microbatches in flight) allows, and W fills what is left. It is not
registered as a named schedule: frameworks do not ship it, it only seeds the optimizer.

With several chunks per device a forward is admitted by one of two rules, which must never let the run stall
(every microbatch's forwards wait for memory that only its own later ops would free):

- ``reserve``: a microbatch entering a device (its forward on the device's lowest chunk) reserves what it will
  hold there on all its chunks; its later chunks never wait. Safe, but a microbatch away on other devices
  keeps its whole reservation.
- ``age``: a forward of microbatch m may take memory only if what is left still covers everything the older
  microbatches 0 .. m-1 will yet allocate on the device (a banker's rule ordered by age). It lets a new
  microbatch start its first chunk while an older one is out on the others, which is what a budget of one or
  two microbatches needs. It cannot stall: take the oldest unfinished microbatch g (every older one is done
  and holds nothing) waiting for memory on a device. If no newer microbatch holds memory there, g holds at
  most what it alone needs. Otherwise look at the latest admission of a newer one n: then the live memory
  plus n's forward plus the older ones' remaining needs (g's included) fitted the budget; since then only
  older microbatches allocated, each within what was counted for it, and releases only free memory; so g's
  forward fits now. g's B and W need no memory, so g finishes, and by induction every microbatch does.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass

from pipeplan.metrics import fits_budget
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
    'budget' (only the budget), '1f1b' (P - d, 1F1B's warm-up) or '2x' (2(P - d), ZB-H2's); ``admission``
    is how forwards take memory, 'reserve' or 'age' (see the module's docstring; with one chunk per device
    both admit the same forwards).
    """

    priority: str = "bfw"
    cap: str = "budget"
    admission: str = "reserve"

    @property
    def name(self) -> str:
        suffix = "" if self.admission == "reserve" else f"-{self.admission}"
        return f"greedy-{self.priority}-{self.cap}{suffix}"


RULES: tuple[GreedyRule, ...] = tuple(
    GreedyRule(priority, cap) for priority in _PRIORITIES for cap in ("budget", "1f1b", "2x")
)
# The rules that differ from RULES only with several chunks per device.
AGE_RULES: tuple[GreedyRule, ...] = tuple(
    GreedyRule(priority, cap, "age") for priority in _PRIORITIES for cap in ("budget", "1f1b")
)


def rules_for(problem: Problem) -> tuple[GreedyRule, ...]:
    """The rules worth running on ``problem``: the age-ordered admission only matters with several chunks."""
    if problem.num_chunks > 1:
        return RULES + AGE_RULES
    return RULES


class _PrefixSums:
    """A Fenwick tree: point updates and prefix sums over microbatches, each in O(log N)."""

    def __init__(self, values: list[float]) -> None:
        self.tree = [0.0] * (len(values) + 1)
        for i, value in enumerate(values):
            self.add(i, value)

    def add(self, index: int, delta: float) -> None:
        i = index + 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def before(self, index: int) -> float:
        """The sum of the values at positions 0 .. index - 1."""
        total, i = 0.0, index
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


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
    time, then move to one heap per kind ordered by the kind's preference (forwards: one heap per stage, oldest
    microbatch first), so each pick costs a logarithm.
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
        self.by_age = rule.admission == "age"
        # age: per device, what each microbatch will still allocate there (its forwards not yet started).
        self.remaining = [
            _PrefixSums([self.per_microbatch[d]] * problem.num_microbatches) if self.by_age else None
            for d in devices
        ]
        # Memory held per device: reserved footprints (reserve) or the live activations (age).
        self.committed = [0.0] * problem.num_devices
        self.in_flight = [0] * problem.num_devices
        self.free_at = [0.0] * problem.num_devices
        # pending[d]: heap of (ready time, sequence, op) of ops on device d whose dependency has ended.
        self.pending: list[list[tuple[float, int, Op]]] = [[] for _ in devices]
        # ready[d][kind]: heap of (preference key, op) of B and W ops on device d whose inputs have arrived.
        self.ready: list[dict[OpKind, list[tuple[tuple[int, int], Op]]]] = [
            {kind: [] for kind in (OpKind.B, OpKind.W)} for _ in devices
        ]
        # forwards[d][stage]: heap of (microbatch, op) of the arrived forwards, stages highest first (the
        # highest is closest to its backward).
        self.forwards: list[dict[int, list[tuple[int, Op]]]] = [
            {s: [] for s in sorted(problem.stages_on_device(d), reverse=True)} for d in devices
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
            if op.kind is OpKind.F:
                heapq.heappush(self.forwards[device][op.stage], (op.microbatch, op))
            else:
                # B and W: the oldest microbatch first, then the highest stage.
                heapq.heappush(self.ready[device][op.kind], ((op.microbatch, -op.stage), op))

    def _fits(self, device: int, need: float) -> bool:
        return fits_budget(self.committed[device] + need, self.budget[device])

    def _admissible(self, device: int, op: Op) -> bool:
        """Whether forward ``op`` may start now (B and W always may)."""
        first = op.stage == self.first_stage[device]
        if first and self.in_flight[device] >= self.cap[device]:
            return False
        remaining = self.remaining[device]
        if remaining is not None:
            older = remaining.before(op.microbatch)
            return self._fits(device, self.problem.allocated_by(OpKind.F, op.stage) + older)
        return not first or self._fits(device, self.per_microbatch[device])

    def _pick(self, device: int, now: float) -> Op | None:
        """The preferred ready op of the first kind in priority order that may run, taken off its heap.

        Forwards go by stage, highest first, then oldest microbatch. Only forwards can be held back (by memory or
        the in-flight cap), and on one stage a held-back forward holds back every newer one: the cap does not
        depend on the microbatch, and the memory an age-ordered admission keeps for older microbatches only
        grows with age. So the oldest forward of each stage decides for its stage."""
        self._admit_arrivals(device, now)
        for kind in self.priority:
            if kind is OpKind.F:
                for forwards in self.forwards[device].values():
                    if forwards and self._admissible(device, forwards[0][1]):
                        return heapq.heappop(forwards)[1]
                continue
            ready = self.ready[device][kind]
            if ready:
                return heapq.heappop(ready)[1]
        return None

    def _start(self, device: int, op: Op, now: float) -> float:
        problem = self.problem
        end = now + problem.duration(op)
        self.orders[device].append(op)
        self.free_at[device] = end
        s = op.stage
        remaining = self.remaining[device]
        if op.kind is OpKind.F and remaining is not None:
            allocated = problem.allocated_by(OpKind.F, s)
            self.committed[device] += allocated
            remaining.add(op.microbatch, -allocated)
        if op.kind is OpKind.F and s == self.first_stage[device]:
            if remaining is None:
                self.committed[device] += self.per_microbatch[device]
            self.in_flight[device] += 1
        elif op.kind is not OpKind.F:
            heapq.heappush(self.releases[device], (end, problem.released_by(op.kind, s)))
        if op.kind is OpKind.B and s == self.first_stage[device]:
            self.in_flight[device] -= 1
        for succ, lag in self.successors.get(op, []):
            self._arrive(succ, end + lag)
        return end

    def run(self, name: str, deadline: float = math.inf) -> Schedule | None:
        """Advance from event to event. At each time the devices something happened to (an op of theirs ended,
        an input arrived) are looked at in device order; an input that arrives at that same time for a later
        device is seen by it in the same sweep, as if every device were looked at in order, which is what a
        sweep over all devices would do at a fraction of the cost. Gives up (None) once ``time.monotonic()``
        passes ``deadline``."""
        problem = self.problem
        total = len(problem.all_ops())
        done = 0
        counter = itertools.count()
        # events: heap of (time, sequence, device) at which something may let the device start an op.
        events: list[tuple[float, int, int]] = [(0.0, next(counter), d) for d in range(problem.num_devices)]
        steps = 0
        while events:
            steps += 1
            if steps % 1024 == 0 and time.monotonic() > deadline:
                return None
            now = events[0][0]
            touched: set[int] = set()
            while events and events[0][0] <= now:
                touched.add(heapq.heappop(events)[2])
            for device in touched:
                releases = self.releases[device]
                while releases and releases[0][0] <= now:
                    self.committed[device] -= heapq.heappop(releases)[1]
            todo = sorted(touched)  # a heap: sorted lists are heaps
            while todo:
                device = heapq.heappop(todo)
                while self.free_at[device] <= now:
                    op = self._pick(device, now)
                    if op is None:
                        break
                    end = self._start(device, op, now)
                    done += 1
                    heapq.heappush(events, (end, next(counter), device))
                    for succ, lag in self.successors.get(op, []):
                        target = problem.device_of(succ.stage)
                        heapq.heappush(events, (end + lag, next(counter), target))
                        if end + lag <= now and target > device and target not in touched:
                            touched.add(target)
                            heapq.heappush(todo, target)
        if done != total:
            return None
        return Schedule.from_lists(name, self.orders)


def greedy_schedule(problem: Problem, rule: GreedyRule = GreedyRule(),
                    deadline: float = math.inf) -> Schedule | None:
    """The list schedule of ``rule``; None if it stalls (it cannot when the budget holds one microbatch) or is
    still running when ``time.monotonic()`` passes ``deadline``."""
    return _ListScheduler(problem, rule).run(rule.name, deadline)


def greedy_schedules(problem: Problem) -> list[Schedule]:
    """Every variant of :func:`rules_for` the problem that completes."""
    found = (greedy_schedule(problem, rule) for rule in rules_for(problem))
    return [schedule for schedule in found if schedule is not None]
