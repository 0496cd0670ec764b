"""Memory stated through orders: on a device, how the ops of two microbatches merge, and what is live at each
forward's start given those merges (for the device relaxations of :mod:`pipeplan.device_bound` on chunks).

A CP-SAT model that states memory as a cumulative over live intervals proves little where memory binds on chunks:
the cumulative's propagation sees one interval at a time. These constraints state the same memory through the
order of ops, which CP-SAT's search and linear relaxation handle far better. They hold in every schedule whose
kinds run in microbatch order on every stage (some optimal schedule does: see ``_Model._add_symmetry`` in
:mod:`pipeplan.solver`), so a relaxation that adds them keeps its optimum a lower bound.

**Orders of two microbatches.** On device d a microbatch's forwards and backwards run in the order of its
chain (forwards up the model stages, backwards down): positions 0 .. L-1 of the device's sequence
(:func:`sequence`; with two chunks in either placement F on the lower stage, F on the higher, B on the higher,
B on the lower). For microbatches i < j and positions t < u, a literal says "j's op t starts after i's op u
ends", else i's op u starts after j's op t ends (they share the device); for t >= u the order is fixed (i's op u,
then i's op t by the chain, then j's op t by microbatch order). The literals of a pair imply each other along the
positions (after i's op u means after its op u - 1; j's op t + 1 comes after its op t), along the microbatches (a
later j's op, or an earlier i's op, is ordered alike), and across neighbouring devices of the model where j's op
at t on the other device comes later in the chain and i's op at u earlier (two chains moving in opposite
directions cross once).

**Memory.** Let s0 be the device's first stage (of its Fs and Bs the first is F(s0), the last B(s0)) and k the
most activations of s0 the budget holds (k a <= M < (k + 1) a). If B(s0, i) had not ended when F(s0, i + k)
starts, microbatches i .. i + k would all hold that activation (both kinds run in microbatch order): so every F
and B of microbatch i + k on the device follows every F and B of microbatch i there, and only pairs less than k
apart need literals. Memory only rises when a forward starts, so it is checked at each forward's start: a
microbatch's activation of stage c is live there when its F(c) has started (a literal, or fixed by the
positions) and its B(c) has not ended; after B(c) its weight activation stays until W(c) ends, for which each
forward has a literal per older microbatch ("starts after W(c) of microbatch m ends", else that W starts after
it ends: they share the device). The sum is linear in the literals and must fit the budget (the ticked problem's
memory values are whole numbers, its budget with the replay's float slack). Weight activations of microbatches
more than 2k older are not counted (fewer terms only allow more).

**What it does.** Added to the device relaxation of device 7 of P = 8, N = 16, two chunks in V, budget 3 (the
split-backward family: F:B:W = 1 : 1 : 0.5, comm 0.03, weight_activation 0.35), the relaxation is proven
optimal at 66.69 in about 2.5 s with two workers and the best warm start as the hint, where with the cumulative
alone CP-SAT's lower-bound tree search (which the solver ran on one device before) proves nothing above a floor of
65.02 in 15 s; N = 16, budget 6: 49.51, the answer, in 5 s, so that row is proven optimal. Over the whole pipeline
(every device's ops and these constraints on each) the model is too large to prove: on P = 8, N = 16, V, budget 3
it reached 65.0 to 66.4 in 20 s, and in the solver, before the whole-model search, it took time from the device
relaxations and gave nothing at 60 s per row. Without the W passes' device time and weight activations its optimum
there is 64.19, exactly the whole problem's optimum with weight activation 0 (on that row, memory through orders
loses nothing, and what the row loses lies in the weight activations waiting for W).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ortools.sat.python import cp_model

from pipeplan.problem import Op, OpKind, Problem

# The most literals (pair orders and W-release literals, :func:`literal_count`) added to one relaxation.
MAX_LITERALS = 40_000

Position = tuple[OpKind, int]  # (kind, model stage) of a device's op, any microbatch


def sequence(problem: Problem, device: int) -> list[Position]:
    """``device``'s forwards and backwards of one microbatch in chain order: its stages' Fs up, then Bs down."""
    stages = problem.stages_on_device(device)
    return [(OpKind.F, s) for s in stages] + [(OpKind.B, s) for s in reversed(stages)]


def width(problem: Problem, device: int) -> int:
    """k of the module docstring: the most activations of ``device``'s first stage its budget holds (at least 1,
    at most N; N without a budget)."""
    n = problem.num_microbatches
    if problem.budget is None:
        return n
    act = problem.activation[problem.stages_on_device(device)[0]]
    if act <= 0:
        return n
    return min(n, max(1, int(math.floor(problem.budget[device] / act + 1e-9))))


def _positions(seq: list[Position], kind: OpKind) -> dict[int, int]:
    """Stage -> position of its op of ``kind`` in a device's sequence."""
    return {s: t for t, (of_kind, s) in enumerate(seq) if of_kind is kind}


def _whole(value: float) -> int:
    """A memory value of the ticked problem (a whole number of ticks, the budget's float slack included) as an
    int; rounded down, which only relaxes, should it not be whole."""
    return int(math.floor(value + 1e-9))


def _weighted(problem: Problem, device: int) -> list[int]:
    """The stages of ``device`` whose B leaves a weight activation until W."""
    if not problem.split_backward:
        return []
    return [s for s in problem.stages_on_device(device) if problem.weight_activation[s] > 0]


def literal_count(problem: Problem, devices: Sequence[int]) -> int:
    """How many literals :func:`add` makes for ``devices``: pair orders and W-release literals."""
    n = problem.num_microbatches
    total = 0
    for d in devices:
        k = width(problem, d)
        positions = len(sequence(problem, d))
        pairs = sum(min(n, i + k) - i - 1 for i in range(n))
        total += pairs * positions * (positions - 1) // 2
        forwards = len(problem.stages_on_device(d))
        total += forwards * len(_weighted(problem, d)) * sum(min(j, 2 * k) for j in range(n))
    return total


def applies(problem: Problem, devices: Sequence[int]) -> bool:
    """Whether :func:`add` is worth adding for ``devices``: two or more chunks, memory binding on one of them
    (fewer than N activations of its first stage fit), forwards and backwards of positive duration, and not more
    than :data:`MAX_LITERALS` literals."""
    if problem.num_chunks < 2 or problem.budget is None:
        return False
    if min(width(problem, d) for d in devices) >= problem.num_microbatches:
        return False
    if min(problem.forward) <= 0 or min(problem.backward) <= 0:
        return False
    return literal_count(problem, devices) <= MAX_LITERALS


def order_literal(model: cp_model.CpModel, later_start: cp_model.LinearExprT, later_end: cp_model.LinearExprT,
                  earlier_start: cp_model.LinearExprT, earlier_end: cp_model.LinearExprT) -> cp_model.IntVar:
    """A literal for two ops of one device: true, the later one starts after the earlier one ends; false, the
    earlier one starts after the later one ends."""
    literal = model.new_bool_var("")
    model.add(later_start >= earlier_end).only_enforce_if(literal)
    model.add(earlier_start >= later_end).only_enforce_if(~literal)
    return literal


class _Merges:
    """The literals and constraints of the module docstring for some devices of a model (ticks)."""

    def __init__(self, model: cp_model.CpModel, problem: Problem, starts: dict[Op, cp_model.IntVar],
                 devices: Sequence[int]) -> None:
        self.model, self.problem, self.starts, self.devices = model, problem, starts, list(devices)
        self.duration = {op: int(problem.duration(op)) for op in starts}
        self.width = {d: width(problem, d) for d in self.devices}
        self.sequence = {d: sequence(problem, d) for d in self.devices}
        self.f_at = {d: _positions(seq, OpKind.F) for d, seq in self.sequence.items()}
        self.b_at = {d: _positions(seq, OpKind.B) for d, seq in self.sequence.items()}
        # (device, older i, newer j, position t, position u): j's op t starts after i's op u ends (t < u)
        self.order: dict[tuple[int, int, int, int, int], cp_model.IntVar] = {}

    def end(self, op: Op) -> cp_model.LinearExpr:
        return self.starts[op] + self.duration[op]

    def after(self, later: Op, earlier: Op) -> cp_model.IntVar:
        """:func:`order_literal` of two ops."""
        return order_literal(self.model, self.starts[later], self.end(later), self.starts[earlier], self.end(earlier))

    def add_orders(self) -> None:
        """The pair literals with their implications, and the memory precedence of pairs k apart."""
        problem, model = self.problem, self.model
        n = problem.num_microbatches
        rank = {(op.kind, op.stage): i for i, op in enumerate(problem.ops_in_dependency_order([0]))}
        seqs = self.sequence
        for d in self.devices:
            k, seq = self.width[d], seqs[d]
            for i in range(n - k):  # all of i + k after all of i
                model.add(self.starts[problem.op(*seq[0], i + k)] >= self.end(problem.op(*seq[-1], i)))
            for i in range(n):
                for j in range(i + 1, min(n, i + k)):
                    for t in range(len(seq)):
                        for u in range(t + 1, len(seq)):
                            self.order[d, i, j, t, u] = self.after(problem.op(*seq[t], j), problem.op(*seq[u], i))
        for (d, i, j, t, u), literal in self.order.items():
            implied = [(d, i, j, t, u - 1), (d, i, j, t + 1, u), (d, i, j + 1, t, u), (d, i - 1, j, t, u)]
            for other in (d - 1, d + 1):
                if other in seqs and (rank[seqs[other][t]] >= rank[seqs[d][t]]
                                      and rank[seqs[other][u]] <= rank[seqs[d][u]]):
                    implied.append((other, i, j, t, u))
            for key in implied:  # absent keys are fixed orders (t >= u) or pairs ordered by memory
                if key in self.order:
                    model.add_implication(literal, self.order[key])

    def _ordered(self, d: int, older: int, newer: int, t: int, u: int) -> int | cp_model.IntVar:
        """1 when newer's op t surely starts after older's op u ends, else the pair's literal."""
        if t >= u or newer - older >= self.width[d]:
            return 1
        return self.order[d, older, newer, t, u]

    def add_memory(self, budget: Sequence[float]) -> None:
        """At each forward's start, the live activations and weight activations (module docstring) fit."""
        problem, model = self.problem, self.model
        n = problem.num_microbatches
        for d in self.devices:
            k, seq, f_at, b_at = self.width[d], self.sequence[d], self.f_at[d], self.b_at[d]
            cap = _whole(budget[d])
            act = {s: _whole(problem.activation[s]) for s in problem.stages_on_device(d)}
            kept = {s: _whole(problem.weight_activation[s]) for s in _weighted(problem, d)}
            released = self._released(d, kept)
            for j in range(n):
                for u, (kind, _) in enumerate(seq):
                    if kind is not OpKind.F:
                        continue
                    terms: list[tuple[int, int | cp_model.IntVar]] = []
                    for c, at in f_at.items():
                        if at <= u:
                            terms.append((act[c], 1))  # j's own (its Bs come after its Fs)
                        for m in range(max(0, j - 2 * k), j):  # older: a (started - ended) + w (ended - released)
                            started, ended = self._ordered(d, m, j, u, at), self._ordered(d, m, j, u, b_at[c])
                            terms += [(act[c], started), (kept.get(c, 0) - act[c], ended)]
                            if c in kept:
                                terms.append((-kept[c], released[j, u, c, m]))
                        for m in range(j + 1, min(n, j + k)):  # newer: its F(c) before j's op (its B cannot be)
                            if at < u:
                                terms += [(act[c], 1), (-act[c], self.order[d, j, m, at, u])]
                    constant = sum(coef * var for coef, var in terms if isinstance(var, int))
                    variable = [(coef, var) for coef, var in terms if not isinstance(var, int) and coef]
                    model.add(sum(coef * var for coef, var in variable) + constant <= cap)

    def _released(self, d: int, kept: dict[int, int]) -> dict[tuple[int, int, int, int], cp_model.IntVar]:
        """(j, u, stage c, m) -> literal: j's op u (a forward) starts after W(c, m) ends, for the 2k microbatches m
        before j (c the stages of ``kept``); with its implications (W(c, m) ended, so B(c, m) had; an earlier W, a
        later forward, alike)."""
        problem, model = self.problem, self.model
        k, seq, b_at = self.width[d], self.sequence[d], self.b_at[d]
        released: dict[tuple[int, int, int, int], cp_model.IntVar] = {}
        for j in range(problem.num_microbatches):
            for u, (kind, s) in enumerate(seq):
                if kind is not OpKind.F:
                    continue
                now = problem.op(kind, s, j)
                for c in kept:
                    for m in range(max(0, j - 2 * k), j):
                        released[j, u, c, m] = self.after(now, problem.op(OpKind.W, c, m))
        for (j, u, c, m), literal in released.items():
            b_ended = self._ordered(d, m, j, u, b_at[c])
            if not isinstance(b_ended, int):
                model.add_implication(literal, b_ended)
            later = tuple((j, v, c, m) for v in range(u + 1, len(seq)))
            for key in ((j, u, c, m - 1), (j + 1, u, c, m)) + later:
                if key in released:
                    model.add_implication(literal, released[key])
        return released


def add(model: cp_model.CpModel, problem: Problem, starts: dict[Op, cp_model.IntVar], devices: Sequence[int]) -> None:
    """Add the orders and memory of the module docstring for ``devices`` of the ticked ``problem`` to ``model``,
    whose ``starts`` hold every op of those devices (their W too when the backward is split). Nothing without a
    budget."""
    if problem.budget is None:
        return
    merges = _Merges(model, problem, starts, devices)
    merges.add_orders()
    merges.add_memory(problem.budget)
