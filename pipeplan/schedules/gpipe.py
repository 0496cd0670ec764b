"""GPipe: per flush, every forward, then every backward.

Under a budget the microbatches go in the fewest flushes the budget allows, all of one size but the last (the
least size that needs no more flushes); each flush fills and drains the pipeline, so a tight budget pays the
bubble once per flush.

Uniform stages, no comm, room for k microbatches: ceil(N / k) flushes, makespan (N + flushes (P-1)) (F+B) and a
peak of ceil(N / flushes) activations on every device (:mod:`pipeplan.formulas` gives it for flushes of at most k:
min(k, N)).
"""

from __future__ import annotations

import math

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register


def max_per_flush(problem: Problem) -> int:
    """The most microbatches one flush can hold within every device's budget (at least 1, at most N).

    A flush keeps all its microbatches' activations on every stage of a device until its backwards run.
    """
    budget = problem.budget
    limit = problem.num_microbatches
    if budget is None:
        return limit
    for device in range(problem.num_devices):
        per_microbatch = problem.footprint(device)
        if per_microbatch > 0:
            limit = min(limit, int(math.floor(budget[device] / per_microbatch + 1e-9)))
    return max(1, limit)


def gpipe_with_flush_size(problem: Problem, per_flush: int, name: str = "gpipe") -> Schedule:
    """GPipe with at most ``per_flush`` microbatches in each flush (the last flush may hold fewer).

    Within a flush each device runs its forwards stage by stage in model order, then its backwards in reverse
    model order, microbatches ascending; with a split backward each B is followed directly by its W.
    """
    assert per_flush >= 1
    n = problem.num_microbatches
    orders: list[list[Op]] = [[] for _ in range(problem.num_devices)]
    flushes = [range(lo, min(lo + per_flush, n)) for lo in range(0, n, per_flush)]
    for flush in flushes:
        for device in range(problem.num_devices):
            stages = problem.stages_on_device(device)
            for s in stages:
                orders[device].extend(problem.op(OpKind.F, s, m) for m in flush)
            for s in reversed(stages):
                for m in flush:
                    orders[device].append(problem.op(OpKind.B, s, m))
                    if problem.split_backward:
                        orders[device].append(problem.op(OpKind.W, s, m))
    return Schedule.from_lists(name, orders, flushes=len(flushes))


def even_per_flush(num_microbatches: int, room: int) -> int:
    """The flush size that spreads ``num_microbatches`` over the fewest flushes of at most ``room`` each as evenly
    as whole flushes of one size do: ceil(N / ceil(N / room)). With room for 5 of 16 microbatches, 4 flushes of 4
    instead of 5, 5, 5 and 1: the same makespan on uniform stages and less peak memory; with uneven stages the
    times differ (on 4 uneven stages with 2 chunks, 67.46 against 71.03: a test in tests/test_planner.py)."""
    return math.ceil(num_microbatches / math.ceil(num_microbatches / room))


@register("gpipe")
def gpipe(problem: Problem) -> Schedule:
    """GPipe in the fewest flushes that fit the budget, of even size (:func:`even_per_flush`)."""
    return gpipe_with_flush_size(problem, even_per_flush(problem.num_microbatches, max_per_flush(problem)))
