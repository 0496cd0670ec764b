"""Interleaved 1F1B: Megatron-LM's virtual pipeline (Narayanan et al., 2021).

Each device holds v = num_chunks model stages in loop placement (model stage c·P + d on device d), so a
microbatch loops v times around the devices. Every device runs N·v forward and N·v backward chunk-ops, numbered
k = 0 .. N·v - 1 in Megatron's order:

- the microbatches are cut into consecutive groups; a group runs chunk 0 for each of its microbatches, then chunk
  1, and so on. Forward k is the (microbatch, chunk) of entry k of that table; backward k is the same entry with
  the chunk reversed (v - 1 - chunk), so backwards start from the last model stage;
- rank r warms up with min((P - r - 1)·2 + (v - 1)·G, N·v) forwards, G the size of the first group, then
  alternates forward k + warm-up and backward k (1F1B over chunk-ops), then runs the remaining backwards. With a
  split backward each B is followed directly by its W.

Megatron uses groups of exactly P and so requires N to be a multiple of P; then this is Megatron's schedule. Here
any N works: the microbatches go in floor(N / P) groups (one group when N < P) as even as possible, the larger
groups first, so every group but a lone one for N < P holds at least P microbatches and no chunk waits for the
loop to come round. Deadlock-freedom depends only on the orders; the tests check it on a wide grid.

Uniform stages, no comm, N >= P (F, B, W the device's totals): makespan = N(F+B+W) + (P-1)(F+B)/v, i.e. a
bubble of (P-1)/(v·N) of the ideal time when the backward is not split. Rank 0 peaks at
min((v-1)·G + 2P - 1, N·v) chunk-activations of activation / v: P·(1 + (P-1)/(P·v)) activations for G = P,
slightly more when N is not a multiple of P (G up to 2P - 1). The budget is not adapted: when the peak is above
it, the metrics report the schedule infeasible.
"""

from __future__ import annotations

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_chunks


def group_sizes(num_stages: int, num_microbatches: int) -> list[int]:
    """Microbatches per group: floor(N / P) groups (at least one) as even as possible, larger groups first."""
    groups = max(1, num_microbatches // num_stages)
    size, extra = divmod(num_microbatches, groups)
    return [size + 1 if i < extra else size for i in range(groups)]


def chunk_table(num_stages: int, num_microbatches: int, num_chunks: int,
                sizes: list[int] | None = None) -> list[tuple[int, int]]:
    """The forward order of (microbatch, chunk) on every device: group by group, chunk by chunk. The groups'
    sizes are :func:`group_sizes` unless given (they must add up to the number of microbatches)."""
    if sizes is None:
        sizes = group_sizes(num_stages, num_microbatches)
    if sum(sizes) != num_microbatches or min(sizes) < 1:
        raise ValueError(f"group sizes {sizes} do not split {num_microbatches} microbatches")
    table: list[tuple[int, int]] = []
    first = 0
    for size in sizes:
        table.extend((m, c) for c in range(num_chunks) for m in range(first, first + size))
        first += size
    return table


def warmup_counts(num_stages: int, num_microbatches: int, num_chunks: int) -> list[int]:
    """Warm-up forward chunk-ops per rank: (P - r - 1)·2 + (v - 1)·G, capped at N·v (G: first group's size)."""
    first_group = group_sizes(num_stages, num_microbatches)[0]
    total = num_microbatches * num_chunks
    return [min((num_stages - r - 1) * 2 + (num_chunks - 1) * first_group, total) for r in range(num_stages)]


@register("interleaved-1f1b")
def interleaved_one_f_one_b(problem: Problem) -> Schedule:
    """Interleaved 1F1B over ``num_chunks`` >= 2 chunks per device in loop placement, for any N."""
    require_chunks(problem, "interleaved-1f1b")
    p, v = problem.num_devices, problem.num_chunks
    table = chunk_table(p, problem.num_microbatches, v)
    total = len(table)
    orders: list[list[Op]] = []
    for rank, warmup in enumerate(warmup_counts(p, problem.num_microbatches, v)):

        def forward(k: int, rank: int = rank) -> Op:
            m, c = table[k]
            return problem.op(OpKind.F, c * p + rank, m)

        def backward(k: int, rank: int = rank) -> list[Op]:
            m, c = table[k]
            stage = (v - 1 - c) * p + rank
            if problem.split_backward:
                return [problem.op(OpKind.B, stage, m), problem.op(OpKind.W, stage, m)]
            return [problem.op(OpKind.B, stage, m)]

        order = [forward(k) for k in range(warmup)]
        for k in range(total):
            if warmup + k < total:
                order.append(forward(warmup + k))
            order.extend(backward(k))
        orders.append(order)
    return Schedule.from_lists("interleaved-1f1b", orders)
