"""Large-neighbourhood search around an incumbent schedule: free a time window, keep the rest, re-solve.

CP-SAT on a whole pipeline at a tight budget creeps: with two workers its own neighbourhood moves share one
thread (on P = 32, N = 64, two chunks, it made one move of each kind in 18 s), and each improvement must
rearrange thousands of ops at once. This search instead repeats a small move:

1. take the incumbent's replayed timeline (in the model's integer ticks);
2. pick a window of time; ops that end before it keep their start times, ops that start after it keep their
   order on their device (they may move earlier), ops inside it are free;
3. ask CP-SAT, from the incumbent as a hint, for a schedule better than the incumbent within a short limit
   (without its linear relaxation, which costs more than it gives here: :func:`_without_linear_relaxation`;
   each op's start domain first narrowed to what the model's precedences imply, and a window those show to
   hold nothing better skipped without CP-SAT: :func:`_start_bounds`);
4. replay the order it finds (the simulator decides every value) and keep it when it is better.

First come tail windows (the last 20 %, 25 %, 30 % and 35 % of the incumbent as it is then: every op that
does not end before the window starts is free), each running for as long as it keeps finding better schedules:
the drain is where a makespan is decided, and a move there often needs a window wider than a 1 s sub-solve can
search (on P=16, N=32, two chunks in loop placement, 16 activations, a window over the last quarter of
interleaved zero bubble, given 13 s, holds a schedule 1.3 % faster, where every window of 10 % and 5 % holds
none; which width holds a move differs from row to row, so the tails widen in steps). Then windows slide from
the end of the schedule to its start, then shrink and widen, 1 s each. Every neighbourhood holds the incumbent,
so the schedule kept is always valid; a sub-solve asks for a strictly better one and may find none. A proven
bound never comes from here (a neighbourhood is a restriction, not a relaxation).
"""

from __future__ import annotations

import bisect
import logging
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from ortools.sat.python import cp_model

from pipeplan import cpsat
from pipeplan.metrics import compute_metrics
from pipeplan.problem import Op, Problem
from pipeplan.schedule import Schedule
from pipeplan.simulate import Timeline, simulate

log = logging.getLogger(__name__)

# Seconds one neighbourhood may take at most; short, so that many windows are tried within the time limit.
SUB_SOLVE_S = 1.0
# Seconds kept back from each sub-solve's limit for cloning the model and replaying its answer.
REPLAY_MARGIN_S = 0.3
# Window widths tried, as fractions of the incumbent's makespan, in turn.
WIDTHS = (0.1, 0.05, 0.2)
# Tail windows tried first, as fractions of the incumbent's makespan: everything after the window's start is
# free (the drain, where a makespan is decided). Widening in steps of 5 %: on the memory wall the width that holds
# a move differs between rows (P=16, N=32, two chunks in loop placement: 25 % at 16 activations, where 20 % is
# proven to hold none; 35 % at 11, where 25 % holds none).
TAIL_WIDTHS = (0.2, 0.25, 0.3, 0.35)
# A tail window runs while it improves (tail_done): at least TAIL_S seconds, then until it has gone TAIL_QUIET_S,
# or TAIL_QUIET_SHARE of the time it took to its last better schedule when that is longer, without a better one;
# at most TAIL_SHARE of the time left. A tail finds its moves in a stream: on P=16, N=32, loop, budget 11 the
# first tail, given 15 s, found 36 better schedules, one every 0.15 to 0.2 s, and was still improving when its
# time ran out, while the wider tails found none. Against a fixed 8 s (at most 35 % of the time left), in
# whole 60 s solves of the memory wall's 12 rows that miss their goal, it was better on six (P=16, N=32, V,
# budget 11: 102.87 against 103.09), worse on two and the same on four, and over the whole table at P <= 16
# better on ten rows, worse on seven by at most 0.18 and the same on 31 (docs/memory-wall-log.md).
TAIL_S = 3.0
TAIL_QUIET_S = 2.0
TAIL_QUIET_SHARE = 0.3
TAIL_SHARE = 0.6
# On models of more than LARGE_TAIL_OPS ops a tail window runs at least LARGE_TAIL_S seconds and at most
# LARGE_TAIL_SHARE of the time left: a tail of a model of 12,000 ops holds moves that take longer to find. On
# P=32, N=64, two chunks in loop placement, budget 32, from interleaved zero bubble (187.93), the tail of 25 % has
# a better schedule, which CP-SAT's first solution shows after 8.5 s (187.90; 187.71 after 16 s); given 8 s it
# finds none. There the search often has only the last 15 s of a 60 s solve, and a sliding window may hold what
# the tails do not: on P=32, N=128, V, budget 32 (60 s) the first sliding window, given its second at the end of
# the solve, found 340.96 against V-shape zero bubble's 341.02; with TAIL_SHARE the four tails, which found
# nothing, left it less, and the answer was V-shape zero bubble's. The memory wall's rows of 6,144 ops (P=16,
# N=64, two chunks) keep TAIL_S and TAIL_SHARE: with them, against the fixed tails, two of those eight rows came
# out better in the whole table's run, one worse by 0.12 and five the same.
LARGE_TAIL_S = 15.0
LARGE_TAIL_SHARE = 0.35
LARGE_TAIL_OPS = 10_000


@dataclass(frozen=True)
class TailRule:
    """How long a tail window runs: at least ``least_s`` seconds (then while it improves, :func:`tail_done`),
    at most ``share`` of the time left."""

    least_s: float
    share: float


def tail_rule(num_ops: int) -> TailRule:
    """The tail rule on a model of ``num_ops`` ops: :data:`LARGE_TAIL_S` and :data:`LARGE_TAIL_SHARE` above
    :data:`LARGE_TAIL_OPS`, else :data:`TAIL_S` and :data:`TAIL_SHARE`."""
    if num_ops > LARGE_TAIL_OPS:
        return TailRule(LARGE_TAIL_S, LARGE_TAIL_SHARE)
    return TailRule(TAIL_S, TAIL_SHARE)


def tail_done(elapsed: float, found_at: float, least: float) -> bool:
    """Whether a tail window's sub-solve that has run ``elapsed`` seconds, and found its last better schedule
    ``found_at`` seconds in (0 when none yet), should end: once it has run ``least`` seconds and gone
    :data:`TAIL_QUIET_S`, or :data:`TAIL_QUIET_SHARE` of ``found_at`` when that is longer, without a better one."""
    return elapsed > least and elapsed - found_at > max(TAIL_QUIET_S, TAIL_QUIET_SHARE * found_at)


class _TailWatch(cp_model.CpSolverSolutionCallback):
    """Watches a tail window's sub-solve: when it began and when it found its last solution (time.monotonic();
    when it began, while it has found none; each solution CP-SAT reports is better than the one before, as the
    sub-model minimizes the objective)."""

    def __init__(self, should_stop: Callable[[], bool], least: float) -> None:
        super().__init__()
        self.should_stop = should_stop
        self.least = least
        self.began = self.last = time.monotonic()
        # Seconds into the sub-solve when the rule ended it, and to its last better schedule then (a solution
        # may still come while CP-SAT stops); None while it has not.
        self.quiet: tuple[float, float] | None = None

    def on_solution_callback(self) -> None:
        self.last = time.monotonic()

    def stop(self) -> bool:
        """Whether the sub-solve should end now: the caller asks so, or :func:`tail_done`."""
        if self.should_stop():
            return True
        if self.quiet is None:
            elapsed, found_at = time.monotonic() - self.began, self.last - self.began
            if tail_done(elapsed, found_at, self.least):
                self.quiet = (elapsed, found_at)
        return self.quiet is not None


@dataclass(frozen=True)
class Neighbourhood:
    """A time window [begin, end) in ticks: ops inside it are free, the others keep their place or order."""

    begin: int
    end: int


def windows(makespan: int, seed: int) -> Iterator[Neighbourhood]:
    """Windows over [0, makespan): for each width in :data:`WIDTHS`, windows sliding from the end to the start
    with half-width overlap, then random ones."""
    rng = random.Random(seed)
    for fraction in WIDTHS:
        width = max(1, int(makespan * fraction))
        end = makespan
        while end > 0:
            yield Neighbourhood(max(0, end - width), end)
            end -= max(1, width // 2)
    while True:
        width = max(1, int(makespan * rng.choice(WIDTHS)))
        begin = rng.randrange(0, max(1, makespan - width + 1))
        yield Neighbourhood(begin, begin + width)


@dataclass(frozen=True)
class LnsModel:
    """What the search needs of a built CP-SAT model: the model, each op's start variable (keyed by op), each
    op's duration in ticks (keyed by op), the objective variable, and how to read an order from a solution.
    Optionally, the precedences the model holds, each as (before, after, ticks: after starts at least that long
    after before starts), and the ops whose end the objective is at least (none when it is no such maximum):
    from them each neighbourhood's start domains are narrowed before CP-SAT sees it (:func:`_start_bounds`).
    The model must not change once the search has read it: :attr:`graph` keeps its start domains as they were."""

    model: cp_model.CpModel
    starts: Mapping[Op, cp_model.IntVar]
    durations: Mapping[Op, int]
    objective: cp_model.IntVar
    read_order: Callable[[cp_model.CpSolver], Schedule]
    precedences: Sequence[tuple[Op, Op, int]] = ()
    objective_ends: Collection[Op] = ()

    @cached_property
    def graph(self) -> PrecedenceGraph:
        """The precedences by op number, built once."""
        return PrecedenceGraph.of(self)


@dataclass(frozen=True)
class PrecedenceGraph:
    """An :class:`LnsModel`'s ops numbered 0 .. n-1 and what its precedences say about their starts, by number:
    each op's start variable (its index in the model's proto), duration, start domain in the model ([lo, hi]),
    rank in a topological order of the precedences, the ops before and after it (each with the delay
    between their starts); and the ops whose end the objective is at least."""

    number: dict[int, int]  # proto index of an op's start variable -> the op's number
    index: list[int]  # each op's start variable's proto index, by number
    duration: list[int]
    lo: list[int]
    hi: list[int]
    rank: list[int]
    before: list[list[tuple[int, int]]]
    after: list[list[tuple[int, int]]]
    deadlines: list[int]

    @classmethod
    def of(cls, base: LnsModel) -> PrecedenceGraph:
        ops = list(base.starts)
        number = {op: k for k, op in enumerate(ops)}
        before: list[list[tuple[int, int]]] = [[] for _ in ops]
        after: list[list[tuple[int, int]]] = [[] for _ in ops]
        for first, second, delay in base.precedences:
            after[number[first]].append((number[second], delay))
            before[number[second]].append((number[first], delay))
        # Kahn's order: a rank for each op that every precedence ascends (ops on a cycle, which a model of a
        # schedule never has, come last; the bounds stay valid, only weaker).
        waiting = [len(edges) for edges in before]
        ready = [k for k, count in enumerate(waiting) if count == 0]
        rank = [len(ops)] * len(ops)
        for position, k in enumerate(_drain(ready, after, waiting)):
            rank[k] = position
        domains = [base.model.proto.variables[base.starts[op].index].domain for op in ops]
        return cls(number={base.starts[op].index: k for op, k in number.items()},
                   index=[base.starts[op].index for op in ops],
                   duration=[base.durations[op] for op in ops],
                   lo=[domain[0] for domain in domains], hi=[domain[len(domain) - 1] for domain in domains],
                   rank=rank, before=before, after=after,
                   deadlines=[number[op] for op in base.objective_ends])


def _drain(ready: list[int], after: list[list[tuple[int, int]]], waiting: list[int]) -> Iterator[int]:
    """The ops of ``ready`` and, as their last predecessor is taken, those after them (Kahn's algorithm)."""
    while ready:
        k = ready.pop()
        yield k
        for j, _ in after[k]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)


@dataclass(frozen=True)
class Placed:
    """The incumbent's timeline in the model's terms, built once per incumbent (:func:`placed`) and read by every
    window: per device, its ops' start variables (indices in the model's proto), starts and ends in ticks, all in
    start order (lists, for bisection), and their numbers in the model's :class:`PrecedenceGraph`; the hint (every
    op's start variable and start); and every op's number in the order :func:`_start_bounds` visits them (by
    start, end and rank)."""

    index: list[list[int]]
    number: list[list[int]]
    start: list[list[int]]
    end: list[list[int]]
    hint_vars: list[int]
    hint_values: list[int]
    order: list[int]


def placed(base: LnsModel, timeline: Timeline) -> Placed:
    """``timeline`` (a replay of the ticked problem) as :class:`Placed` for ``base``'s model. Ops on a device do
    not overlap, so in start order their ends ascend too."""
    graph = base.graph
    # device -> (start, position, duration, proto index, number)
    rows: dict[int, list[tuple[int, int, int, int, int]]] = {}
    hint_vars, hint_values, numbers = [], [], []
    for position, (op, device, start) in enumerate(zip(timeline.ops, timeline.device, timeline.start)):
        index, tick = base.starts[op].index, int(round(start))
        number = graph.number[index]
        rows.setdefault(device, []).append((tick, position, base.durations[op], index, number))
        hint_vars.append(index)
        hint_values.append(tick)
        numbers.append(number)
    # Start ties (ops of no duration) keep the timeline's order, as a stable sort by start would.
    devices = [sorted(row) for _, row in sorted(rows.items())]
    # In the incumbent every precedence runs from an earlier start to a later one, or, at one start, from an op of
    # no duration, whose end comes first, or between two such ops in rank order; so does every device's order,
    # but between ops of no duration that start together, which it keeps in the timeline's order.
    keyed = sorted((tick, tick + graph.duration[k], graph.rank[k], k) for k, tick in zip(numbers, hint_values))
    return Placed(index=[[index for *_, index, _ in row] for row in devices],
                  number=[[k for *_, k in row] for row in devices],
                  start=[[start for start, *_ in row] for row in devices],
                  end=[[start + duration for start, _, duration, *_ in row] for row in devices],
                  hint_vars=hint_vars, hint_values=hint_values, order=[k for *_, k in keyed])


def _start_bounds(graph: PrecedenceGraph, incumbent: Placed, window: Neighbourhood,
                  bound: int) -> tuple[list[int], list[int]] | None:
    """The earliest and the latest start (ticks) of every op, by number, in the neighbourhood of ``window``
    around ``incumbent`` with the objective at most ``bound``, as far as its precedences show; None when they show
    it holds no schedule at all.

    Every schedule of the neighbourhood keeps its op starts within these bounds, so narrowing the start domains
    to them loses no schedule. The argument: the neighbourhood's model holds each op's start in its domain
    [lo, hi]; a held op's start at its incumbent value; the start of an op after another, by a precedence of the
    model or by the order kept on a device after the window, at least the other's start plus the delay between
    them (on a device, the other's duration); and, when the objective is at least an op's end, that op's start
    at most ``bound`` minus its duration. So if every op before an op k starts at or after its earliest time,
    k starts at or after the most of its own lo and each of theirs plus the delay, which is what the forward
    pass gives k when it visits those ops first; any order of visits gives valid bounds, and the incumbent's
    (by start, then end, then rank) visits every op after those before it when the incumbent keeps every
    precedence, so one pass gives the tightest bounds these constraints imply (valid bounds, if not always the
    tightest, where it does not, or where ops of no duration start together on a device, whose kept order may
    differ from their rank). The backward pass is the same argument mirrored, down from hi and the objective's
    bound. An op whose earliest start is after its latest, or a held op whose start lies outside its domain or
    past the objective's cap, has no start in any schedule of the neighbourhood, so the neighbourhood holds
    none."""
    earliest, latest, duration = graph.lo[:], graph.hi[:], graph.duration
    for k in graph.deadlines:
        latest[k] = min(latest[k], bound - duration[k])
    held = [False] * len(earliest)
    previous = [-1] * len(earliest)  # the op before, on its device, of an op whose order is kept
    following = [-1] * len(earliest)
    for numbers, start, end in zip(incumbent.number, incumbent.start, incumbent.end):
        for i in range(bisect.bisect_right(end, window.begin)):
            k = numbers[i]
            if not earliest[k] <= start[i] <= latest[k]:  # outside its domain, or past the objective's cap
                return None
            held[k] = True
            earliest[k] = latest[k] = start[i]
        kept = numbers[bisect.bisect_left(start, window.end):]
        for first, second in zip(kept, kept[1:]):
            following[first], previous[second] = second, first
    for k in incumbent.order:
        if held[k]:
            continue
        least = earliest[k]
        for j, delay in graph.before[k]:
            least = max(least, earliest[j] + delay)
        j = previous[k]
        earliest[k] = least if j < 0 else max(least, earliest[j] + duration[j])
    for k in reversed(incumbent.order):
        if held[k]:
            continue
        most = latest[k]
        for j, delay in graph.after[k]:
            most = min(most, latest[j] - delay)
        j = following[k]
        latest[k] = most if j < 0 else min(most, latest[j] - duration[k])
        if latest[k] < earliest[k]:
            return None
    return earliest, latest


def _restrict(base: LnsModel, incumbent: Placed, window: Neighbourhood, bound: int) -> cp_model.CpModel | None:
    """A copy of the model with the incumbent's ops outside ``window`` held, the incumbent as a hint and the
    objective below ``bound``: an op that ends by the window's start keeps its start, the ops that start at or
    after its end keep their order on their device. Each other op's start domain is narrowed to the bounds of
    :func:`_start_bounds`, and None is returned when those show the neighbourhood holds no schedule.

    Written into the copy's proto directly (a held start's domain narrowed to one value, an order as a linear
    row), the same constraints as ``model.add(start == value)`` and ``model.add(next >= start + duration)``: the
    expression builder took half of each window's time on P=16, N=32, two chunks in loop placement, budget 11
    (0.11 s a window to build its model, against about as much in CP-SAT; 0.03 s to build it now).

    The narrowed domains save CP-SAT's presolve the same work: on P=16, N=32, two chunks in V placement, budget
    11, it propagated the precedences through the held ops and the kept orders for 0.65 to 0.9 s of a sliding
    window's second (over a hundred rounds), where the search then had the rest; from the narrowed domains its
    presolve takes about 0.2 s."""
    graph = base.graph
    bounds = _start_bounds(graph, incumbent, window, bound)
    if bounds is None:
        return None
    model = base.model.clone()
    proto = model.proto
    for index, start, end in zip(incumbent.index, incumbent.start, incumbent.end):
        for i in range(bisect.bisect_left(start, window.end), len(index) - 1):
            row = proto.constraints.add().linear
            row.vars.extend((index[i + 1], index[i]))
            row.coeffs.extend((1, -1))
            row.domain.extend((end[i] - start[i], cp_model.INT_MAX))  # its duration
    # Within each op's domain [lo, hi] (_start_bounds only raises lo and lowers hi, and returns None where they
    # cross or a held op lies outside it); a held op's bounds are its start, which holds it there.
    earliest, latest = bounds
    for k, variable in enumerate(graph.index):
        if (earliest[k], latest[k]) != (graph.lo[k], graph.hi[k]):
            domain = proto.variables[variable].domain
            domain.clear()
            domain.extend((earliest[k], latest[k]))
    model.clear_hints()  # type: ignore[no-untyped-call]
    proto.solution_hint.vars.extend(incumbent.hint_vars)
    proto.solution_hint.values.extend(incumbent.hint_values)
    model.add(model.get_int_var_from_proto_index(base.objective.index) <= bound)
    return model


# CP-SAT's workers (OR-Tools 9.15) that build a linear relaxation whatever linearization_level says.
LP_WORKERS = ("default_lp", "max_lp", "max_lp_sym", "reduced_costs", "pseudo_costs", "lb_tree_search",
              "objective_lb_search", "objective_lb_search_max_lp", "objective_shaving_max_lp", "probing_max_lp",
              "quick_restart_max_lp")


def _without_linear_relaxation(solver: cp_model.CpSolver) -> None:
    """Run ``solver`` without CP-SAT's linear relaxation: no linearization, and none of the workers of
    :data:`LP_WORKERS` (CP-SAT takes the next ones in its order instead; with two workers its one full-problem
    worker becomes the ``fixed`` search instead of ``default_lp``).

    Setting the relaxation up can overrun a sub-solve's short limit by seconds: on the memory-wall row P=16, N=32,
    two chunks in V placement, 11 activations, one neighbourhood given 1 s took 5.2 s in ``default_lp`` (0
    conflicts; ``stop_search`` from another thread did not end it sooner), so a 60 s solve took 63.4 s. Without the
    relaxation the same sub-model ends in 1.0-1.1 s with 1 to 6 workers (5.4 s with 1 or 2 before). With 8 it takes
    3.0-3.1 s whether ``default_lp`` alone or all of them are left out: CP-SAT's probing worker, which joins at 8,
    overruns as well, with or without a relaxation of its own (left as it is). With 2 workers, on seven memory-wall
    rows at 60 s, the answers were as good or better without it (e.g. P=8, N=32, one chunk, 6 activations: 108.60
    against 109.66); the answers with more workers were not measured (the machine has 2 cores).
    """
    solver.parameters.linearization_level = 0
    solver.parameters.ignore_subsolvers.extend(LP_WORKERS)


def improve(base: LnsModel, problem: Problem, incumbent: Schedule, value_of: Callable[[Timeline], float],
            deadline: float, num_workers: int, seed: int = 0, target: float = 0.0,
            should_stop: Callable[[], bool] = lambda: False,
            on_improvement: Callable[[Schedule], None] = lambda schedule: None,
            tail: TailRule | None = None) -> Schedule:
    """The best schedule found by neighbourhood moves from ``incumbent`` until ``deadline`` (time.monotonic())
    or until its value reaches ``target`` (a proven lower bound in ticks, as the whole number of ticks it
    proves: :func:`pipeplan.cpsat.whole_ticks`, since values are whole ticks).

    ``problem`` is the ticked problem the model was built from; ``value_of`` gives a replayed timeline's
    objective in ticks; ``on_improvement`` is given each better schedule as it is found; ``tail`` is how long
    each tail window runs (:func:`tail_rule`; that of small models when None).
    Returns ``incumbent`` itself when no move improved it.
    """
    rule = tail or tail_rule(0)  # a small model's
    best = incumbent
    timeline = simulate(problem, best)
    value = value_of(timeline)
    held = placed(base, timeline)
    tried = improved = empty = 0

    def neighbourhoods() -> Iterator[tuple[Neighbourhood, bool]]:
        """Each window and whether it is a tail: the tails, then the sliding windows. Lazy, so each is cut from
        the incumbent as it is when its turn comes (a tail may have shortened it)."""
        def end() -> int:
            return int(round(max(timeline.end)))

        for width in TAIL_WIDTHS:
            yield Neighbourhood(int(end() * (1 - width)), end()), True
        for window in windows(end(), seed):
            yield window, False

    for window, is_tail in neighbourhoods():
        left = deadline - time.monotonic() - REPLAY_MARGIN_S
        if left < 0.1 or value <= cpsat.whole_ticks(target) or should_stop():
            break
        model = _restrict(base, held, window, int(round(value)) - 1)
        tried += 1
        if model is None:  # its precedences alone show the window holds nothing better
            empty += 1
            continue
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = rule.share * left if is_tail else min(SUB_SOLVE_S, left)
        solver.parameters.num_workers = num_workers
        solver.parameters.random_seed = seed + tried
        _without_linear_relaxation(solver)
        # Ctrl-C is the caller's: its handler makes should_stop() true, which also ends a sub-solve under way.
        if is_tail:
            watch = _TailWatch(should_stop, rule.least_s)
            status = cpsat.run_stoppable(solver, model, watch.stop, watch)
        else:
            status = cpsat.run_stoppable(solver, model, should_stop)
        if status == cp_model.MODEL_INVALID:  # a bug in the sub-model or its parameters, never an answer
            raise RuntimeError(f"CP-SAT rejected a neighbourhood's model: {solver.solution_info()}")
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue
        candidate = base.read_order(solver)
        replay = simulate(problem, candidate)
        if compute_metrics(replay).feasible and value_of(replay) < value:
            best, timeline, value = candidate, replay, value_of(replay)
            held = placed(base, timeline)
            improved += 1
            log.info("LNS window [%d, %d): %s", window.begin, window.end, value)
            on_improvement(best)
    log.info("LNS: %d neighbourhoods (%d shown empty by their precedences), %d improvements", tried, empty, improved)
    return best
