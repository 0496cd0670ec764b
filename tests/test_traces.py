"""Full-trace tests: every op's start and end on tiny cases, worked out by hand (not by the simulator).

The expected traces below were computed on paper from the timing rules (``Problem.dependencies``): an op
starts when its device is free and its dependency has ended (plus ``comm`` between devices). Costs are
deliberately unequal (F != B, split B != W) so that a mix-up of F and B times cannot go unnoticed.

Each expected trace is, per device in run order, ``(kind, microbatch, start, end)``.
"""

from __future__ import annotations

import pickle

import pytest
from invariants import assert_valid

from pipeplan import (
    Op,
    OpKind,
    Problem,
    Schedule,
    ScheduleError,
    compute_metrics,
    generate,
    memory_timeline,
    simulate,
)
from pipeplan.schedules.gpipe import gpipe_with_flush_size

Trace = list[list[tuple[str, int, float, float]]]


def trace_of(problem: Problem, schedule: Schedule) -> Trace:
    """The replayed trace in the shape of the expected ones (and check each op sits on its own stage)."""
    timeline = simulate(problem, schedule)
    trace: Trace = [[] for _ in range(problem.num_devices)]
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        assert op.stage == device
        trace[device].append((op.kind.value, op.microbatch, start, end))
    return trace


# P = 3, N = 4, F = 1, B = 2, no comm.
UNSPLIT = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=2.0)
UNSPLIT_COMM = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=2.0, comm=0.5)
# P = 3, N = 4, F = 1, B = 1.5, W = 0.5.
SPLIT = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=1.5, backward_weight=0.5,
                activation=1.0, weight_activation=0.25)
SPLIT_COMM = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=1.5, backward_weight=0.5, comm=0.5,
                     activation=1.0, weight_activation=0.25)

GPIPE_UNSPLIT: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("F", 3, 3, 4),
     ("B", 0, 10, 12), ("B", 1, 12, 14), ("B", 2, 14, 16), ("B", 3, 16, 18)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("F", 2, 3, 4), ("F", 3, 4, 5),
     ("B", 0, 8, 10), ("B", 1, 10, 12), ("B", 2, 12, 14), ("B", 3, 14, 16)],
    [("F", 0, 2, 3), ("F", 1, 3, 4), ("F", 2, 4, 5), ("F", 3, 5, 6),
     ("B", 0, 6, 8), ("B", 1, 8, 10), ("B", 2, 10, 12), ("B", 3, 12, 14)],
]

GPIPE_UNSPLIT_COMM: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("F", 3, 3, 4),
     ("B", 0, 12, 14), ("B", 1, 14, 16), ("B", 2, 16, 18), ("B", 3, 18, 20)],
    [("F", 0, 1.5, 2.5), ("F", 1, 2.5, 3.5), ("F", 2, 3.5, 4.5), ("F", 3, 4.5, 5.5),
     ("B", 0, 9.5, 11.5), ("B", 1, 11.5, 13.5), ("B", 2, 13.5, 15.5), ("B", 3, 15.5, 17.5)],
    [("F", 0, 3, 4), ("F", 1, 4, 5), ("F", 2, 5, 6), ("F", 3, 6, 7),
     ("B", 0, 7, 9), ("B", 1, 9, 11), ("B", 2, 11, 13), ("B", 3, 13, 15)],
]

# Budget of 2 activations: two flushes of 2 microbatches, each filling and draining the pipeline.
GPIPE_TWO_FLUSHES: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 8, 10), ("B", 1, 10, 12),
     ("F", 2, 12, 13), ("F", 3, 13, 14), ("B", 2, 20, 22), ("B", 3, 22, 24)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("B", 0, 6, 8), ("B", 1, 8, 10),
     ("F", 2, 13, 14), ("F", 3, 14, 15), ("B", 2, 18, 20), ("B", 3, 20, 22)],
    [("F", 0, 2, 3), ("F", 1, 3, 4), ("B", 0, 4, 6), ("B", 1, 6, 8),
     ("F", 2, 14, 15), ("F", 3, 15, 16), ("B", 2, 16, 18), ("B", 3, 18, 20)],
]

GPIPE_SPLIT: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("F", 3, 3, 4),
     ("B", 0, 9, 10.5), ("W", 0, 10.5, 11), ("B", 1, 11, 12.5), ("W", 1, 12.5, 13),
     ("B", 2, 13, 14.5), ("W", 2, 14.5, 15), ("B", 3, 15, 16.5), ("W", 3, 16.5, 17)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("F", 2, 3, 4), ("F", 3, 4, 5),
     ("B", 0, 7.5, 9), ("W", 0, 9, 9.5), ("B", 1, 9.5, 11), ("W", 1, 11, 11.5),
     ("B", 2, 11.5, 13), ("W", 2, 13, 13.5), ("B", 3, 13.5, 15), ("W", 3, 15, 15.5)],
    [("F", 0, 2, 3), ("F", 1, 3, 4), ("F", 2, 4, 5), ("F", 3, 5, 6),
     ("B", 0, 6, 7.5), ("W", 0, 7.5, 8), ("B", 1, 8, 9.5), ("W", 1, 9.5, 10),
     ("B", 2, 10, 11.5), ("W", 2, 11.5, 12), ("B", 3, 12, 13.5), ("W", 3, 13.5, 14)],
]

# 1F1B warm-ups: rank 0 runs 2 forwards first, rank 1 one, rank 2 none.
ONE_F_ONE_B_UNSPLIT: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("B", 0, 7, 9),
     ("F", 3, 9, 10), ("B", 1, 10, 12), ("B", 2, 13, 15), ("B", 3, 16, 18)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("B", 0, 5, 7), ("F", 2, 7, 8),
     ("B", 1, 8, 10), ("F", 3, 10, 11), ("B", 2, 11, 13), ("B", 3, 14, 16)],
    [("F", 0, 2, 3), ("B", 0, 3, 5), ("F", 1, 5, 6), ("B", 1, 6, 8),
     ("F", 2, 8, 9), ("B", 2, 9, 11), ("F", 3, 11, 12), ("B", 3, 12, 14)],
]

ONE_F_ONE_B_UNSPLIT_COMM: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("B", 0, 9, 11),
     ("F", 3, 11, 12), ("B", 1, 12, 14), ("B", 2, 16, 18), ("B", 3, 20, 22)],
    [("F", 0, 1.5, 2.5), ("F", 1, 2.5, 3.5), ("B", 0, 6.5, 8.5), ("F", 2, 8.5, 9.5),
     ("B", 1, 9.5, 11.5), ("F", 3, 12.5, 13.5), ("B", 2, 13.5, 15.5), ("B", 3, 17.5, 19.5)],
    [("F", 0, 3, 4), ("B", 0, 4, 6), ("F", 1, 6, 7), ("B", 1, 7, 9),
     ("F", 2, 10, 11), ("B", 2, 11, 13), ("F", 3, 14, 15), ("B", 3, 15, 17)],
]

ONE_F_ONE_B_SPLIT: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("B", 0, 6, 7.5), ("W", 0, 7.5, 8),
     ("F", 3, 8, 9), ("B", 1, 9, 10.5), ("W", 1, 10.5, 11), ("B", 2, 12, 13.5), ("W", 2, 13.5, 14),
     ("B", 3, 15, 16.5), ("W", 3, 16.5, 17)],
    [("F", 0, 1, 2), ("F", 1, 2, 3), ("B", 0, 4.5, 6), ("W", 0, 6, 6.5), ("F", 2, 6.5, 7.5),
     ("B", 1, 7.5, 9), ("W", 1, 9, 9.5), ("F", 3, 9.5, 10.5), ("B", 2, 10.5, 12), ("W", 2, 12, 12.5),
     ("B", 3, 13.5, 15), ("W", 3, 15, 15.5)],
    [("F", 0, 2, 3), ("B", 0, 3, 4.5), ("W", 0, 4.5, 5), ("F", 1, 5, 6), ("B", 1, 6, 7.5), ("W", 1, 7.5, 8),
     ("F", 2, 8, 9), ("B", 2, 9, 10.5), ("W", 2, 10.5, 11), ("F", 3, 11, 12), ("B", 3, 12, 13.5),
     ("W", 3, 13.5, 14)],
]

ONE_F_ONE_B_SPLIT_COMM: Trace = [
    [("F", 0, 0, 1), ("F", 1, 1, 2), ("F", 2, 2, 3), ("B", 0, 8, 9.5), ("W", 0, 9.5, 10),
     ("F", 3, 10, 11), ("B", 1, 11, 12.5), ("W", 1, 12.5, 13), ("B", 2, 14.5, 16), ("W", 2, 16, 16.5),
     ("B", 3, 18, 19.5), ("W", 3, 19.5, 20)],
    [("F", 0, 1.5, 2.5), ("F", 1, 2.5, 3.5), ("B", 0, 6, 7.5), ("W", 0, 7.5, 8), ("F", 2, 8, 9),
     ("B", 1, 9, 10.5), ("W", 1, 10.5, 11), ("F", 3, 11.5, 12.5), ("B", 2, 12.5, 14), ("W", 2, 14, 14.5),
     ("B", 3, 16, 17.5), ("W", 3, 17.5, 18)],
    [("F", 0, 3, 4), ("B", 0, 4, 5.5), ("W", 0, 5.5, 6), ("F", 1, 6, 7), ("B", 1, 7, 8.5), ("W", 1, 8.5, 9),
     ("F", 2, 9.5, 10.5), ("B", 2, 10.5, 12), ("W", 2, 12, 12.5), ("F", 3, 13, 14), ("B", 3, 14, 15.5),
     ("W", 3, 15.5, 16)],
]


@pytest.mark.parametrize(
    ("name", "problem", "expected", "makespan"),
    [
        ("gpipe", UNSPLIT, GPIPE_UNSPLIT, 18),
        ("gpipe", UNSPLIT_COMM, GPIPE_UNSPLIT_COMM, 20),
        ("gpipe", SPLIT, GPIPE_SPLIT, 17),
        ("1f1b", UNSPLIT, ONE_F_ONE_B_UNSPLIT, 18),
        ("1f1b", UNSPLIT_COMM, ONE_F_ONE_B_UNSPLIT_COMM, 22),
        ("1f1b", SPLIT, ONE_F_ONE_B_SPLIT, 17),
        ("1f1b", SPLIT_COMM, ONE_F_ONE_B_SPLIT_COMM, 20),
    ],
    ids=["gpipe", "gpipe-comm", "gpipe-split", "1f1b", "1f1b-comm", "1f1b-split", "1f1b-split-comm"],
)
def test_full_trace(name: str, problem: Problem, expected: Trace, makespan: float) -> None:
    schedule = generate(name, problem)
    assert trace_of(problem, schedule) == expected
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert metrics.makespan == makespan
    assert_valid(problem, timeline, metrics)


def test_full_trace_gpipe_two_flushes_under_budget() -> None:
    problem = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=2.0, budget=2)
    schedule = generate("gpipe", problem)
    assert schedule.flushes == 2
    assert trace_of(problem, schedule) == GPIPE_TWO_FLUSHES
    metrics = compute_metrics(simulate(problem, schedule))
    assert metrics.feasible
    assert metrics.peak_memory_per_device == [2, 2, 2]


def test_metrics_of_a_hand_trace() -> None:
    """1F1B, P=3, N=4, F=1, B=2: makespan 18, 12 busy per device, and rank 0 spans all of it."""
    metrics = compute_metrics(simulate(UNSPLIT, generate("1f1b", UNSPLIT)))
    assert metrics.busy_per_device == [12, 12, 12]
    assert metrics.utilization == pytest.approx(36 / 54)
    assert metrics.bubble == pytest.approx(18 / 54)
    assert metrics.stage_span_per_device == [18, 15, 12]
    assert metrics.stage_span == 18
    assert metrics.peak_memory_per_device == [3, 2, 1]
    assert metrics.peak_memory == 3
    assert metrics.flushes == 1
    assert metrics.feasible


def test_memory_timeline_unsplit_release_before_allocation() -> None:
    """Device 0 of the 1F1B trace: B0 ends at 9 exactly when F3 starts; the release comes first, so no 4."""
    steps = memory_timeline(simulate(UNSPLIT, generate("1f1b", UNSPLIT)))
    assert steps[0] == [(0, 1), (1, 2), (2, 3), (9, 3), (12, 2), (15, 1), (18, 0)]
    # Device 2 frees each activation exactly when it allocates the next one: the level stays at 1.
    assert steps[2] == [(0, 0), (2, 1), (5, 1), (8, 1), (11, 1), (14, 0)]


def test_memory_timeline_split_releases_weight_part_at_w_end() -> None:
    """Device 2 of the split 1F1B trace: B releases 0.75 at its end, W the remaining 0.25 at its end."""
    steps = memory_timeline(simulate(SPLIT, generate("1f1b", SPLIT)))
    assert steps[2][:5] == [(0, 0), (2, 1), (4.5, 0.25), (5, 1.0), (7.5, 0.25)]
    assert steps[2][-1] == (14, 0)
    assert compute_metrics(simulate(SPLIT, generate("gpipe", SPLIT))).peak_memory_per_device == [4, 4, 4]


def _ops(problem: Problem, spec: str) -> list[Op]:
    """Ops from a compact spec: 'F0@1 B0@1' is F of microbatch 0 on stage 1, then its B."""
    ops = []
    for token in spec.split():
        head, stage = token.split("@")
        ops.append(problem.op(OpKind(head[0]), int(stage), int(head[1:])))
    return ops


def _schedule(problem: Problem, *devices: str) -> Schedule:
    return Schedule.from_lists("hand", [_ops(problem, spec) for spec in devices])


TWO = Problem.build(num_stages=2, num_microbatches=2, forward=1.0, backward=2.0)


def test_deadlock_backward_before_its_forward() -> None:
    """Device 0 starts with B0, which waits (through stage 1) for its own forward F0, later in its own order."""
    schedule = _schedule(TWO, "B0@0 F0@0 F1@0 B1@0", "F0@1 B0@1 F1@1 B1@1")
    with pytest.raises(ScheduleError) as info:
        simulate(TWO, schedule)
    message = str(info.value)
    assert "deadlock" in message
    assert "device 0 at B0@s0 (waits for B0@s1)" in message
    assert "device 1 at F0@s1 (waits for F0@s0)" in message


def test_deadlock_cyclic_wait_between_devices() -> None:
    """Device 0 waits for B0 from device 1, which first wants F1 that device 0 only sends after B0."""
    schedule = _schedule(TWO, "F0@0 B0@0 F1@0 B1@0", "F0@1 F1@1 B0@1 B1@1")
    with pytest.raises(ScheduleError) as info:
        simulate(TWO, schedule)
    message = str(info.value)
    assert "device 0 at B0@s0 (waits for B0@s1)" in message
    assert "device 1 at F1@s1 (waits for F1@s0)" in message


def test_a_schedule_error_can_be_reworded_and_pickled() -> None:
    """A caller names the ops its own way (the torch CSV importer: the file's cells) through a Wording, without
    parsing the message; a pickled error (from a worker process) keeps its message."""
    from pipeplan.schedule import Wording

    def short(op: Op) -> str:
        return f"{op.kind.value.lower()}{op.stage}.{op.microbatch}"

    wording = Wording(op=short, stuck=lambda device, op, waits: f"#{device}:{short(op)}<-{'+'.join(map(short, waits))}")
    with pytest.raises(ScheduleError) as info:
        simulate(TWO, _schedule(TWO, "F0@0 B0@0 F1@0 B1@0", "F0@1 F1@1 B0@1 B1@1"))
    assert info.value.reworded(wording) == "schedule 'hand' deadlocks: #0:b0.0<-b1.0; #1:f1.1<-f0.1"
    with pytest.raises(ScheduleError) as info:
        simulate(TWO, _schedule(TWO, "F0@0 B0@0 F1@0", "F0@1 B0@1 F1@1 B1@1"))
    assert str(info.value) == "schedule 'hand' is missing 1 op: B1@s0"
    assert info.value.reworded(wording) == "schedule 'hand' is missing 1 op: b0.1"
    with pytest.raises(ScheduleError) as info:
        simulate(TWO, _schedule(TWO, "F0@0 B0@0 F1@0 B1@0 B1@0", "F0@1 B0@1 F1@1 B1@1"))
    assert info.value.reworded(wording) == "schedule 'hand' repeats ops: b0.1"
    again = pickle.loads(pickle.dumps(info.value))
    assert isinstance(again, ScheduleError) and str(again) == str(info.value)
    assert ScheduleError("plain").reworded(wording) == "plain"


def test_a_valid_reordering_is_not_a_deadlock() -> None:
    """Stage 1 may run B1 before B0 (both forwards are in): the replay follows the given order."""
    schedule = _schedule(TWO, "F0@0 F1@0 B0@0 B1@0", "F0@1 F1@1 B1@1 B0@1")
    timeline = simulate(TWO, schedule)
    assert timeline.start_of(TWO.op(OpKind.B, 1, 1)) == 3
    assert timeline.start_of(TWO.op(OpKind.B, 1, 0)) == 5
    assert timeline.start_of(TWO.op(OpKind.B, 0, 0)) == 7
    assert timeline.start_of(TWO.op(OpKind.B, 0, 1)) == 9
    assert_valid(TWO, timeline, compute_metrics(timeline))


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (("F0@0 F1@0 B0@0", "F0@1 F1@1 B0@1 B1@1"), "missing 1 op: B1@s0"),
        (("F0@0 F1@0 B0@0 B1@0 F0@0", "F0@1 F1@1 B0@1 B1@1"), "repeats ops: F0@s0"),
        (("F0@0 F1@0 B0@0 B1@0 F0@1", "F1@1 B0@1 B1@1"), "runs F0@s1 on device 0"),
        (("F0@0 F1@0 F2@0 B0@0 B1@0", "F0@1 F1@1 B0@1 B1@1"), "F2@s0, which is not in the problem"),
        (("F0@0 F1@0 B0@0 B1@0 W0@0", "F0@1 F1@1 B0@1 B1@1"), "no W ops"),
        (("F0@0 F1@0 B0@0 B1@0",), "1 device orders, expected 2"),
    ],
    ids=["missing", "duplicate", "wrong-device", "foreign-microbatch", "w-without-split", "too-few-devices"],
)
def test_incomplete_schedules_are_rejected(devices: tuple[str, ...], message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        simulate(TWO, _schedule(TWO, *devices))


def test_memory_limited_1f1b_is_feasible_and_slower() -> None:
    """Budget 1 < P = 3: no warm-up at all, each microbatch goes down and back alone: N * P * (F + B)."""
    unlimited = compute_metrics(simulate(UNSPLIT, generate("1f1b", UNSPLIT)))
    limited_problem = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=2.0, budget=1)
    timeline = simulate(limited_problem, generate("1f1b", limited_problem))
    limited = compute_metrics(timeline)
    assert limited.feasible
    assert limited.peak_memory_per_device == [1, 1, 1]
    assert limited.makespan == 4 * 3 * (1 + 2)
    assert limited.makespan > unlimited.makespan
    assert_valid(limited_problem, timeline, limited)


def test_memory_limited_1f1b_on_the_seed_shape() -> None:
    """8 stages, 64 microbatches, room for 4 activations (plain 1F1B needs 8): feasible, slower than 213."""
    problem = Problem.build(num_stages=8, num_microbatches=64, forward=1.0, backward=2.0, budget=4)
    limited = compute_metrics(simulate(problem, generate("1f1b", problem)))
    assert limited.feasible
    assert limited.peak_memory == 4
    assert limited.makespan > (64 + 8 - 1) * 3


def test_schedule_over_the_budget_is_reported_infeasible() -> None:
    """A schedule over the budget is not an error: it is simulated and reported infeasible."""
    problem = Problem.build(num_stages=4, num_microbatches=8, budget=2)
    schedule = gpipe_with_flush_size(problem, 8)
    metrics = compute_metrics(simulate(problem, schedule))
    assert not metrics.feasible
    assert metrics.peak_memory == 8


def test_replay_is_deterministic() -> None:
    problem = Problem.build(num_stages=5, num_microbatches=9, forward=[1.0, 0.7, 1.3, 0.9, 1.1],
                      backward=[2.0, 1.1, 2.6, 1.4, 0.8], backward_weight=[0.5, 0.4, 0.3, 0.6, 0.2], comm=0.25,
                      activation=2.0, weight_activation=0.5)
    for name in ("gpipe", "1f1b"):
        first = simulate(problem, generate(name, problem))
        again = simulate(problem, generate(name, problem))
        assert (first.ops, first.device, first.start, first.end) == (again.ops, again.device, again.start, again.end)
        assert compute_metrics(first) == compute_metrics(again)
