"""A schedule: for every device, the order in which it runs its ops.

Only the order is planned; start times come from the simulator (:mod:`pipeplan.simulate`), exactly as a
runtime such as ``torch.distributed.pipelining`` runs each rank's list as soon as it can.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeplan.problem import A_PROBLEM, Op, OpKind, PipeplanError, Problem, counted, expect, shown


def _label(op: Op) -> str:
    return op.label


def _device_stuck(device: int, op: Op, waits_for: Sequence[Op]) -> str:
    return f"device {device} at {op.label} (waits for {', '.join(blocker.label for blocker in waits_for)})"


@dataclass(frozen=True)
class Wording:
    """How a :class:`ScheduleError` names what it is about: an op (``F3@s1``), and a deadlocked device at its
    next op with the ops that op waits for. A reader of another format names them as its file writes them."""

    op: Callable[[Op], str] = _label
    stuck: Callable[[int, Op, Sequence[Op]], str] = _device_stuck


class ScheduleError(PipeplanError):
    """A schedule that cannot be run: an op missing, repeated, on the wrong device, or a deadlocked order.

    ``worded``, when the message names ops, builds the message with a given :class:`Wording` (the message itself
    is its default wording), so that a caller can name the ops its own way without parsing the text."""

    def __init__(self, message: str | Callable[[Wording], str] = "", *args: object) -> None:
        self.worded = None if isinstance(message, str) else message
        super().__init__(message if isinstance(message, str) else message(Wording()), *args)

    def __reduce__(self) -> tuple[type[ScheduleError], tuple[object, ...]]:
        # Pickled (sent from a worker process) as its message: ``worded`` is a closure, which does not pickle.
        return type(self), self.args

    def reworded(self, wording: Wording) -> str:
        """The message with ``wording``'s names for its ops (the message as it is when it names none)."""
        return str(self) if self.worded is None else self.worded(wording)


class NotApplicable(PipeplanError):
    """A generator that does not apply to a problem (e.g. a zero-bubble schedule without a split backward)."""


@dataclass(frozen=True)
class Schedule:
    """Per-device op orders of one optimizer step.

    ``orders[d]`` is the sequence of ops device d runs, first to last. ``flushes`` counts fill-and-drain phases
    (GPipe under a budget runs several; 1 otherwise).
    """

    name: str
    orders: tuple[tuple[Op, ...], ...]
    flushes: int = 1

    @classmethod
    def from_lists(cls, name: str, orders: Sequence[Sequence[Op]], flushes: int = 1) -> Schedule:
        """Build a schedule from mutable per-device lists (what they hold is checked when it is replayed)."""
        expect("name", name, str, "a str, the schedule's name", ScheduleError)
        if isinstance(orders, (str, bytes)) or not all(_iterable(order) for order in _listed(orders)):
            raise ScheduleError(f"orders must be a list of one list of ops per device, got {type(orders).__name__} "
                                f"{shown(orders, 40)}")
        return cls(name, tuple(tuple(order) for order in orders), flushes)

    @property
    def num_ops(self) -> int:
        return sum(len(order) for order in self.orders)


def _iterable(value: object) -> bool:
    """Whether ``value`` can be a device's order: a list or tuple of ops, not a single op or a string."""
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Op))


def _listed(orders: object) -> Sequence[object]:
    """``orders`` as a sequence, or [None] (not an order) when it is none."""
    return orders if _iterable(orders) else [None]  # type: ignore[return-value]


# What expect() says a schedule must be.
A_SCHEDULE = "a pipeplan.Schedule (generate(name, problem), solve(problem).schedule, or Schedule.from_lists)"


def _is_int(value: object) -> bool:
    """Whether ``value`` is a whole-number type (an int first: the abstract check costs a second a million ops)."""
    return type(value) is int or isinstance(value, numbers.Integral)


def check_complete(problem: Problem, schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` unless every op of ``problem`` appears exactly once, on its own device."""
    expect("problem", problem, Problem, A_PROBLEM)
    expect("schedule", schedule, Schedule, A_SCHEDULE, ScheduleError)
    if len(schedule.orders) != problem.num_devices:
        raise ScheduleError(
            f"schedule {schedule.name!r} has {len(schedule.orders)} device orders, expected {problem.num_devices}"
        )
    valid_kinds = problem.kinds
    stages = range(problem.num_model_stages)
    chunk = [problem.chunk_of(stage) for stage in stages]
    device_of = [problem.device_of(stage) for stage in stages]
    seen = bytearray(problem.num_op_numbers)  # by op number: whether an earlier position holds that op
    number = problem.op_number
    repeated: list[Op] = []
    for device, order in enumerate(schedule.orders):
        for position, op in enumerate(order):
            if not isinstance(op, Op):
                raise ScheduleError(f"schedule {schedule.name!r} holds {shown(op, 40)} at position {position} of "
                                    f"device {device}, not an Op; make ops with problem.op(OpKind.F, stage, "
                                    "microbatch)")
            if not isinstance(op.kind, OpKind):
                raise ScheduleError(f"schedule {schedule.name!r} holds an op of kind {shown(op.kind, 40)} at position "
                                    f"{position} of device {device}; a kind is OpKind.F, OpKind.B or OpKind.W (make "
                                    "ops with problem.op(OpKind.F, stage, microbatch))")
            if not (_is_int(op.stage) and _is_int(op.microbatch)):
                raise ScheduleError(f"schedule {schedule.name!r} has op {op.label}, whose stage and microbatch must "
                                    f"be ints (got {type(op.stage).__name__} and {type(op.microbatch).__name__})")
            if not (0 <= op.stage < problem.num_model_stages and 0 <= op.microbatch < problem.num_microbatches):
                raise ScheduleError(f"schedule {schedule.name!r} has op {op.label}, which is not in the problem")
            if op.kind not in valid_kinds:
                raise ScheduleError(
                    f"schedule {schedule.name!r} has op {op.label}, but this problem has no {op.kind.value} ops"
                )
            if op.chunk != chunk[op.stage]:
                raise ScheduleError(
                    f"schedule {schedule.name!r} gives {op.label} chunk {op.chunk}, but stage {op.stage} is chunk "
                    f"{chunk[op.stage]} of its device"
                )
            if device_of[op.stage] != device:
                raise ScheduleError(
                    f"schedule {schedule.name!r} runs {op.label} on device {device}, but stage {op.stage} lives "
                    f"on device {device_of[op.stage]}"
                )
            n = number(op)
            if seen[n]:
                repeated.append(op)
            seen[n] = 1
    if repeated:
        twice = sorted(set(repeated), key=lambda op: op.label)[:10]
        raise ScheduleError(lambda w: f"schedule {schedule.name!r} repeats ops: {', '.join(map(w.op, twice))}")
    expected = problem.num_model_stages * problem.num_microbatches * len(problem.kinds)
    if sum(seen) != expected:
        missing = [op for op in problem.all_ops() if not seen[number(op)]]
        more = ", ..." if len(missing) > 10 else ""
        raise ScheduleError(lambda w: f"schedule {schedule.name!r} is missing {counted(len(missing), 'op')}: "
                                      f"{', '.join(map(w.op, missing[:10]))}{more}")
