"""Discrete-event replay of a schedule: the one place where op orders become start and end times.

Every device runs its ops in the given order, each as early as the device is free and every dependency has
ended (plus its communication latency). All devices start at time 0. The replay is deterministic: the times
do not depend on the order in which devices are advanced, only on the per-device orders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from pipeplan.problem import Op, Problem
from pipeplan.schedule import Schedule, ScheduleError, Wording, check_complete


@dataclass(frozen=True)
class Timeline:
    """The result of replaying a schedule: start and end of every op, in the config's time unit.

    ``ops``, ``device``, ``start`` and ``end`` are parallel sequences, device by device in schedule order.
    """

    problem: Problem
    schedule: Schedule
    ops: tuple[Op, ...]
    device: tuple[int, ...]
    start: tuple[float, ...]
    end: tuple[float, ...]

    @cached_property
    def index(self) -> dict[Op, int]:
        """Position of each op in the parallel sequences; keyed by op."""
        return {op: i for i, op in enumerate(self.ops)}

    def start_of(self, op: Op) -> float:
        return self.start[self.index[op]]

    def end_of(self, op: Op) -> float:
        return self.end[self.index[op]]


# What expect() says a timeline must be.
A_TIMELINE = "a pipeplan Timeline (simulate(problem, schedule))"


class _Replay:
    """All state of one replay: per-device cursors, the time each device becomes free, ends known so far."""

    def __init__(self, problem: Problem, schedule: Schedule) -> None:
        self.problem = problem
        self.schedule = schedule
        self.ops: list[Op] = [op for order in schedule.orders for op in order]
        self.device: list[int] = [d for d, order in enumerate(schedule.orders) for _ in order]
        self.duration: list[float] = [problem.duration(op) for op in self.ops]
        numbers = [problem.op_number(op) for op in self.ops]
        index = [0] * problem.num_op_numbers  # op number -> position in self.ops
        for i, number in enumerate(numbers):
            index[number] = i
        # deps[i]: (index of an op that must end first, latency after its end) for op i.
        dependency, lag = problem.numbered_dependency
        self.deps: list[list[tuple[int, float]]] = [
            [(index[dependency[number]], lag[number])] if dependency[number] >= 0 else [] for number in numbers
        ]
        offsets = [0]
        for order in schedule.orders:
            offsets.append(offsets[-1] + len(order))
        self.first = offsets[:-1]
        self.stop = offsets[1:]
        self.cursor = list(self.first)
        self.free = [0.0] * len(schedule.orders)
        self.start: list[float] = [0.0] * len(self.ops)
        self.end: list[float | None] = [None] * len(self.ops)
        # waiting[i]: devices whose next op waits for op i to end; keyed by op index.
        self.waiting: dict[int, list[int]] = {}

    def run(self) -> Timeline:
        pending = list(range(len(self.schedule.orders)))
        while pending:
            self._advance(pending.pop(), pending)
        stuck = [d for d in range(len(self.cursor)) if self.cursor[d] < self.stop[d]]
        if stuck:
            raise ScheduleError(self._deadlock_message(stuck))
        return Timeline(
            self.problem,
            self.schedule,
            tuple(self.ops),
            tuple(self.device),
            tuple(self.start),
            tuple(e for e in self.end if e is not None),
        )

    def _advance(self, device: int, pending: list[int]) -> None:
        """Run device's ops in order until one waits for an op that has not ended yet."""
        end, deps, waiting = self.end, self.deps, self.waiting
        i = self.cursor[device]
        stop = self.stop[device]
        t_free = self.free[device]
        while i < stop:
            t = t_free
            for j, lag in deps[i]:
                e = end[j]
                if e is None:
                    waiting.setdefault(j, []).append(device)
                    self.cursor[device], self.free[device] = i, t_free
                    return
                if e + lag > t:
                    t = e + lag
            self.start[i] = t
            t_free = end[i] = t + self.duration[i]
            woken = waiting.pop(i, None)
            if woken:
                pending.extend(woken)
            i += 1
        self.cursor[device], self.free[device] = i, t_free

    def _deadlock_message(self, stuck: list[int]) -> Callable[[Wording], str]:
        """The deadlock's message in any wording: each stuck device, its next op and what that op waits for."""
        places = []
        for d in stuck:
            i = self.cursor[d]
            places.append((d, self.ops[i], [self.ops[j] for j, _ in self.deps[i] if self.end[j] is None]))
        name = self.schedule.name
        return lambda w: f"schedule {name!r} deadlocks: " + "; ".join(w.stuck(*place) for place in places)


def simulate(problem: Problem, schedule: Schedule) -> Timeline:
    """Replay ``schedule`` on ``problem`` and return every op's start and end.

    Raises :class:`~pipeplan.schedule.ScheduleError` if an op is missing, repeated or on the wrong device, or if
    the orders deadlock (the message names each stuck device's next op and what it waits for).
    """
    check_complete(problem, schedule)
    return _Replay(problem, schedule).run()
