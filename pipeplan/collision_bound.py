"""A lower bound on the makespan from the whole pipeline at once, less the W passes' device time (one chunk).

Where memory binds on one chunk per device, the optimal answers run slower than Little's law allows: six
microbatches in flight at P = 16 take about 35.3 time units a cycle where one round trip and a W take 33.40. The
loss is in collisions. A microbatch that never waits reaches device d at fixed offsets from its first forward, so
two of them started D apart meet on device d (an older one's B against a newer one's F) unless D avoids an
interval there; these intervals tile the whole round trip, leaving gaps of two link latencies between them, so
microbatches in flight must start a multiple of F + B + 2 comm apart or wait, and waiting lengthens how long
they hold memory. The closed forms, the window bound (:mod:`pipeplan.spacing`) and the device relaxations
(:mod:`pipeplan.device_bound`) each see a few microbatches or one device, where the others can wait at no cost.

**The relaxation.** Every F and B op of every microbatch is kept with its duration, its dependencies and link
latencies, and each kind on each stage runs in microbatch order (some optimal schedule does: see
``_Model._add_symmetry`` in :mod:`pipeplan.solver`). What is dropped is the device time of the W passes: a W
only ends at least its duration after its B (it still releases its memory then). Memory enters as what it
forces between ops: on device d with activation a and budget M, let k be the most microbatches whose
activations fit at once (k a <= M < (k + 1) a). When F(d, i + k) starts, microbatches i .. i + k - 1 have all
started their forwards there; if B(d, i) had not ended, none of their Bs would have (B runs in microbatch
order), and with the new one (k + 1) a would be live. So F(d, i + k) starts after B(d, i) ends. With the
backward split, B leaves the weight activation w_a live until W: if neither W(d, i) nor B(d, i + 1) had ended,
at least w_a + (k - 1) a + a would be live, so when k a + w_a > M, F(d, i + k) also starts after W(d, i) or
after B(d, i + 1), whichever ends first. Ops of two microbatches i < j on one device cannot overlap: for pairs
at least k apart the memory rule above already orders them; for the others each device has a literal "F(d, j)
starts after B(d, i) ends", else B(d, i) starts after F(d, j) ends (Fs of i and j, and Bs, are ordered by
microbatch order, and F(d, i) before B(d, j) by the chains). Once F(d, j) follows B(d, i) it follows it on every
later device too (F(j) moves down the pipeline, B(i) up), which is added as an implication: the literals of a
pair switch at most once, at the device where the two microbatches cross. The makespan is at least each B's end
plus what must follow it: its chain's tail (the rest of its backwards, the links, the last W) or the W of every
microbatch from it on, on its device, whichever is longer.

Every schedule of the problem with kinds in microbatch order meets all of this, so the relaxation's optimum,
and every bound CP-SAT proves on it, is a lower bound on the optimal makespan. It is also exact in the sense
that matters: on the memory-wall rows with one chunk at P = 8 its optimum is the optimizer's answer or within
1 % of it (P = 8, N = 16, budget 6: 59.58, that answer; N = 32, budget 6: 107.66 against 108.60, where the other
bounds gave 104.78), proven in 1.6 to 28 s with two workers on a shared 2-core machine. The pair literals
matter: with a no-overlap constraint per device in their place the same N = 32 row is not proven in 60 s. Where
the relaxation is not proven within its time its CP-SAT bound still rises (P = 16, N = 64, budget 6: 374.97 from
the window bound -> 378.61 in 20 s); at mid budgets its optimum can be below what the device relaxations prove
(P = 16, N = 32, budget 11: 121.44 against 122.70), as it drops the W passes' device time.

Only one chunk per device and the makespan: with chunks a device's ops of two microbatches can meet on either
chunk, and the crossing argument above is for one pass down and one up.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from ortools.sat.python import cp_model

from pipeplan import cpsat
from pipeplan.device_bound import Relaxation, chains
from pipeplan.merge_orders import order_literal
from pipeplan.problem import Op, OpKind, Problem
from pipeplan.simulate import Timeline
from pipeplan.spacing import add_spacing_cuts

# The most crossing literals (about N x (k - 1) x P, k the most microbatches a device's budget holds) for which
# the relaxation is built: larger budgets make the model too large to pay (P = 32, N = 128 at budget 22: 128 x 21
# x 32).
MAX_LITERALS = 40_000


# CP-SAT's workers on the relaxation, with two or more: the lower-bound search and the LP-heaviest tree search.
# Side by side on P = 16, N = 64, one chunk, budget 6 with the window bound as the floor (374.97), presolve off: 378.61
# in 20 s, where the default workers stay at the floor in 60 s; P = 16, N = 32, budget 6 proven (204.66) in 3.2 s
# against 20-35 s; P = 8, N = 32, budget 6 (107.66) in 10.5 s against 13-28 s.
SUBSOLVERS = ("objective_lb_search", "max_lp")


def in_flight(problem: Problem, device: int) -> int:
    """k of the module docstring for ``device``: the most microbatches whose activations its budget holds at
    once (at least 1); the microbatch count when memory never binds there."""
    limit = problem.max_in_flight(device)
    return problem.num_microbatches if limit is None else min(limit, problem.num_microbatches)


def applies(problem: Problem, objective: str = "makespan") -> bool:
    """Whether the relaxation is built for ``problem``: one chunk per device, the makespan, memory binding on
    some device, and not more than :data:`MAX_LITERALS` crossing literals."""
    if problem.num_chunks != 1 or objective != "makespan" or problem.budget is None:
        return False
    widths = [in_flight(problem, d) for d in range(problem.num_devices)]
    if min(widths) >= problem.num_microbatches:
        return False
    return problem.num_microbatches * (max(widths) - 1) * problem.num_devices <= MAX_LITERALS


def _waits_for_w(problem: Problem, device: int, k: int) -> bool:
    """Whether F(d, i + k) must also wait for W(d, i) or B(d, i + 1) (see the module docstring)."""
    if not problem.split_backward or problem.budget is None:
        return False
    stage = device
    kept = problem.weight_activation[stage]
    return kept > 0 and k * problem.activation[stage] + kept > problem.budget[device]


def relaxation(problem: Problem, floor: int = 0, spacings: Mapping[int, int] | None = None) -> Relaxation:
    """The relaxation of the ticked ``problem`` (one chunk; see the module docstring) as a CP-SAT model whose
    objective is at least ``floor`` (a bound already proven, ticks). ``spacings`` maps window sizes j to proven
    lower bounds on the time from F(0, m) to F(0, m + j) (:func:`pipeplan.spacing.window_deltas`, ticks)."""
    if problem.num_chunks != 1:
        raise ValueError("the collision relaxation is for one chunk per device")
    n, p = problem.num_microbatches, problem.num_devices
    model = cp_model.CpModel()
    horizon = int(math.ceil(problem.total_time())) + 1  # every op and latency in a row: no optimum is longer
    objective = model.new_int_var(0, horizon, "makespan")
    starts: dict[Op, cp_model.IntVar] = {}
    duration: dict[Op, int] = {}
    for m in range(n):
        for stage in range(p):
            for kind in (OpKind.F, OpKind.B):
                op = problem.op(kind, stage, m)
                starts[op] = model.new_int_var(0, horizon, f"{kind.value}_s{stage}_m{m}")
                duration[op] = int(problem.duration(op))

    def end(op: Op) -> cp_model.LinearExpr:
        return starts[op] + duration[op]

    for m in range(n):  # the chains, and each kind in microbatch order
        for stage in range(p):
            for kind in (OpKind.F, OpKind.B):
                op = problem.op(kind, stage, m)
                for dep, lag in problem.dependencies(op):
                    if dep in starts:
                        model.add(starts[op] >= end(dep) + int(lag))
                if m + 1 < n:
                    model.add(starts[problem.op(kind, stage, m + 1)] >= end(op))
    weight = [int(problem.backward_weight[s]) if problem.split_backward else 0 for s in range(p)]
    widths = [in_flight(problem, d) for d in range(p)]
    for d in range(p):  # memory: F(d, i + k) after B(d, i), and after W(d, i) or B(d, i + 1)
        k = widths[d]
        waits = _waits_for_w(problem, d, k)
        for i in range(n - k):
            later = starts[problem.op(OpKind.F, d, i + k)]
            b_i = problem.op(OpKind.B, d, i)
            model.add(later >= end(b_i))
            if waits:  # W(d, i) ends at least its duration after B(d, i) ends
                after_w = model.new_bool_var("")
                model.add(later >= end(b_i) + weight[d]).only_enforce_if(after_w)
                model.add(later >= end(problem.op(OpKind.B, d, i + 1))).only_enforce_if(~after_w)
    literal: dict[tuple[int, int, int], cp_model.IntVar] = {}
    for i in range(n):  # crossing literals of the pairs in flight
        for j in range(i + 1, min(n, i + max(widths))):
            crossed: list[cp_model.IntVar] = []
            for d in range(p):
                if j - i >= widths[d]:
                    continue  # ordered by memory already
                f_j, b_i = problem.op(OpKind.F, d, j), problem.op(OpKind.B, d, i)
                after = order_literal(model, starts[f_j], end(f_j), starts[b_i], end(b_i))
                if crossed:
                    model.add_implication(crossed[-1], after)
                crossed.append(after)
                literal[i, j, d] = after
    for (i, j, d), after in literal.items():  # microbatch order: a later F, or an earlier B, is ordered alike
        if (i, j + 1, d) in literal:
            model.add_implication(after, literal[i, j + 1, d])
        if (i - 1, j, d) in literal:
            model.add_implication(after, literal[i - 1, j, d])
    found = chains(problem)  # each B's tail: the Bs below it with their links, then the last W
    tails = [found.tail[problem.op(OpKind.B, d, 0)] for d in range(p)]
    for m in range(n):
        for d in range(p):
            b_op = problem.op(OpKind.B, d, m)
            model.add(objective >= end(b_op) + max(tails[d], (n - m) * weight[d]))
    if spacings:
        add_spacing_cuts(model, problem, starts, spacings)
    if floor > 0:
        model.add(objective >= floor)
    model.minimize(objective)
    return Relaxation(model, starts, objective)


def lower_bound(ticked: Problem, deadline: float, num_workers: int = 1, seed: int = 0, floor: float = 0.0,
                hint: Timeline | None = None, spacings: Mapping[int, int] | None = None,
                should_stop: Callable[[], bool] = lambda: False) -> float:
    """The best bound (ticks) CP-SAT proves on the relaxation of the ticked problem by ``deadline`` (a
    ``time.monotonic()`` value), never below ``floor``; ``floor`` itself when the relaxation does not apply
    (:func:`applies`) or no time is left. ``hint``: a schedule's replay (ticks) to start the search from."""
    seconds = deadline - time.monotonic()
    if not applies(ticked) or seconds <= 0:
        return floor
    relaxed = relaxation(ticked, floor=int(math.ceil(floor - 1e-9)), spacings=spacings)
    if hint is not None:
        relaxed.add_hint(hint)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = num_workers
    solver.parameters.random_seed = seed
    # Presolve off: it spends most of a share rebuilding no-overlaps from the crossing literals (18 s on P = 16,
    # N = 64, budget 6); and the workers search for a lower bound, not for schedules.
    solver.parameters.cp_model_presolve = False
    if num_workers >= 2:
        for name in SUBSOLVERS:
            solver.parameters.subsolvers.append(name)
    status = cpsat.run_stoppable(solver, relaxed.model, should_stop)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.UNKNOWN):
        raise RuntimeError(f"CP-SAT answered {solver.status_name(status)} on the collision relaxation: "
                           f"{solver.solution_info()}")
    return max(floor, float(solver.best_objective_bound))
