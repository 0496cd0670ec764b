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
infeasible. For budgets below its peak, :func:`smaller_groups` gives the same rule over groups of fewer than P
microbatches, as warm starts for the optimizer.
"""

from __future__ import annotations

import math
import time
from collections import deque

from pipeplan.metrics import fits_budget
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.schedules import register, require_chunks
from pipeplan.schedules.interleaved import chunk_table, group_sizes
from pipeplan.simulate import simulate


def warmup_counts(num_stages: int, num_microbatches: int, num_chunks: int,
                  first_group: int | None = None) -> list[int]:
    """Warm-up forward chunk-ops per rank: (v - 1)·G + (P - 1 - r), capped at N·v (G: the first group's size,
    :func:`~pipeplan.schedules.interleaved.group_sizes`' unless given)."""
    if first_group is None:
        first_group = group_sizes(num_stages, num_microbatches)[0]
    total = num_microbatches * num_chunks
    return [min((num_chunks - 1) * first_group + num_stages - 1 - r, total) for r in range(num_stages)]


@register("interleaved-zb")
def interleaved_zero_bubble(problem: Problem) -> Schedule:
    """Interleaved zero bubble over ``num_chunks`` >= 2 chunks per device in loop placement (split backward)."""
    require_chunks(problem, "interleaved-zb")
    p, n, v = problem.num_devices, problem.num_microbatches, problem.num_chunks
    return Schedule.from_lists("interleaved-zb", _orders(problem, chunk_table(p, n, v), None))


def smaller_groups(problem: Problem, deadline: float = math.inf) -> list[Schedule]:
    """Interleaved zero bubble with smaller groups than the registered order's: less memory, a little more
    bubble.

    Rank 0 warms up with (v - 1)·g + P - 1 forwards instead of (v - 1)·G + P - 1 (G the registered order's
    first group, P or a little more; N when N < P), so a budget between about 3/4 and all of the registered
    schedule's peak still fits one (on the benchmark family at P = 8, N = 16, 2 chunks, 6 activations: g = 4
    gives 50.14, where the best named schedule that fits is GPipe's 68.22). Group sizes g run from G - 1 down to
    ceil((P - 1) / 2): below that, rank 0's warm-up reaches the second chunk of a later group, whose forward
    waits on the last rank, which waits on rank 0's first B, a deadlock. Orders that still deadlock (uneven last
    groups can) are left out: each is replayed once, unless rank 0's warm-up forwards (and the one before its
    first B, all live at once) already overflow rank 0's budget. None without a budget or when the registered
    order's rank 0 fits it (a shortcut: another rank may still overflow its budget there). Not registered
    (frameworks do not ship it); the optimizer takes these as warm starts. Stops early at ``deadline``
    (``time.monotonic()``).
    """
    if (problem.num_chunks < 2 or problem.placement != "loop" or not problem.split_backward
            or problem.num_microbatches < 2):
        return []
    p, n, v = problem.num_devices, problem.num_microbatches, problem.num_chunks
    budget = problem.budget
    if budget is None:
        return []
    if fits_budget(_held_by_rank_0(problem, chunk_table(p, n, v), None), budget[0]):  # as the metrics judge a peak
        return []
    found = []
    for g in range(group_sizes(p, n)[0] - 1, max(1, math.ceil((p - 1) / 2)) - 1, -1):
        if time.monotonic() >= deadline:
            break
        sizes = [g] * (n // g) + ([n % g] if n % g else [])
        table = chunk_table(p, n, v, sizes)
        if not fits_budget(_held_by_rank_0(problem, table, g), budget[0]):
            continue
        schedule = Schedule.from_lists(f"interleaved-zb-g{g}", _orders(problem, table, g))
        try:
            simulate(problem, schedule)
        except ScheduleError:
            continue
        found.append(schedule)
    return found


def _held_by_rank_0(problem: Problem, table: list[tuple[int, int]], first_group: int | None) -> float:
    """What rank 0 holds just before its first B: it runs its warm-up forwards and one more first, and none of
    them is released before a B."""
    p, n, v = problem.num_devices, problem.num_microbatches, problem.num_chunks
    return sum(problem.activation[c * p] for _, c in table[:warmup_counts(p, n, v, first_group)[0] + 1])


def _orders(problem: Problem, table: list[tuple[int, int]], first_group: int | None) -> list[list[Op]]:
    """Every rank's order over the forward ``table`` (see the module's docstring), with the warm-up of
    :func:`warmup_counts` for that first group's size."""
    p, v = problem.num_devices, problem.num_chunks
    total = len(table)
    orders: list[list[Op]] = []
    for rank, warmup in enumerate(warmup_counts(p, problem.num_microbatches, v, first_group)):

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
    return orders
