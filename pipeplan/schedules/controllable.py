"""V-Half and V-Min: V-placement schedules at a half and a third of 1F1B's activation memory.

From Qi, Wan, Huang and Lin, "Pipeline Parallelism with Controllable Memory" (arXiv 2405.15362). Device r holds
chunk 0 = model stage r and chunk 1 = model stage 2P - 1 - r (the V placement of ZB-V), and the backward is split
into B and W. The construction works on a grid of unit time slots, as the paper's does:

1. **Building block.** Every microbatch repeats one V-shaped block, shifted by 6 slots per microbatch (a device
   runs 6 chunk-ops per microbatch: F, B and W on each chunk). On rank r, microbatch m's forward on chunk 0, forward
   on chunk 1, input gradient on chunk 1 and input gradient on chunk 0 sit at 6m plus

   - V-Min: r, 2P - 1 - r, 2P + g + r, 4P + g - 1 - r, with g = 2 when P is a multiple of 3, else 0;
   - V-Half: 2r, 3P - 2 - r, 3P + g - 1 + 2r, 6P + g - 2 - r, with g = 3 when P is even, else 0.

   Each op sits at least one slot after the op it depends on, and the four offsets differ modulo 6 (the gap g
   makes them so), so no two ops of a device share a slot. A microbatch holds chunk 0's activation from its
   first to its last offset and chunk 1's between the middle two: a lifespan of 4P + 2g slots for V-Min and
   6P + 2g for V-Half, i.e. (4P + 2g) / 6 and (6P + 2g) / 6 microbatches alive per device in the steady state.
   In activations of one chunk that is about 2P/3 and P: a third and a half of 1F1B's 2P (P device-activations,
   each split over two chunks).
2. **Weight gradients** go into the free slots, oldest owed W first: each W as soon as a slot after its B is free.
3. **Squeeze.** In slot order, every op moves to the earliest free slot after its dependencies (and after the
   same op of the previous microbatch, so that each kind runs in microbatch order) at which its device's peak
   memory stays what the block gave it. Moving a B or W earlier only frees memory; a forward may move only if
   the live memory of every slot it now spans leaves room for its activation. The squeeze fills the warm-up and
   cool-down, where the repeating block leaves the most holes.

The schedule is each device's ops in slot order; the simulator replays it with the problem's real costs and
latencies. A device's peak depends on its order alone (it runs one op at a time), so the peak measured on the
grid is the replayed peak whatever the costs. Memory is counted with the problem's own rule
(:meth:`~pipeplan.problem.Problem.allocated_by`, :meth:`~pipeplan.problem.Problem.released_by`).

What differs from the authors' Megatron implementation (``zbv_greedy.py``): their squeeze keeps the steady
state fixed, runs twice (with and without W) and counts the whole activation as held until W; here one squeeze
runs over every op, memory is the problem's (B releases what W does not keep), and each device keeps its own
peak rather than the largest over devices.

The budget is not adapted: when the peak is above it, the metrics report the schedule infeasible.

**Fitted to a budget** (:func:`fitted`, a warm start of the solver, not a registered schedule). Below V-Min's peak
nothing here fits, and between V-Min's and V-Half's the budget is partly unused. A fitted schedule leaves a hole of
a few slots after every k microbatches (microbatch m's block starts at slot 6m + (m // k) s, s the hole's size):
fewer microbatches are alive in every stretch as long as a lifespan, at a little bubble per hole. k is found by
bisection over 1 .. N - 1 with holes of a whole block position (s = 6, which keeps every block on the period): the
largest that fits when fewer holes always peak higher, as on the rows measured; at that k the smallest holes that
fit are taken. A hole smaller than a block can put two ops of a device in one slot (the later blocks' offsets no
longer fall on the earlier ones' residues); such holes are skipped. The squeeze then lets each device fill up to
the budget rather than to the block's own peak (it never exceeds the larger of the two, and a fitted block's peak
is within the budget). On the split-backward family at P = 32, N = 64, budget 11 (V-Min's peak is 11.35: at its
peak a device holds 22 chunk activations and two W owed), whole empty positions fit up to k = 11 (282.61 replayed;
285.79 at k = 10, the fit an earlier version took), and holes of 2 slots fit there too: 272.82, against 267.95 for
V-Min at its own peak. At P = 32, N = 128: 482.34 against 507.97; at P = 8, N = 16, budget 3: 69.05 against 78.97.
Where V-Min itself fits they are not built: squeezed up to the budget V-Min is a little faster (P = 16, N = 32,
budget 6: 131.90 against 132.21), but 60 s solves from it ended no better than from V-Min (131.90 against 131.65).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from pipeplan.metrics import fits_budget
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.schedule import Schedule
from pipeplan.schedules import register, require_chunks

# Slots per microbatch per device: F, B and W on each of two chunks.
PERIOD = 6

# (num_devices, rank) -> slot offsets of (F chunk 0, F chunk 1, B chunk 1, B chunk 0) for microbatch 0.
Block = Callable[[int, int], tuple[int, int, int, int]]


def v_min_block(p: int, r: int) -> tuple[int, int, int, int]:
    """V-Min's building block on rank ``r`` of ``p`` (lifespan 4P + 2g slots per microbatch)."""
    g = 2 if p % 3 == 0 else 0
    return r, 2 * p - 1 - r, 2 * p + g + r, 4 * p + g - 1 - r


def v_half_block(p: int, r: int) -> tuple[int, int, int, int]:
    """V-Half's building block on rank ``r`` of ``p`` (lifespan 6P + 2g slots per microbatch)."""
    g = 3 if p % 2 == 0 else 0
    return 2 * r, 3 * p - 2 - r, 3 * p + g - 1 + 2 * r, 6 * p + g - 2 - r


class SlotTaken(ValueError):
    """Two ops of a device given one slot: block starts that are not a whole number of periods apart can do so."""


class _Grid:
    """Every op's slot, which slots each device has taken, and each device's live memory per slot."""

    def __init__(self, problem: Problem, block: Block, starts: Sequence[int] | None = None,
                 limit: Sequence[float] | None = None) -> None:
        """``starts``: each microbatch's first slot, the one its block's offsets count from, rising (a block
        every :data:`PERIOD` slots, 0, 6, 12, ..., when None); :class:`SlotTaken` when two ops then share a slot of
        a device. ``limit``: per device, how far the squeeze may fill its memory when that is above the block's
        own peak."""
        self.problem = problem
        p, n = problem.num_devices, problem.num_microbatches
        starts = hole_starts(n, None) if starts is None else list(starts)
        if len(starts) != n or any(b <= a for a, b in zip(starts, starts[1:])) or starts[0] < 0:
            raise ValueError(f"starts must be {n} rising slots from 0 on, got {starts}")
        # Past the last slot the block and W placement can use.
        self.horizon = starts[-1] + PERIOD * (1 + 2 * p) + 8 * p
        self.slot = [0] * problem.num_op_numbers  # each op's slot, by op number (a list: read on the hot path)
        self.taken: list[dict[int, Op]] = [{} for _ in range(p)]  # per device: slot -> op
        for r in range(p):
            offsets = block(p, r)
            assert len({o % PERIOD for o in offsets}) == 4, f"block offsets {offsets} collide on rank {r}"
            down, up = r, 2 * p - 1 - r  # model stages of chunk 0 and chunk 1
            kinds = ((OpKind.F, down), (OpKind.F, up), (OpKind.B, up), (OpKind.B, down))
            for (kind, stage), offset in zip(kinds, offsets):
                for m in range(n):
                    self._put(problem.op(kind, stage, m), offset + starts[m])
        self._place_weights()
        self.live = self._live_memory()
        self.peak = [float(live.max()) for live in self.live]  # the block's own, before the squeeze
        self.limit = self.peak if limit is None else [max(own, room) for own, room in zip(self.peak, limit)]

    def _put(self, op: Op, slot: int) -> None:
        device = self.problem.device_of(op.stage)
        if slot in self.taken[device]:
            raise SlotTaken(f"slot {slot} of device {device} taken twice: {self.taken[device][slot]} and {op}")
        self.slot[self.problem.op_number(op)] = slot
        self.taken[device][slot] = op

    def _place_weights(self) -> None:
        """Each device's W into its free slots, oldest owed first (a W is owed once its B has run)."""
        problem = self.problem
        for taken in self.taken:
            owed: deque[Op] = deque()
            last = max(taken)
            slot = 0
            while slot <= last or owed:
                op = taken.get(slot)
                if op is not None:
                    if op.kind is OpKind.B:
                        owed.append(problem.op(OpKind.W, op.stage, op.microbatch))
                elif owed:
                    self._put(owed.popleft(), slot)
                slot += 1

    def _change(self, op: Op) -> tuple[float, int]:
        """What ``op`` does to its device's live memory and from which slot offset: a forward holds its
        activation from its own slot on; a B or W stops holding its release after its slot."""
        if op.kind is OpKind.F:
            return self.problem.allocated_by(op.kind, op.stage), 0
        return -self.problem.released_by(op.kind, op.stage), 1

    def _live_memory(self) -> list[np.ndarray]:
        """Per device, the memory live during each slot (arrays, so that a move updates a range at once)."""
        live = [[0.0] * self.horizon for _ in range(self.problem.num_devices)]
        for device, taken in enumerate(self.taken):
            for slot, op in taken.items():
                amount, offset = self._change(op)
                live[device][slot + offset] += amount
        for row in live:
            for k in range(1, self.horizon):
                row[k] += row[k - 1]
        return [np.array(row) for row in live]

    def _move(self, op: Op, new: int) -> None:
        """Move ``op`` to the earlier free slot ``new``; its change to live memory now covers [new, old) too."""
        device = self.problem.device_of(op.stage)
        old = self.slot[self.problem.op_number(op)]
        del self.taken[device][old]
        self._put(op, new)
        amount, offset = self._change(op)
        self.live[device][new + offset:old + offset] += amount

    def _earliest(self, op: Op) -> int:
        """The first slot after every dependency of ``op`` and after the same op of the previous microbatch."""
        number, slot = self.problem.op_number(op), self.slot
        dependency = self.problem.numbered_dependency[0][number]
        earliest = slot[dependency] + 1 if dependency >= 0 else 0
        if op.microbatch > 0:  # numbers run microbatch by microbatch within a kind and stage
            earliest = max(earliest, slot[number - 1] + 1)
        return earliest

    def _fits_from(self, op: Op, slot: int, new: int) -> bool:
        """Whether ``op`` (a forward) may allocate at ``new`` instead of ``slot`` within its device's peak."""
        device = self.problem.device_of(op.stage)
        highest = float(self.live[device][new:slot].max())
        return fits_budget(highest + self.problem.allocated_by(op.kind, op.stage), self.limit[device])

    def squeeze(self) -> None:
        """Move every op, in slot order, to the earliest free slot its dependencies and its device's peak allow."""
        placed = sorted((slot, device, op) for device, taken in enumerate(self.taken) for slot, op in taken.items())
        for slot, device, op in placed:  # each op moves only in its own turn, so its slot is still this one
            taken = self.taken[device]
            for new in range(self._earliest(op), slot):
                if new in taken:
                    continue
                if op.kind is OpKind.F and not self._fits_from(op, slot, new):
                    continue
                self._move(op, new)
                break

    def orders(self) -> list[list[Op]]:
        """Each device's ops in slot order."""
        return [[taken[slot] for slot in sorted(taken)] for taken in self.taken]


def controllable_memory_schedule(problem: Problem, name: str, block: Block) -> Schedule:
    """The schedule built from ``block`` (see the module docstring): block, weight gradients, squeeze."""
    require_chunks(problem, name)
    grid = _Grid(problem, block)
    grid.squeeze()
    return Schedule.from_lists(name, grid.orders())


# How many hole sizes that fit the budget are squeezed per block, smallest first.
FITTED_TRIES = 2


def hole_starts(count: int, k: int | None, size: int = PERIOD) -> list[int]:
    """First slots of ``count`` microbatches' blocks, a block every :data:`PERIOD` slots with a hole of ``size``
    slots after every ``k`` microbatches (none when ``k`` is None): microbatch m starts at PERIOD m + (m // k)
    size. A hole of PERIOD slots leaves a whole block position empty."""
    return [PERIOD * m + (0 if k is None else m // k * size) for m in range(count)]


def fitted(problem: Problem, deadline: float = math.inf,
           should_stop: Callable[[], bool] = lambda: False) -> list[Schedule]:
    """V-Min and V-Half fitted to a budget below V-Min's peak (see the module docstring). For each block: itself
    when it fits every device's budget; else a k at which a hole of a whole block position after every k
    microbatches fits, as large as bisection finds (fewer holes peak higher), and at that k the first
    :data:`FITTED_TRIES` hole sizes from 1 slot up that fit, each squeezed up to the budget. Empty without two
    chunks in V placement, a split backward and a budget, or where V-Min's own block fits every device's budget;
    none for a block whose sparsest holes (one microbatch per two block positions) do not fit; what was found when
    ``time.monotonic()`` passes ``deadline`` or ``should_stop()`` says so. The schedules fit the budget (a
    device's peak is the grid's, which the squeeze keeps within it); the caller replays them."""
    if (problem.budget is None or problem.num_chunks != 2 or problem.placement != "v"
            or not problem.split_backward):
        return []
    budget = list(problem.budget)
    n = problem.num_microbatches
    built: dict[tuple[Block, int | None, int], _Grid | None] = {}  # each grid built once, before its squeeze

    def grid(block: Block, k: int | None, size: int = PERIOD) -> _Grid | None:
        """The grid with these holes; None when they put two ops in one slot."""
        if (block, k, size) not in built:
            try:
                built[block, k, size] = _Grid(problem, block, hole_starts(n, k, size), budget)
            except SlotTaken:
                built[block, k, size] = None
        return built[block, k, size]

    def fits(block: Block, k: int | None, size: int = PERIOD) -> bool:
        built_grid = grid(block, k, size)
        return built_grid is not None and all(fits_budget(peak, room) for peak, room in zip(built_grid.peak, budget))

    def out_of_time() -> bool:
        return time.monotonic() >= deadline or should_stop()

    if fits(v_min_block, None):
        return []  # V-Min itself fits: it and what the search makes of it do better (see the module docstring)
    found = []
    for name, block in (("v-min", v_min_block), ("v-half", v_half_block)):
        if out_of_time():
            break
        if fits(block, None):
            chosen: Sequence[tuple[int | None, int]] = [(None, PERIOD)]
        elif n > 1 and fits(block, 1):
            chosen = _hole_sizes(partial(fits, block), n, out_of_time)
        else:
            continue  # not even the sparsest fits: spare the other builds (a budget of one microbatch)
        for k, size in chosen:
            if out_of_time():
                break
            fitting = grid(block, k, size)
            assert fitting is not None
            fitting.squeeze()
            found.append(Schedule.from_lists(f"{name}-fitted", fitting.orders()))
    return found


def _hole_sizes(fits: Callable[[int, int], bool], n: int,
                out_of_time: Callable[[], bool]) -> list[tuple[int, int]]:
    """Up to :data:`FITTED_TRIES` (k, hole size) pairs that fit, for ``n`` microbatches where a hole of a whole
    block position after every microbatch fits: the largest k at which whole block positions fit, bisected (as
    fewer holes peak higher; where that does not hold, a smaller one that fits), with the smallest sizes that fit
    there."""
    low, high = 1, n - 1  # whole positions fit after every low microbatches; above high none is tried
    if not out_of_time() and fits(high, PERIOD):
        low = high
    while high - low > 1 and not out_of_time():
        middle = (low + high) // 2
        if fits(middle, PERIOD):
            low = middle
        else:
            high = middle
    sizes: list[tuple[int, int]] = []
    for size in range(1, PERIOD + 1):
        if len(sizes) == FITTED_TRIES or out_of_time():
            break
        if fits(low, size):
            sizes.append((low, size))
    return sizes


@register("v-half")
def v_half(problem: Problem) -> Schedule:
    """V-Half: V placement, split backward; about half of 1F1B's activation memory at a small bubble."""
    return controllable_memory_schedule(problem, "v-half", v_half_block)


@register("v-min")
def v_min(problem: Problem) -> Schedule:
    """V-Min: V placement, split backward; about a third of 1F1B's activation memory."""
    return controllable_memory_schedule(problem, "v-min", v_min_block)
