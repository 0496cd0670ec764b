"""ZB-H1 and ZB-H2 (Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024), built exactly as the paper
specifies them.

Both need a split backward (B = input gradient, W = weight gradient) and one chunk per device. Rank r runs
``warmup[r]`` forwards, then steps i = 0, 1, ...: a forward if any remain, the B of microbatch i and, once
``i >= w_delay[r]``, the oldest pending W; after the last B, the remaining Ws in microbatch order.

- ZB-H1: warmup = min(P - r - 1, N), w_delay = r. Rank r peaks at (P - r)·activation + r·weight_activation (N
  large enough), so at most P·activation, on rank 0. Uniform stages: stage span N(F+B+W) + (P-1)(F+B-W+4C).
- ZB-H2: warmup = min(2(P - r - 1), N), w_delay = 2r. Peak at most (2P - 1)·activation. Uniform stages: stage
  span N(F+B+W) + (P-1)(F+B+2C-2W).

The two stage spans (:mod:`pipeplan.formulas`) are exact in the paper's regime, W <= min(F, B) and 2C <= W, for
N > P (ZB-H1) and N >= 2P - 1 (ZB-H2); outside it the replay is the truth.

The budget is not adapted: these are the published constructions, and when their peak is above the budget the
metrics report the schedule infeasible rather than this module changing it. The warm-up never increases with the
rank, which keeps every order deadlock-free (rank r + 1 needs, before its first B, only forwards that rank r sends
before its own first B).
"""

from __future__ import annotations

from collections import deque

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import NotApplicable, Schedule
from pipeplan.schedules import register, require_one_chunk


def _check_applicable(problem: Problem, name: str) -> None:
    if not problem.split_backward:
        raise NotApplicable(
            f"{name} needs a split backward (B and W); set costs.backward_weight > 0"
        )
    require_one_chunk(problem, name)


def zero_bubble_schedule(problem: Problem, name: str, warmups: list[int], w_delays: list[int]) -> Schedule:
    """The zero-bubble order with ``warmups[r]`` warm-up forwards and Ws starting at step ``w_delays[r]``.

    ``warmups`` must not increase with the rank (else the order can deadlock); each is capped at N here.
    """
    assert all(a >= b for a, b in zip(warmups, warmups[1:])), "warm-up must not increase with the rank"
    n = problem.num_microbatches
    orders: list[list[Op]] = []
    for rank in range(problem.num_devices):
        warmup = min(warmups[rank], n)
        order = [problem.op(OpKind.F, rank, m) for m in range(warmup)]
        next_forward = warmup
        pending_w: deque[int] = deque()  # microbatches whose B ran and whose W has not, oldest first
        for step in range(n):
            if next_forward < n:
                order.append(problem.op(OpKind.F, rank, next_forward))
                next_forward += 1
            order.append(problem.op(OpKind.B, rank, step))
            pending_w.append(step)
            if step >= w_delays[rank]:
                order.append(problem.op(OpKind.W, rank, pending_w.popleft()))
        order.extend(problem.op(OpKind.W, rank, m) for m in pending_w)
        orders.append(order)
    return Schedule.from_lists(name, orders)


@register("zb-h1")
def zb_h1(problem: Problem) -> Schedule:
    """ZB-H1: 1F1B's warm-up, W of rank r held back for r steps; peak at most P activations."""
    _check_applicable(problem, "zb-h1")
    p = problem.num_devices
    warmups = [p - r - 1 for r in range(p)]
    return zero_bubble_schedule(problem, "zb-h1", warmups, list(range(p)))


@register("zb-h2")
def zb_h2(problem: Problem) -> Schedule:
    """ZB-H2: twice 1F1B's warm-up, W of rank r held back for 2r steps; peak at most 2P - 1 activations."""
    _check_applicable(problem, "zb-h2")
    p = problem.num_devices
    warmups = [2 * (p - r - 1) for r in range(p)]
    return zero_bubble_schedule(problem, "zb-h2", warmups, [2 * r for r in range(p)])
