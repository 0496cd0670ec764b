"""DualPipeV: DeepSeek's DualPipe folded onto a V placement, two chunks per device (DeepSeek-V3 report, 2024).

This is the schedule ``torch.distributed.pipelining`` ships as ``ScheduleDualPipeV``. Device r holds chunk 0 =
model stage r and chunk 1 = model stage 2P - 1 - r (as in ZB-V), so the loss is on device 0. Chunk-ops are
written F0, B1, ... for (kind, chunk); each chunk's forwards and backwards go in microbatch order. A backward is
either *full* (its W runs right after it) or *input-only* (its W is owed and runs later, when the rule below says
"W": the oldest W owed by either chunk, if any). Rank r runs, in order:

1. 2(P - r - 1) times F0;
2. r + 1 times (F0, F1);
3. P - r - 1 times (input-only B1, W, F1);
4. N - 2P + r + 1 times (F0, full B1, F1, full B0): the steady state, in which DualPipe overlaps each forward
   with the other chunk's backward (torch runs such a pair one after the other);
5. P - r - 1 times (full B1, F1, full B0);
6. r + 1 times (B1, B0), full in the first half and input-only from the middle on (the middle is step
   floor((r + 1) / 2); on odd ranks its B1 is already input-only, on even ranks only its B0);
7. P - r - 1 times (W, input-only B0);
8. r + 1 times W.

Torch requires N >= 2P. Any smaller N is planned for 2P microbatches and the ops of the padding microbatches are
dropped; as for ZB-V this keeps the order deadlock-free (each op of a kept microbatch depends only on ops of the
same microbatch, and the kept ops keep their relative order).

Needs a split backward. The budget is not adapted: when the peak is above it, the metrics report the schedule
infeasible.
"""

from __future__ import annotations

from collections import deque

from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_chunks


class _RankOrder:
    """Builds one rank's order chunk-op by chunk-op: per chunk the next F and B, and the Ws owed (oldest first)."""

    def __init__(self, problem: Problem, rank: int) -> None:
        self.problem = problem
        self.stages = (rank, 2 * problem.num_devices - 1 - rank)  # model stage of chunk 0 and chunk 1
        self.next_forward = [0, 0]
        self.next_backward = [0, 0]
        self.owed_w: deque[tuple[int, int]] = deque()  # (chunk, microbatch), oldest first, both chunks
        self.order: list[Op] = []

    def _emit(self, kind: OpKind, chunk: int, microbatch: int) -> None:
        if microbatch < self.problem.num_microbatches:  # padding microbatches are dropped
            self.order.append(self.problem.op(kind, self.stages[chunk], microbatch))

    def forward(self, chunk: int) -> None:
        self._emit(OpKind.F, chunk, self.next_forward[chunk])
        self.next_forward[chunk] += 1

    def backward(self, chunk: int, full: bool) -> None:
        """The next B of ``chunk``: full (its W right after) or input-only (its W owed)."""
        microbatch = self.next_backward[chunk]
        assert microbatch < self.next_forward[chunk], "a backward before its forward"
        self.next_backward[chunk] += 1
        self._emit(OpKind.B, chunk, microbatch)
        if full:
            self._emit(OpKind.W, chunk, microbatch)
        else:
            self.owed_w.append((chunk, microbatch))

    def weight(self) -> None:
        """The oldest W owed by either chunk, if any."""
        if self.owed_w:
            chunk, microbatch = self.owed_w.popleft()
            self._emit(OpKind.W, chunk, microbatch)


def rank_order(problem: Problem, rank: int) -> list[Op]:
    """Rank ``rank``'s DualPipeV order (see the module docstring for the rule)."""
    p = problem.num_devices
    n = max(problem.num_microbatches, 2 * p)
    build = _RankOrder(problem, rank)
    for _ in range(2 * (p - rank - 1)):
        build.forward(0)
    for _ in range(rank + 1):
        build.forward(0)
        build.forward(1)
    for _ in range(p - rank - 1):
        build.backward(1, full=False)
        build.weight()
        build.forward(1)
    for _ in range(n - 2 * p + rank + 1):
        build.forward(0)
        build.backward(1, full=True)
        build.forward(1)
        build.backward(0, full=True)
    for _ in range(p - rank - 1):
        build.backward(1, full=True)
        build.forward(1)
        build.backward(0, full=True)
    middle = (rank + 1) // 2
    for i in range(rank + 1):
        build.backward(1, full=i < middle or (i == middle and rank % 2 == 0))
        build.backward(0, full=i < middle)
    for _ in range(p - rank - 1):
        build.weight()
        build.backward(0, full=False)
    for _ in range(rank + 1):
        build.weight()
    assert build.next_forward == [n, n] and build.next_backward == [n, n], "every forward and backward planned"
    assert not build.owed_w, "every W planned"
    return build.order


@register("dualpipe-v")
def dualpipe_v(problem: Problem) -> Schedule:
    """DualPipeV: two chunks per device in V placement, split backward."""
    require_chunks(problem, "dualpipe-v")
    return Schedule.from_lists("dualpipe-v", [rank_order(problem, r) for r in range(problem.num_devices)])
