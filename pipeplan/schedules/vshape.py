"""ZB-V: the zero-bubble schedule over a V placement (Qi et al., 2024), two chunks per device.

Device r holds chunk 0 = model stage r and chunk 1 = model stage 2P - 1 - r, so a microbatch's forward goes down
the devices on chunk 0 and back up on chunk 1, and its loss is on device 0. Chunk-ops are written F0, B1, ... for
(kind, chunk); each chunk's forwards and backwards go in microbatch order, and a W is always the oldest W its chunk
still owes. Rank r runs, with n = max(N, 2P - 1):

1. warm-up: 2(P - r) - 1 times F0, then r times (F1, F0), then P - r times (F1, B1, W1);
2. steady state, until every forward has run: F0 (if any is left), B0, W0, F1 (if any is left), B1, W1;
3. cool-down: r times (B0, B1) holding their Ws back, P - r times (B0, W0), then the held Ws of chunk 1 and then
   those of chunk 0: the Ws fill the gaps while the last input gradients travel down the pipeline.

With F = B = W per chunk and no comm every step of the warm-up meets its inputs just in time (rank r's first F1 at
2P - 1 - r, its first B1 at 2P + r), so only the fill and the drain idle. The warm-up leaves 2P - 1
chunk-activations live and the steady state never adds to that but one at a time: the peak is 2P chunk-activations
on every rank, i.e. 1F1B's P·activation when the device's activation is split evenly over its two chunks.

When N < 2P - 1 the order is built for n = 2P - 1 microbatches and the ops of microbatches N .. n - 1 are dropped.
Dropping whole microbatches cannot create a deadlock (every op of a kept microbatch depends only on ops of the
same microbatch, and the relative order of kept ops is unchanged); it can only lower the peak.

The budget is not adapted: when the peak is above it, the metrics report the schedule infeasible.
"""

from __future__ import annotations

from collections import deque

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_chunks


class _RankOrder:
    """Builds one rank's order chunk-op by chunk-op, tracking per chunk the next F, the next B and owed Ws."""

    def __init__(self, problem: Problem, rank: int, num_microbatches: int) -> None:
        self.problem = problem
        p = problem.num_devices
        self.stages = (rank, 2 * p - 1 - rank)  # model stage of chunk 0 and chunk 1
        self.num_microbatches = num_microbatches  # microbatches planned for, including dropped padding
        self.next_forward = [0, 0]
        self.next_backward = [0, 0]
        self.owed_w: tuple[deque[int], deque[int]] = (deque(), deque())  # per chunk, oldest first
        self.order: list[Op] = []

    def _emit(self, kind: OpKind, chunk: int, microbatch: int) -> None:
        if microbatch < self.problem.num_microbatches:  # padding microbatches are dropped
            self.order.append(self.problem.op(kind, self.stages[chunk], microbatch))

    def forwards_left(self, chunk: int) -> bool:
        return self.next_forward[chunk] < self.num_microbatches

    def forward(self, chunk: int) -> None:
        self._emit(OpKind.F, chunk, self.next_forward[chunk])
        self.next_forward[chunk] += 1

    def backward(self, chunk: int, with_w: bool) -> None:
        """The next B of ``chunk``; with ``with_w`` it is followed by the oldest W the chunk owes."""
        microbatch = self.next_backward[chunk]
        assert microbatch < self.next_forward[chunk], "a backward before its forward"
        self._emit(OpKind.B, chunk, microbatch)
        self.next_backward[chunk] += 1
        self.owed_w[chunk].append(microbatch)
        if with_w:
            self.weight(chunk)

    def weight(self, chunk: int) -> None:
        self._emit(OpKind.W, chunk, self.owed_w[chunk].popleft())

    def all_weights(self, chunk: int) -> None:
        while self.owed_w[chunk]:
            self.weight(chunk)


def rank_order(problem: Problem, rank: int) -> list[Op]:
    """Rank ``rank``'s ZB-V order (see the module docstring for the rule)."""
    p = problem.num_devices
    n = max(problem.num_microbatches, 2 * p - 1)
    build = _RankOrder(problem, rank, n)
    for _ in range(2 * (p - rank) - 1):
        build.forward(0)
    for _ in range(rank):
        build.forward(1)
        build.forward(0)
    for _ in range(p - rank):
        build.forward(1)
        build.backward(1, with_w=True)
    while build.forwards_left(0) or build.forwards_left(1):
        if build.forwards_left(0):
            build.forward(0)
        build.backward(0, with_w=True)
        if build.forwards_left(1):
            build.forward(1)
        build.backward(1, with_w=True)
    for _ in range(rank):
        build.backward(0, with_w=False)
        build.backward(1, with_w=False)
    for _ in range(p - rank):
        build.backward(0, with_w=True)
    build.all_weights(1)
    build.all_weights(0)
    assert build.next_backward == [n, n], "every backward planned"
    return build.order


@register("zb-v")
def zb_v(problem: Problem) -> Schedule:
    """ZB-V: two chunks per device in V placement, split backward; peak P activations, near-zero bubble."""
    require_chunks(problem, "zb-v")
    return Schedule.from_lists("zb-v", [rank_order(problem, r) for r in range(problem.num_devices)])
