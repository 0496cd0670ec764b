"""A lower bound from one device solved exactly, with every other device reduced to the delays of its chains and
to what its memory precedences imply.

The closed-form bounds of :mod:`pipeplan.bounds` count a device's work, its unavoidable idle time and the area
its activations need, each on its own. Where memory binds they miss how these interact: a device that holds
as many microbatches as its budget allows must wait for the oldest one's backward to come back before it can
start another forward, and what it can run meanwhile is limited by the same budget. This module solves that
interaction exactly for one device, for all N microbatches.

**The device relaxation.** Fix a device d. Its model has one variable per op on d (every kind, on each of its
stages, for every microbatch), and:

- *heads*: op u starts no earlier than its longest dependency chain from the start (durations of the ops
  before it and the link latencies between them), as the first op of any schedule can start at 0;
- *lags*: for two ops u, v of one microbatch on d where v depends on u through a chain (for example F on d's
  first chunk and F on its second chunk, with the forwards of the other devices in between), v starts at
  least the chain's longest path after u ends;
- *tails*: the objective is at least u's end plus the longest chain that must still follow u (for the stage
  span: u's end minus the start of d's first op, see below);
- *one op at a time* on d, the *activation budget* of d (the problem's memory rules: a forward allocates at its
  start, B and W release at their ends), and each kind on each stage in *microbatch order*.

Every other device's ops and their capacity are gone; of their memory only the lags its precedences imply between
d's own ops are kept (below). Take any schedule of the whole problem within the budget whose kinds run in microbatch
order on every stage (some optimal schedule does: see ``_Model._add_symmetry`` in :mod:`pipeplan.solver`), shifted
so that its first op starts at 0. Its ops on d meet every constraint above: each op runs after its whole dependency
chain, every op of a chain after the one before it, and d runs them one at a time within its budget. So the
relaxation's optimum is at most the schedule's objective, and CP-SAT's proven bound on the relaxation is a lower
bound on the problem's optimum whatever the time limit. For the stage span, d's first op is F on its first stage of
microbatch 0 (every op on d follows that stage's forward of its own microbatch, which runs after microbatch 0's),
and d's span is at most the largest span of all devices.

**Memory precedences.** Let stage s be d's chunk i and let A be the activations of d's chunks 0 .. i (s and the
ones below it) for one microbatch. While B(s, m) has not ended, no microbatch m' >= m has ended B(s, m')
(microbatch order), nor started B on d's lower chunks (those follow B(s, m') through the chain), so every such
microbatch whose F(s, m') has started holds at least A. If F(s, m + k) starts before B(s, m) ends, the k + 1
microbatches m .. m + k hold (k + 1) A; so with k the least count for which (k + 1) A exceeds the budget,
F(s, m + k) starts no earlier than B(s, m) ends. These follow from the model, so they do not change its
optimum; written as plain precedences they let CP-SAT's linear relaxation see what the cumulative implies and
prove the optimum much sooner.

**Other devices' memory.** The same precedence on another device d' ties the device's own ops together across
microbatches: take stage s on d' with its count k, an op v on d that reaches B(s) by a chain and an op u on d that
follows F(s) by one. Then u(m + k) starts no earlier than v(m) ends, plus the chain from v to B(s), B(s) and F(s)
themselves, and the chain from F(s) to u: v(m) -> B(s, m) -> F(s, m + k) -> u(m + k). With these lags a device
learns that microbatch m + k must wait for microbatch m to come back through every device whose budget binds, which
the rest of the relaxation cannot see. Only the pairs with v the last op on d on the chain to B(s) and u the first
on the chain from F(s) are added; the others follow from them and the lags between the ops of one microbatch on d.
Like the memory precedences these hold in every schedule in microbatch order, so the optimum stays a lower bound;
unlike them they need not follow from the device's own constraints, so they can raise it (where the device's own
memory precedence spans a longer trip with no larger k than any other device's, as on the first device of one chunk
with equal budgets, they add nothing). On the split-backward family at P = 4, N = 8, one chunk, budget 2, the last
device's relaxation proves 35.22 with them and 25.18 without (the optimum is 38.10); within 10 s, P = 8, N = 32, V
placement, budget 3, device 7 proves 110.19 against 105.38, and P = 16, N = 64, V, budget 6, device 0 proves 214.05
against 206.05.

**Window cuts.** :mod:`pipeplan.spacing` proves, for small j, a least time delta_j from the start of F(0, m) to
the start of F(0, m + j) that holds in every schedule in microbatch order. The relaxation of the device holding
stage 0 takes those it is given as precedences between its own forwards on stage 0. The schedules the argument
above relabels meet them, so its optimum is still a lower bound. They add what the window bound knows about the
other devices' collisions to what the relaxation knows about this device's: on the split-backward family at
P = 16, N = 64, one chunk, budget 11, device 0 with them proves 220.4 in 4.5 s, against 215.9 in 8 s without
them (the window bound alone: 215.9).

**Several devices.** The same argument holds for a set of devices solved exactly together: every op on any of
them gets its head, tail and the chains to the others' ops (through the devices left out), each device runs its
ops one at a time within its own budget, with its own memory precedences and the lags other devices' memory
implies on its ops, and the window cuts apply when one of them holds stage 0. Any schedule of the whole problem in
microbatch order, restricted to those devices, meets all of it, so the optimum is again a lower bound (with
every device in the set nothing is relaxed and it is the problem's optimum). Two devices exact together see the
collisions between them that each alone cannot: on the split-backward family at P = 8, N = 32, one chunk, budget
3, devices 0 and 1 each alone prove 189.06 (the window bound's value) and the two together 189.82 in 0.5 s (with
the cuts of longer windows 190.32; five devices 191.14 in 28 s); at P = 3, N = 12, budget 2, without window
cuts, 42.22 and 38.22 alone and together 43.98, the optimum. A third device can see what two do not: at P = 4,
N = 8, budget 2 every device alone and devices 0 and 1 together prove 37.22, devices 0 to 2 together 38.10, the
optimum; at P = 8, N = 32, budget 6, one device and two prove 104.02, three 104.78 in about 4 to 7 s; with two
chunks in loop placement at P = 4, N = 8, budget 2, one device and two prove 30.71, three 31.09, the optimum (which
CP-SAT on the whole model proves in about two minutes), in about 6 s.
:func:`grown` adds to a group the device next to it with the largest closed-form bound.

**Memory through orders.** On two or more chunks the relaxation also states each of its devices' memory through
the order of two microbatches' ops (:mod:`pipeplan.merge_orders`): a literal per pair of ops of two microbatches
in flight, and the live memory at each forward's start as a sum over them, weight activations until W included.
Every schedule in microbatch order meets them, so the optimum is unchanged; the proofs are far quicker. On P = 8,
N = 16, V placement, budget 3, device 7's relaxation is proven optimal (66.69) in about 2.5 s with them, where the
tree search below proves nothing above a floor of 65.02 in 15 s without them; at budget 6 it proves 49.51, the
optimizer's answer, in 5 s. With them the solver runs CP-SAT's default search on one device too (see "Use"). They
are not added on one chunk, where the collision bound (:mod:`pipeplan.collision_bound`) covers the pairs.

**Use.** The relaxation is strongest where a device's budget binds and its chains are long (in loop placement the
first device, whose first chunk's activations wait for the whole round trip; in V the last, at the turn);
:func:`devices_to_try` orders the devices whose budget binds by their closed-form bound (the solver takes
:func:`relaxation_order`'s, the V's turn first). On the split-backward
family at P = 16, N = 32, one chunk per device, budget 11, the closed-form bound is 116.8 and device 0's
relaxation proves 122.7 within seconds; at P = 4, N = 8, two chunks in loop placement, budget 2, it proves 30.71
against the closed form's 27.11 (the optimum is 31.09). Only the bound counts, so the solver runs CP-SAT's
lower-bound tree search on it (``optimize_with_lb_tree_search``), which proves more within the same seconds: at
P = 8, N = 16, V placement, budget 3, device 7 proved 64.47 in 8 s with it and 59.98 without (measured before the
other devices' memory was added; without those lags 63.86 and 61.21 in 15 s, with them 64.95 in 15 s with the
tree search, while the default search proves that relaxation's optimum, 66.69, in 7.4 s; on P = 8, N = 16, loop,
budget 3 it is the other way round: the tree search proves 78.71 optimal in 4.6 s, the default search 68.0 in
10 s). Where the memory is also stated through orders (above), the default search proves more on one device
than the tree search on most rows measured, and the solver runs it there. With two chunks on
16 devices CP-SAT often cannot prove the relaxation's optimum within seconds, and the bound then stays where the
closed form put it.

**Targets.** CP-SAT's minimization raises its bound from below; asked instead whether the relaxation has a
solution with its objective below a target T (:meth:`Relaxation.below`), it propagates from both ends of every
op's window, and an INFEASIBLE answer proves T as surely as a bound. On one device with the memory stated through
orders this is often far quicker near the bound: P = 8, N = 32, V, budget 3, device 7 (2 workers, no floor, no
window cuts): "below 114" INFEASIBLE in 0.8 s, "below 116" in 1.2 s, "below 118" in 21 s and "below 118.7" in 30 s,
where minimizing stays at 113.80 after 25 s. Not everywhere: P = 8, N = 32, V, budget 6, device 7 leaves 87, 88
and 89 undecided after 30 s each, and on one chunk (P = 16, N = 64, budget 11) the relaxation has solutions at the
targets tried. :func:`prove_by_targets` climbs from a proven bound in steps that double while each is proven
quickly and bisects towards the least target left undecided in its time, each target given at least what the
ones before showed a decision takes; the solver runs the quick ones (until one is undecided) before the
minimization and the rest after it when that ends unproven.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from pipeplan import merge_orders
from pipeplan.bounds import device_end_lower_bounds, nested_activation, nested_in_flight
from pipeplan.metrics import fits_budget
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.simulate import Timeline
from pipeplan.spacing import add_budget, add_spacing_cuts

OBJECTIVES = ("makespan", "stage_span")


@dataclass
class Chains:
    """The dependency chains of one microbatch (all microbatches have the same), in ticks: each op's head (its
    earliest start), its tail (the least time from its end to the end of the last op after it), for each op the
    longest path from its end to the start of every op that depends on it, and each op's duration."""

    head: dict[Op, int]
    tail: dict[Op, int]
    after: dict[Op, dict[Op, int]]
    duration: dict[Op, int]

    def on_device(self, problem: Problem, device: int) -> list[Op]:
        """Microbatch 0's ops on ``device``, in dependency order."""
        stages = problem.stages_on_device(device)
        return [op for op in self.head if op.stage in stages]


def chains(problem: Problem) -> Chains:
    """Heads, tails, longest paths and durations of microbatch 0's ops (see :class:`Chains`)."""
    ops = problem.ops_in_dependency_order([0])
    duration = {op: int(problem.duration(op)) for op in ops}
    followers: dict[Op, list[tuple[Op, int]]] = {op: [] for op in ops}
    head: dict[Op, int] = {}
    for op in ops:
        deps = problem.dependencies(op)
        head[op] = max((head[dep] + duration[dep] + int(lag) for dep, lag in deps), default=0)
        for dep, lag in deps:
            followers[dep].append((op, int(lag)))
    tail: dict[Op, int] = {}
    for op in reversed(ops):
        tail[op] = max((lag + duration[nxt] + tail[nxt] for nxt, lag in followers[op]), default=0)
    after: dict[Op, dict[Op, int]] = {}
    for index, first in enumerate(ops):
        gap: dict[Op, int] = {first: 0}  # longest path from the end of ``first`` to the start of each op
        for op in ops[index + 1:]:
            reached = [gap[dep] + (0 if dep == first else duration[dep]) + int(lag)
                       for dep, lag in problem.dependencies(op) if dep in gap]
            if reached:
                gap[op] = max(reached)
        del gap[first]
        after[first] = gap
    return Chains(head, tail, after, duration)


def devices_to_try(problem: Problem) -> list[int]:
    """Devices whose budget binds, the one with the largest closed-form bound on its last end first."""
    budget = problem.budget
    if budget is None:
        return []
    ends = device_end_lower_bounds(problem)
    binding = [d for d in range(problem.num_devices)
               if not fits_budget(problem.num_microbatches * problem.footprint(d), budget[d])]
    return sorted(binding, key=lambda d: (-ends[d], d))


def relaxation_order(problem: Problem) -> list[int]:
    """The devices whose budget binds in the order the solver relaxes them: :func:`devices_to_try`'s, except that in
    V placement the device at the turn (stages P - 1 and P, its two forwards back to back) comes first whenever
    its budget binds. Its relaxation proves more, and sooner, than that of a device whose closed-form bound is
    larger: on P = 16, N = 64, V, budget 6 the closed form puts device 0 first (204.55 against 200.84 for device
    15), where "below 220" was undecided in 15 s; on device 15 it was proven in 3.9 s. The solver's bound at 60 s
    (split-backward family, 2 workers) went from 215.26 to 218.78 and 220.02 there, and at budget 1, where the
    closed form puts device 0 first too, device P - 1's relaxation proves the greedy answer optimal on P = 8 and
    16, N = 2P and 4P (P = 8, N = 32: 316.36 -> 324.61, the answer), where device 0's left gaps of 1 % to 2.5 %."""
    order = devices_to_try(problem)
    turn = problem.num_devices - 1
    if problem.placement == "v" and problem.num_chunks > 1 and turn in order:
        order.remove(turn)
        order.insert(0, turn)
    return order


def grown(problem: Problem, group: Sequence[int]) -> list[int] | None:
    """``group`` and one device more, numbered next to one of its devices (loop placement's link from the last
    device back to the first is not counted): the one with the largest closed-form bound on its last end, the
    lower-numbered on a tie; None when no device is left out."""
    ends = device_end_lower_bounds(problem)
    near = [d for d in range(problem.num_devices) if d not in group and any(abs(d - g) == 1 for g in group)]
    if not near:
        return None
    return [*group, max(near, key=lambda d: (ends[d], -d))]


@dataclass
class Relaxation:
    """The CP-SAT model of a relaxation (ticks: one device's, or :mod:`pipeplan.collision_bound`'s), its start
    variables and its objective."""

    model: cp_model.CpModel
    starts: dict[Op, cp_model.IntVar]
    objective: cp_model.IntVar
    # Whether its memory is also stated through orders (:mod:`pipeplan.merge_orders`).
    ordered_memory: bool = False

    def add_hint(self, timeline: Timeline) -> None:
        """Hint a whole schedule's starts (ticks, first op at 0) for the relaxation's ops."""
        starts = {op: start for op, start in zip(timeline.ops, timeline.start)}
        for op, var in self.starts.items():
            self.model.add_hint(var, int(round(starts[op])))

    def below(self, target: int) -> tuple[cp_model.CpModel, cp_model.IntVar]:
        """A copy of the model, without objective or hints, whose objective is below ``target`` (ticks), and that
        objective in the copy: INFEASIBLE proves the relaxation's optimum, and so the problem's, at least
        ``target``."""
        model = self.model.clone()
        model.clear_objective()  # type: ignore[no-untyped-call]
        model.clear_hints()  # type: ignore[no-untyped-call]
        capped = model.get_int_var_from_proto_index(self.objective.index)
        model.add(capped <= target - 1)
        return model, capped


# The first target of :func:`prove_by_targets` lies this fraction of the way from the proven bound to the best
# solution known; each target gets at most this share of the time left.
FIRST_STEP = 1 / 8
PROBE_SHARE = 1 / 3
# The pace of the targets (see prove_by_targets): the next target gets at least GROWTH times what the last proven
# one took, or UNDECIDED_GROWTH times the time of one left undecided; a target proven within FAST of its time
# doubles the step, one that took more than SLOW of it halves it.
GROWTH = 3.0
UNDECIDED_GROWTH = 2.0
FAST = 0.25
SLOW = 0.5


@dataclass
class Pace:
    """What the targets of one relaxation have learnt of how long a target takes: the least time the next one
    gets (s), kept from one :func:`prove_by_targets` call to the next on that relaxation."""

    least_s: float = 0.0


def prove_by_targets(relaxation: Relaxation, floor: int, ceiling: int | None, until: float,
                     solve: Callable[[cp_model.CpModel, cp_model.IntVar, float],
                                     tuple[cp_model.CpSolverStatus, int | None]],
                     report: Callable[[int], None] | None = None,
                     should_stop: Callable[[], bool] = lambda: False, quick: bool = False,
                     pace: Pace | None = None) -> tuple[int, bool]:
    """The largest bound (ticks, at least ``floor``, a bound already proven on the relaxation) proven by asking
    whether the relaxation has a solution below a target, until ``until`` (``time.monotonic()``), and whether it
    is the relaxation's optimum. ``ceiling`` is an objective the relaxation reaches (a schedule's, ticks; None when
    none is known: the relaxation's horizon).

    ``solve(model, objective, seconds)`` runs CP-SAT on ``model`` for at most ``seconds`` and answers (status,
    the value of ``objective`` in its solution, None without one); ``report``, when given, hears each bound
    proven; the targets end when ``should_stop()``, and with ``quick`` at the first one not decided in its time
    when none was proven before it.

    Why: with the objective capped, propagation works from both ends of every op's window, and on the device
    relaxations with the memory stated through orders CP-SAT proves a cap infeasible far sooner than its
    optimization raises its bound there: on the split-backward family at P = 8, N = 32, two chunks in V, budget
    3, device 7, "below 116" is proven infeasible in 1.2 s and "below 118" in 21 s, where minimizing stays at
    113.80 after 25 s (2 workers, no floor, no window cuts). Proving grows much harder near the optimum, so the
    targets climb from the floor in steps that double while each is proven, and when one is not decided within
    its share of the time left, the next lies halfway to it (a bisection between the bound and the least
    undecided target, which is not asked again); none lies above a solution found. The optimum is claimed only
    when a solution meets the bound.

    **Pace.** Each target gets a third of the time left, but never less than what the targets so far showed a
    decision takes (``pace``, kept from one call to the next on a relaxation): :data:`GROWTH` times the last
    proven one's time, :data:`UNDECIDED_GROWTH` times the time of one left undecided. A target proven within
    :data:`FAST` of its time doubles the step, one that took more than :data:`SLOW` of it halves it (decisions
    grow harder near the optimum). On large relaxations each decision first costs CP-SAT's presolve, 1 to 2.5 s
    at P = 16 with two chunks in V, and with a third of an ever shorter time left every target after the first
    undecided one stopped within its presolve: P = 16, N = 32, V, budget 6, device 15 proved 127.09 in 2.5 s,
    left 129.65 undecided in its 2.8 s, then asked eight targets in 1.8 s down to 0.1 s, none decided, where
    "below 128.00" alone is proven in 6.0 s (2 workers). Paced, that row's 60 s solve proves 128.19.
    """
    horizon = int(max(relaxation.objective.proto.domain))  # every solution's objective is at most this
    lower, upper = floor, horizon if ceiling is None else min(ceiling, horizon)  # proven; reached by a solution
    undecided = upper + 1  # the least target left undecided in its time (none yet: above every one asked)
    step = max(1, int((upper - lower) * FIRST_STEP))
    pace = Pace() if pace is None else pace
    while lower < upper:
        left = until - time.monotonic()
        target = min(lower + step, upper, undecided - 1)  # asked again with less time, one would stay undecided
        if left < 0.05 or should_stop() or target <= lower:
            break
        seconds = min(left, max(left * PROBE_SHARE, pace.least_s))
        asked = time.monotonic()
        status, value = solve(*relaxation.below(target), seconds)
        took = time.monotonic() - asked
        if status == cp_model.INFEASIBLE:
            lower = target
            pace.least_s = max(pace.least_s, GROWTH * took)
            room = max(1, (min(undecided, upper) - lower) // 2)
            if took <= FAST * seconds:
                step = min(2 * step, room)
            elif took > SLOW * seconds:
                step = max(1, min(step // 2, room))
            else:
                step = min(step, room)
            if report is not None:
                report(lower)
        elif value is not None:  # a solution below the target: no bound above its value can be proven
            if value < lower:
                raise RuntimeError(f"a relaxation's solution at {value} ticks is below its proven bound {lower}")
            upper = min(upper, value)
            step = min(step, max(1, (upper - lower) // 2))
        elif target - lower > 1 and not (quick and lower == floor):  # undecided in its time: halfway to it next
            undecided = target
            step = (target - lower) // 2
            pace.least_s = max(pace.least_s, UNDECIDED_GROWTH * seconds)
        else:
            break
    return lower, lower == upper


def relaxation(problem: Problem, device: int | Sequence[int], objective: str = "makespan", floor: int = 0,
               memory_precedences: bool = True, other_memory: bool = True,
               spacings: Mapping[int, int] | None = None, merges: bool = True) -> Relaxation:
    """Device ``device``'s relaxation of the ticked ``problem`` (see the module docstring), or that of several
    devices at once when ``device`` is a sequence (see "Several devices" there); its objective is at least
    ``floor`` (a bound already proven, in ticks). ``memory_precedences=False`` leaves out the implied
    precedences (for tests that check they do not change the optimum); ``other_memory=False`` leaves out the lags
    other devices' memory implies (for tests that measure what they add); ``merges=False`` leaves out the memory
    stated through orders on two or more chunks (:mod:`pipeplan.merge_orders`). ``spacings`` maps window sizes j to
    proven lower bounds on delta_j (:func:`pipeplan.spacing.window_deltas`, ticks): when a device of the
    relaxation holds stage 0, F(0, m + j) starts at least that long after F(0, m)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    n = problem.num_microbatches
    found = chains(problem)
    group = [device] if isinstance(device, int) else list(device)
    stages = {s for d in group for s in problem.stages_on_device(d)}
    mine = [op for op in found.head if op.stage in stages]  # microbatch 0's, in dependency order
    model = cp_model.CpModel()
    # No schedule's makespan exceeds every op time and latency summed (the critical chain runs without gaps).
    horizon = int(math.ceil(problem.total_time())) + max(found.head.values()) + max(found.tail.values()) + 1
    objective_var = model.new_int_var(0, horizon, objective)
    starts: dict[Op, cp_model.IntVar] = {}
    for kind_stage in mine:
        for m in range(n):
            op = problem.op(kind_stage.kind, kind_stage.stage, m)
            starts[op] = model.new_int_var(found.head[kind_stage], horizon, f"{op.kind.value}_s{op.stage}_m{m}")
    duration = {op: int(problem.duration(op)) for op in starts}
    # Each device's first op: F on its first stage, microbatch 0 (for the stage span).
    first = {d: starts[problem.op(OpKind.F, problem.stages_on_device(d)[0], 0)] for d in group}
    for m in range(n):
        for u in mine:
            op_u = problem.op(u.kind, u.stage, m)
            end_u = starts[op_u] + duration[op_u]
            if objective == "makespan":
                model.add(objective_var >= end_u + found.tail[u])
            else:
                model.add(objective_var >= end_u - first[problem.device_of(u.stage)])
            for v, gap in found.after[u].items():
                if v.stage in stages:
                    model.add(starts[problem.op(v.kind, v.stage, m)] >= end_u + gap)
            if m + 1 < n:
                model.add(starts[problem.op(u.kind, u.stage, m + 1)] >= end_u)
    for d in group:
        on_d = set(problem.stages_on_device(d))
        model.add_no_overlap([model.new_fixed_size_interval_var(var, duration[op], "")
                              for op, var in starts.items() if op.stage in on_d])
        add_budget(model, problem, d, n, starts, duration, horizon)
        if memory_precedences:
            _add_lags(model, problem, memory_precedences_of(problem, d), starts)
        if other_memory:
            _add_lags(model, problem, other_memory_lags(problem, d, found), starts)
    ordered_memory = merges and merge_orders.applies(problem, group)
    if ordered_memory:
        merge_orders.add(model, problem, starts, group)
    if spacings and 0 in stages:
        add_spacing_cuts(model, problem, starts, spacings)
    if floor > 0:
        model.add(objective_var >= floor)
    model.minimize(objective_var)
    return Relaxation(model, starts, objective_var, ordered_memory)


def memory_counts(problem: Problem, device: int) -> list[tuple[int, int]]:
    """(stage, k) for each stage s on ``device`` where s and the device's lower stages hold memory: F(s, m + k)
    starts no earlier than B(s, m) ends, with k the least count whose k + 1 microbatches overflow the budget when
    each holds its activations on s and the device's lower stages (see the module docstring; k is
    :func:`pipeplan.bounds.nested_in_flight`, at most N, where it constrains nothing). Empty without a budget."""
    if problem.budget is None:
        return []
    stages = problem.stages_on_device(device)
    return [(s, nested_in_flight(problem, s)) for s in stages if nested_activation(problem, s) > 0]


# (v, u, k) -> gap: u of microbatch m + k starts at least gap after v of microbatch m ends (microbatch 0's records
# of v and u, ticks).
Lags = dict[tuple[Op, Op, int], int]


def memory_precedences_of(problem: Problem, device: int) -> Lags:
    """The device's memory precedences as lags: F(s, m + k) after B(s, m), for each (s, k) of
    :func:`memory_counts`."""
    return {(problem.op(OpKind.B, s, 0), problem.op(OpKind.F, s, 0), k): 0 for s, k in memory_counts(problem, device)}


def other_memory_lags(problem: Problem, device: int, found: Chains) -> Lags:
    """The lags between ``device``'s ops that another device's memory precedence implies (see the module
    docstring): v reaches B(s, m) on another device's stage s by a chain, F(s, m + k) starts after B(s, m) ends,
    and u follows F(s, m + k) by a chain, so u(m + k) starts at least gap after v(m) ends, the largest over every
    such stage with that k. Only the pairs where v is the last op on ``device`` on the chain to B(s) and u the
    first on the chain from F(s) are kept; the others follow from them and the lags between the device's ops of
    one microbatch. Lags with k of N or more are kept, though they constrain nothing."""
    mine = found.on_device(problem, device)
    duration = found.duration

    def through(a: Op, b: Op) -> bool:
        """Whether some other op on the device lies on a longest chain from a to b."""
        return any(w not in (a, b) and w in found.after[a] and b in found.after[w]
                   and found.after[a][w] + duration[w] + found.after[w][b] == found.after[a][b] for w in mine)

    lags: Lags = {}
    for other in range(problem.num_devices):
        if other == device:
            continue
        for s, k in memory_counts(problem, other):
            forward, backward = problem.op(OpKind.F, s, 0), problem.op(OpKind.B, s, 0)
            firsts = [u for u in mine if u in found.after[forward] and not through(forward, u)]
            lasts = [v for v in mine if backward in found.after[v] and not through(v, backward)]
            for v in lasts:
                for u in firsts:
                    gap = found.after[v][backward] + duration[backward] + duration[forward] + found.after[forward][u]
                    lags[(v, u, k)] = max(lags.get((v, u, k), 0), gap)
    return lags


def _add_lags(model: cp_model.CpModel, problem: Problem, lags: Lags, starts: dict[Op, cp_model.IntVar]) -> None:
    """Each lag (v, u, k) -> gap as precedences: u(m + k) starts at least gap after v(m) ends, for every m."""
    for (v, u, k), gap in lags.items():
        for m in range(problem.num_microbatches - k):
            earlier, later = problem.op(v.kind, v.stage, m), problem.op(u.kind, u.stage, m + k)
            model.add(starts[later] >= starts[earlier] + int(problem.duration(earlier)) + gap)
