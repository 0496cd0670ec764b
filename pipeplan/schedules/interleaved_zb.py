"""Interleaved zero bubble: 1F1B over chunk-ops in loop placement with the weight gradients held back.

This is the schedule ``torch.distributed.pipelining`` ships as ``ScheduleInterleavedZeroBubble`` (the Zero Bubble
paper's ZB-1P idea spread over v = num_chunks >= 2 chunks per device). It runs the chunk-ops of interleaved 1F1B
(:mod:`pipeplan.schedules.interleaved`: groups of microbatches, each group chunk by chunk, backwards with the chunk
reversed) but:

- rank r warms up with min((v - 1)·G + (P - 1 - r), N·v) forwards, G the size of the first group: one forward
  per hop to the last device instead of interleaved 1F1B's two, because an input-gradient pass (B) is shorter
  than a full backward;
- then for each backward k = 0, 1, ...: the next forward (if any remains), B of chunk-op k and, once k >= r, the
  oldest W still owed; after the last B the owed Ws in order. Rank r thus holds back r weight gradients to fill
  the bubble while the input gradients travel up the pipeline, as ZB-H1 does with one chunk (with v = 1 this is
  exactly ZB-H1, which is why this generator asks for 2+ chunks).

Torch accepts N only when it is a multiple of its number of groups, max(1, floor(N / P)); then the groups are
equal and this is torch's order. Any other N goes in the uneven groups of interleaved 1F1B (larger first).

Needs a split backward. The budget is not adapted: when the peak is above it, the metrics report the schedule
infeasible.
"""

from __future__ import annotations

from collections import deque

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_chunks
from pipeplan.schedules.interleaved import chunk_table, group_sizes


def warmup_counts(num_stages: int, num_microbatches: int, num_chunks: int) -> list[int]:
    """Warm-up forward chunk-ops per rank: (v - 1)·G + (P - 1 - r), capped at N·v (G: first group's size)."""
    first_group = group_sizes(num_stages, num_microbatches)[0]
    total = num_microbatches * num_chunks
    return [min((num_chunks - 1) * first_group + num_stages - 1 - r, total) for r in range(num_stages)]


@register("interleaved-zb")
def interleaved_zero_bubble(problem: Problem) -> Schedule:
    """Interleaved zero bubble over ``num_chunks`` >= 2 chunks per device in loop placement (split backward)."""
    require_chunks(problem, "interleaved-zb", "loop", exactly_two=False, split_backward=True)
    p, v = problem.num_devices, problem.num_chunks
    table = chunk_table(p, problem.num_microbatches, v)
    total = len(table)
    orders: list[list[Op]] = []
    for rank, warmup in enumerate(warmup_counts(p, problem.num_microbatches, v)):

        def op(kind: OpKind, k: int, reverse: bool, rank: int = rank) -> Op:
            m, c = table[k]
            chunk = v - 1 - c if reverse else c
            return problem.op(kind, chunk * p + rank, m)

        order = [op(OpKind.F, k, reverse=False) for k in range(warmup)]
        owed_w: deque[Op] = deque()  # Ws whose B has run, oldest first
        for k in range(total):
            if warmup + k < total:
                order.append(op(OpKind.F, warmup + k, reverse=False))
            order.append(op(OpKind.B, k, reverse=True))
            owed_w.append(op(OpKind.W, k, reverse=True))
            if k >= rank:
                order.append(owed_w.popleft())
        order.extend(owed_w)
        orders.append(order)
    return Schedule.from_lists("interleaved-zb", orders)
