"""1F1B (PipeDream-Flush): a short warm-up of forwards, then one forward and one backward in turn.

Rank r runs min(P - r - 1, N) warm-up forwards, then alternates one forward and one backward until the forwards
run out, then runs the remaining backwards; with a split backward each B is followed directly by its W. So rank r
holds at most min(P - r, N) activations. When the budget admits fewer in-flight microbatches, the warm-up
shrinks to fit (a memory-limited 1F1B: slower, but feasible).

Uniform stages, no comm, no binding budget: makespan (N + P - 1)(F + B) for every N >= 1, peak min(P, N)
activations on rank 0 (:mod:`pipeplan.formulas`).
"""

from __future__ import annotations

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_one_chunk


def warmup_counts(problem: Problem) -> list[int]:
    """Warm-up forwards per rank: min(P - r - 1, N), shrunk to fit the budget, never increasing with r.

    Rank r + 1 may not warm up more than rank r: its first backward needs the forward of its last warm-up
    microbatch, which rank r only sends before its own first backward if it warmed up at least as far.
    """
    counts: list[int] = []
    for rank in range(problem.num_devices):
        count = min(problem.num_devices - rank - 1, problem.num_microbatches)
        in_flight = problem.max_in_flight(rank)
        if in_flight is not None:
            count = min(count, in_flight - 1)
        if counts:
            count = min(count, counts[-1])
        counts.append(count)
    return counts


@register("1f1b")
def one_f_one_b(problem: Problem) -> Schedule:
    """1F1B with the warm-up of :func:`warmup_counts`; with a split backward each B is followed by its W."""
    require_one_chunk(problem, "1f1b")
    n = problem.num_microbatches
    orders: list[list[Op]] = []
    for rank, warmup in enumerate(warmup_counts(problem)):
        order: list[Op] = [problem.op(OpKind.F, rank, m) for m in range(warmup)]
        next_forward = warmup
        for m in range(n):
            if next_forward < n:
                order.append(problem.op(OpKind.F, rank, next_forward))
                next_forward += 1
            order.append(problem.op(OpKind.B, rank, m))
            if problem.split_backward:
                order.append(problem.op(OpKind.W, rank, m))
        orders.append(order)
    return Schedule.from_lists("1f1b", orders)
