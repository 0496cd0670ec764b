"""The optimal schedule for a memory budget, with OR-Tools CP-SAT, and a proven bound on how far from optimal.

The model is built in a fixed order, one function a step: data (integer ticks), warm starts (every named
schedule and the greedy list schedulers, replayed), variables (one fixed-size interval per op), constraints
(precedence, no overlap per device, the activation budget as a cumulative, symmetry breaking, lower bounds),
objective, solve, read back. The schedule read back is only an order per device; the simulator replays it in
the problem's exact units and that replay is the result, so every number a user sees comes from one place.

Objectives:

- ``makespan``: the step ends when every device is done (synchronous optimizer step).
- ``stage_span``: the largest per-device span, last end - first start (the Zero Bubble paper's cost). A
  runtime starts each device's first op as soon as its input arrives; an order can still start a device late
  by opening with a microbatch that arrives later. The model lets each device's span start at any time (a
  relaxation of what orders can do), so its bound is proven; the order it finds is replayed, and the replay's
  span is the answer, OPTIMAL only when it meets the bound.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from pipeplan import schedules
from pipeplan.config import OBJECTIVES
from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.problem import ConfigError, Op, OpKind, Problem
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.schedules.greedy import greedy_schedules
from pipeplan.simulate import Timeline, simulate

log = logging.getLogger(__name__)

OPTIMAL = "OPTIMAL"
FEASIBLE = "FEASIBLE"

# Largest power of ten tried when turning float costs into integer ticks; beyond it values are rounded.
_MAX_SCALE_EXPONENT = 6
_EPS = 1e-9


class InfeasibleBudget(ConfigError):
    """No schedule at all fits the budget; the message gives the smallest budget that would."""


@dataclass(frozen=True)
class Progress:
    """A progress report during a solve: elapsed wall time (s), best objective and bound (config's unit)."""

    elapsed_s: float
    objective: float | None
    bound: float | None


ProgressCallback = Callable[[Progress], None]


@dataclass(frozen=True)
class SolveResult:
    """The optimizer's answer. Times in the config's unit.

    ``schedule``, ``timeline`` and ``metrics`` are the replay of the solver's per-device orders (named
    "optimal"); ``objective`` is that replay's makespan or stage span. ``lower_bound`` is proven: no schedule
    within the budget does better. ``source`` says where the returned order came from: "cp-sat", or the name
    of a warm start that the solver did not improve on within its time.
    """

    status: str
    objective_name: str
    objective: float
    lower_bound: float
    gap: float
    solve_time_s: float
    schedule: Schedule
    timeline: Timeline
    metrics: Metrics
    source: str
    best_heuristic: str
    best_heuristic_objective: float
    ticks_per_unit: int
    heuristics: dict[str, float] = field(default_factory=dict)
    """Objective of every feasible warm start, keyed by its name."""
    solver_objective: float | None = None
    """CP-SAT's own objective value (config's unit) when the order came from CP-SAT, else None."""
    solver_times: dict[Op, tuple[float, float]] | None = None
    """CP-SAT's (start, end) of every op (config's unit) when the order came from CP-SAT and the costs are whole
    ticks (else CP-SAT solved a rounded-down relaxation and its times are not the problem's); the replay starts
    each op no later, and reaches the same objective when the solve is optimal."""


# ---------------------------------------------------------------------------------------------- data


def _scale_for(values: Sequence[float]) -> tuple[int, bool]:
    """The smallest power of ten that makes every value a whole number of ticks (within 1e-6 of a tick), and
    whether one up to 10**6 does."""
    for exponent in range(_MAX_SCALE_EXPONENT + 1):
        scale = 10**exponent
        if all(abs(v * scale - round(v * scale)) <= 1e-6 for v in values):
            return scale, True
    return 10**_MAX_SCALE_EXPONENT, False


def _all_times(problem: Problem) -> list[float]:
    return [*problem.forward_per_stage, *problem.backward_per_stage, *problem.backward_weight_per_stage,
            *problem.comm_per_stage]


def tick_problem(problem: Problem) -> tuple[Problem, int, bool]:
    """The problem in integer ticks for CP-SAT: (ticked problem, ticks per time unit, exact).

    Times are multiplied by the smallest power of ten (up to 10**6) that makes every cost and latency whole,
    memory likewise. When no such power exists the ticked problem is a relaxation of the real one: durations
    and memory demands are rounded down and budgets up, so every real schedule stays feasible there and its
    lower bounds stay valid; the real problem's replay decides feasibility and values either way.
    """
    time_scale, exact_time = _scale_for(_all_times(problem))
    act = problem.activation_per_stage
    wact = problem.weight_activation_per_stage
    budget = problem.budget_per_device
    memory_scale, exact_memory = _scale_for([*act, *wact, *(budget or ())])
    exact = exact_time and exact_memory
    if not exact:
        log.warning("costs or memory are not whole ticks at 1e-6; CP-SAT solves a rounded-down relaxation")

    def down(values: Sequence[float], scale: int) -> list[float]:
        return [float(math.floor(v * scale + 1e-6)) for v in values]

    weights = down(problem.backward_weight_per_stage, time_scale)
    if problem.split_backward and min(weights) == 0:
        raise ConfigError(
            f"costs.backward_weight {min(problem.backward_weight_per_stage):g} is below the solver's resolution "
            f"(1e-6 of the config's unit next to costs up to {max(_all_times(problem)):g}); express times in a "
            "smaller unit"
        )

    held_after_b = down([a - w for a, w in zip(act, wact)], memory_scale)
    held_until_w = down(wact, memory_scale)
    ticked = replace(
        problem,
        forward=down(problem.forward_per_stage, time_scale),
        backward=down(problem.backward_per_stage, time_scale),
        backward_weight=weights,
        comm=down(problem.comm_per_stage, time_scale),
        activation=[b + w for b, w in zip(held_after_b, held_until_w)],
        weight_activation=held_until_w,
        budget=None if budget is None else [float(math.ceil(b * memory_scale - 1e-6)) for b in budget],
    )
    return ticked, time_scale, exact


def objective_of(metrics: Metrics, objective: str) -> float:
    """The value of ``objective`` ('makespan' or 'stage_span') for a replayed schedule."""
    return metrics.makespan if objective == "makespan" else metrics.stage_span


def minimum_budget(problem: Problem) -> list[float]:
    """Per device, the least budget that admits any schedule: one microbatch's activations on all its chunks.

    A microbatch's forward on a device's first chunk stays live until its backward there, which needs its
    forwards on every later chunk: so one microbatch alone holds all its chunks' activations at once.
    """
    return [
        sum(problem.activation_per_stage[s] for s in problem.stages_on_device(d)) for d in range(problem.num_stages)
    ]


# ------------------------------------------------------------------------------------------- warm starts


@dataclass(frozen=True)
class _Candidate:
    schedule: Schedule
    metrics: Metrics
    objective: float
    named: bool


def warm_starts(problem: Problem, objective: str, extra: Sequence[Schedule] = ()) -> list[_Candidate]:
    """Every feasible heuristic schedule (and every feasible ``extra`` one), replayed on ``problem``, best
    objective first; named schedules win ties."""
    found: list[tuple[Schedule, bool]] = [(s, True) for s in schedules.generate_applicable(problem)[0]]
    found.append((gpipe_with_flush_size(problem, 1, name="gpipe-1"), False))
    found.extend((schedule, False) for schedule in greedy_schedules(problem))
    found.extend((schedule, False) for schedule in extra)
    candidates = []
    for schedule, named in found:
        try:
            metrics = compute_metrics(simulate(problem, schedule))
        except ScheduleError as exc:
            log.warning("warm start %s is not a valid schedule, skipped: %s", schedule.name, exc)
            continue
        if metrics.feasible:
            candidates.append(_Candidate(schedule, metrics, objective_of(metrics, objective), named))
    candidates.sort(key=lambda c: (c.objective, not c.named))
    return candidates


# ---------------------------------------------------------------------------------------- lower bounds


def _first_forward_time(problem: Problem) -> list[float]:
    """Per model stage, the earliest start of its first forward: all forwards and links before it."""
    starts = [0.0]
    for s in range(1, problem.num_model_stages):
        starts.append(starts[-1] + problem.forward_per_stage[s - 1] + problem.link_latency(s - 1))
    return starts


def _round_trip(problem: Problem, stage: int) -> float:
    """From the start of F(stage, m) to the earliest start of B(stage, m): forwards up, backwards down."""
    last = problem.num_model_stages - 1
    up = sum(problem.forward_per_stage[s] + problem.link_latency(s) for s in range(stage, last))
    down = sum(problem.backward_per_stage[s] + problem.link_latency(s - 1) for s in range(stage + 1, last + 1))
    return up + problem.forward_per_stage[last] + down


def _tail_fill(problem: Problem, stage: int, in_flight: int) -> float:
    """The most work device ``stage`` can do between the end of its last forward and the start of its last B.

    When F(s, N-1) starts, x microbatches are past their forward but not their B (activation each) and y past
    their B but not their W (weight_activation each), and the budget must still fit the new forward. Only
    their B and W (and the x new W) can fill the window: x (B + W) + y W at most, maximised here over x, y.
    """
    n = problem.num_microbatches
    act = problem.activation_per_stage[stage]
    wact = problem.weight_activation_per_stage[stage]
    b, w = problem.backward_per_stage[stage], problem.backward_weight_per_stage[stage]
    budget = problem.budget_per_device
    room = math.inf if budget is None else budget[problem.device_of(stage)] - act
    best = 0.0
    for x in range(min(in_flight - 1, n - 1) + 1):
        left = room - x * act
        if left < -_EPS:
            break
        y_max = n - 1 - x
        if wact > 0 and math.isfinite(left):
            y_max = min(y_max, int(math.floor(left / wact + 1e-9)))
        best = max(best, x * (b + w) + (y_max * w if problem.split_backward else 0.0))
    return best


def _memory_chain(problem: Problem, stage: int, in_flight: int, window: float) -> float:
    """A span the budget forces on the device of ``stage`` (one chunk per device): with room for k in flight,
    F(m + k) cannot start before B(m) ends, and B(m) not before a round trip after F(m) starts.

    (Were B(m) still running or waiting, microbatches m .. m+k-1 would all hold their activation.) If even
    k weight activations and one activation overflow the budget, F(m + k) also waits for W(m). So F(N-1)
    starts at least r F + q (trip + B [+ W]) after F(0), with N - 1 = q k + r, and the device still runs its
    B and W after another trip.
    """
    f, b, w = (problem.forward_per_stage[stage], problem.backward_per_stage[stage],
               problem.backward_weight_per_stage[stage])
    step = window + b
    budget = problem.budget_per_device
    held = in_flight * problem.weight_activation_per_stage[stage] + problem.activation_per_stage[stage]
    if problem.split_backward and budget is not None and held > budget[problem.device_of(stage)] * (1 + _EPS):
        step += w
    q, r = divmod(problem.num_microbatches - 1, in_flight)
    return r * f + q * step + window + b + w


def device_lower_bounds(problem: Problem) -> list[tuple[float, float]]:
    """Per device, (earliest first start, least span) that every schedule within the budget obeys.

    The span is at least the device's work plus the idle time it cannot avoid. With one chunk per device:

    - head window: from the start of F(d, 0) to the start of B(d, 0) lies a round trip up and down the
      pipeline; only forwards can run in it (backwards go in microbatch order and W follows its B), at most as
      many as the budget holds, so the rest of it is idle;
    - tail window: from the end of F(d, N-1) to the start of B(d, N-1) lies the same trip less one forward;
      only the B and W of microbatches still held in memory can fill it (:func:`_tail_fill`);
    - memory chain: a tight budget spaces the forwards a round trip apart (:func:`_memory_chain`).

    When the budget cannot hold all N microbatches, B(d, 0) starts before F(d, N-1) and the windows are
    disjoint, so their idle times add; otherwise the larger counts. Valid for the symmetry-broken model, hence
    for the problem (see :func:`_add_symmetry`).
    """
    head = _first_forward_time(problem)
    n = problem.num_microbatches
    bounds = []
    for d in range(problem.num_stages):
        stages = problem.stages_on_device(d)
        start = min(head[s] for s in stages)
        span = problem.device_work(d)
        if problem.num_chunks == 1:
            (s,) = stages
            in_flight = min(n, problem.max_in_flight(d) or n)
            window = _round_trip(problem, s)
            idle_head = max(0.0, window - in_flight * problem.forward_per_stage[s])
            idle_tail = max(0.0, window - problem.forward_per_stage[s] - _tail_fill(problem, s, in_flight))
            span += idle_head + idle_tail if n > in_flight else max(idle_head, idle_tail)
            span = max(span, _memory_chain(problem, s, in_flight, window))
        bounds.append((start, span))
    return bounds


def device_end_lower_bounds(problem: Problem) -> list[float]:
    """Per device, a time before which it cannot finish, in any schedule within the budget.

    Besides its first start plus its least span: the last B on device d is B(s, N-1) of its lowest stage s (it
    depends on every other B there). By its end the device has done all its work except the W it still holds;
    those hold weight_activation each, so the budget limits how many. From there a chain of backwards (and
    links) runs down to every lower stage s', whose device then still runs W(s', N-1).
    """
    n = problem.num_microbatches
    split = problem.split_backward
    budget = problem.budget_per_device
    ends = [start + span for start, span in device_lower_bounds(problem)]
    head = _first_forward_time(problem)
    for d in range(problem.num_stages):
        stages = problem.stages_on_device(d)
        lowest = min(stages)
        work_fb = n * sum(problem.forward_per_stage[s] + problem.backward_per_stage[s] for s in stages)
        last_b_end = head[lowest] + work_fb
        if split:
            held_max = n * len(stages)
            min_wact = min(problem.weight_activation_per_stage[s] for s in stages)
            if budget is not None and min_wact > 0:
                held_max = min(held_max, int(math.floor(budget[d] / min_wact + 1e-9)))
            w_max = max(problem.backward_weight_per_stage[s] for s in stages)
            last_b_end = max(last_b_end, head[lowest] + problem.device_work(d) - held_max * w_max)
        chain = last_b_end
        for target in range(lowest, -1, -1):
            if target < lowest:
                chain += problem.link_latency(target) + problem.backward_per_stage[target]
            device = problem.device_of(target)
            ends[device] = max(ends[device], chain + problem.backward_weight_per_stage[target])
    return ends


def makespan_lower_bound(problem: Problem) -> float:
    """A makespan no schedule within the budget beats: the latest of the devices' earliest ends."""
    return max(device_end_lower_bounds(problem))


def stage_span_lower_bound(problem: Problem) -> float:
    """A stage span no schedule within the budget beats: per device, its least span, and its earliest end
    less its earliest start. The latter holds when a device starts late too: the chains that bound its end
    start from its own first forward (or a stage feeding it), so they move later with it."""
    head = _first_forward_time(problem)
    starts = [head[min(problem.stages_on_device(d))] for d in range(problem.num_stages)]
    spans = [span for _, span in device_lower_bounds(problem)]
    ends = device_end_lower_bounds(problem)
    return max(max(spans), max(end - start for end, start in zip(ends, starts)))


# -------------------------------------------------------------------------------------------- the model


@dataclass
class _Task:
    """One op in the model: its start variable, its fixed duration (ticks) and its interval."""

    start: cp_model.IntVar
    duration: int
    interval: cp_model.IntervalVar

    @property
    def end(self) -> cp_model.LinearExprT:
        return self.start + self.duration


class _Model:
    """A CP-SAT model of one problem in ticks, built step by step in the constructor."""

    def __init__(self, problem: Problem, objective: str, horizon: int) -> None:
        self.problem = problem
        self.objective_name = objective
        self.horizon = horizon
        self.model = cp_model.CpModel()
        self.tasks: dict[Op, _Task] = {}  # keyed by op
        self._add_variables()
        self._add_precedences()
        self._add_no_overlap()
        self._add_budget()
        _add_symmetry(self)
        self.objective = self._add_objective()

    def _add_variables(self) -> None:
        """One fixed-size interval per op; its start domain runs from the earliest time its chain allows."""
        problem = self.problem
        earliest: dict[Op, int] = {}  # keyed by op; ops come in dependency order from the chain walk below
        for op in _ops_in_dependency_order(problem):
            duration = int(problem.duration(op))
            lo = max((earliest[dep] + int(problem.duration(dep)) + int(lag)
                      for dep, lag in problem.dependencies(op)), default=0)
            earliest[op] = lo
            name = f"{op.kind.value}_s{op.stage}_m{op.microbatch}"
            start = self.model.new_int_var(lo, max(lo, self.horizon - duration), name)
            interval = self.model.new_fixed_size_interval_var(start, duration, f"i_{name}")
            self.tasks[op] = _Task(start, duration, interval)

    def _add_precedences(self) -> None:
        for op, task in self.tasks.items():
            for dep, lag in self.problem.dependencies(op):
                self.model.add(task.start >= self.tasks[dep].end + int(lag))

    def _add_no_overlap(self) -> None:
        for d in range(self.problem.num_stages):
            self.model.add_no_overlap(
                [self.tasks[op].interval for op in self.tasks if self.problem.device_of(op.stage) == d]
            )

    def _add_budget(self) -> None:
        """Live activations as a cumulative per device: [start F, end B) and, split, [start F, end W)."""
        problem = self.problem
        budget = problem.budget_per_device
        if budget is None:
            return
        for d in range(problem.num_stages):
            intervals, demands = [], []
            for s in problem.stages_on_device(d):
                act = int(problem.activation_per_stage[s])
                wact = int(problem.weight_activation_per_stage[s])
                for m in range(problem.num_microbatches):
                    f = self.tasks[problem.op(OpKind.F, s, m)]
                    releases = [(OpKind.B, act - wact if problem.split_backward else act)]
                    if problem.split_backward:
                        releases.append((OpKind.W, wact))
                    for kind, demand in releases:
                        if demand <= 0:
                            continue
                        release = self.tasks[problem.op(kind, s, m)]
                        size = self.model.new_int_var(0, self.horizon, f"live_{kind.value}_s{s}_m{m}")
                        intervals.append(self.model.new_interval_var(f.start, size, release.end, f"mem_{s}_{m}"))
                        demands.append(demand)
            if intervals:
                self.model.add_cumulative(intervals, demands, int(budget[d]))

    def _device_sinks(self, d: int) -> list[_Task]:
        """The ops on device d that no other op on d follows by dependency: W when split, else B."""
        kind = OpKind.W if self.problem.split_backward else OpKind.B
        return [self.tasks[op] for op in self.tasks if op.kind is kind and self.problem.device_of(op.stage) == d]

    def _add_objective(self) -> cp_model.IntVar:
        problem = self.problem
        obj = self.model.new_int_var(0, self.horizon, self.objective_name)
        if self.objective_name == "makespan":
            for d in range(problem.num_stages):
                for task in self._device_sinks(d):
                    self.model.add(obj >= task.end)
            self.model.add(obj >= math.ceil(makespan_lower_bound(problem) - _EPS))
        else:
            # Spans do not change when the whole schedule shifts, so the first op of all starts at 0.
            self.model.add(self.tasks[problem.op(OpKind.F, 0, 0)].start == 0)
            for d in range(problem.num_stages):
                first = self.tasks[problem.op(OpKind.F, min(problem.stages_on_device(d)), 0)]
                for task in self._device_sinks(d):
                    self.model.add(obj + first.start >= task.end)
            self.model.add(obj >= math.ceil(stage_span_lower_bound(problem) - _EPS))
        self.model.minimize(obj)
        return obj

    def add_hint(self, timeline: Timeline) -> None:
        """Start the search from a replayed schedule (in ticks)."""
        for op, start in zip(timeline.ops, timeline.start):
            self.model.add_hint(self.tasks[op].start, int(round(start)))


def _ops_in_dependency_order(problem: Problem) -> list[Op]:
    """All ops so that each comes after its dependency: forwards up the stages, backwards down, then W."""
    stages = range(problem.num_model_stages)
    mbs = range(problem.num_microbatches)
    ops = [problem.op(OpKind.F, s, m) for s in stages for m in mbs]
    ops += [problem.op(OpKind.B, s, m) for s in reversed(stages) for m in mbs]
    if problem.split_backward:
        ops += [problem.op(OpKind.W, s, m) for s in stages for m in mbs]
    return ops


def _add_symmetry(m: _Model) -> None:
    """On every stage, each kind of op runs in microbatch order.

    Microbatches are interchangeable (same costs and memory on a stage), so this keeps an optimal schedule:
    take any schedule and, stage by stage in dependency order, give the k-th slot of each kind to microbatch k.
    Its input is ready no later than the k-th earliest input, because the stage before was already reordered
    the same way, so every slot stays feasible; the memory of a device depends only on when allocations and
    releases happen, not on which microbatch they belong to, so the budget still holds; and the per-device
    times, hence makespan and spans, do not change.
    """
    problem = m.problem
    for s in range(problem.num_model_stages):
        for kind in problem.kinds:
            for mb in range(problem.num_microbatches - 1):
                before = m.tasks[problem.op(kind, s, mb)]
                after = m.tasks[problem.op(kind, s, mb + 1)]
                m.model.add(after.start >= before.end)


class _Progress(cp_model.CpSolverSolutionCallback):
    """Reports each new solution (and bound) through the user's callback, in the config's unit."""

    def __init__(self, callback: ProgressCallback | None, scale: int, started: float) -> None:
        super().__init__()
        self.callback = callback
        self.scale = scale
        self.started = started

    def on_solution_callback(self) -> None:
        if self.callback is not None:
            self.callback(Progress(time.monotonic() - self.started, self.objective_value / self.scale,
                                   self.best_objective_bound / self.scale))


def _read_order(model: _Model, solver: cp_model.CpSolver, name: str) -> Schedule:
    """Per-device orders from the solution: by start, then end (zero-length ops), then dependency order."""
    problem = model.problem
    rank = {op: i for i, op in enumerate(_ops_in_dependency_order(problem))}  # keyed by op
    orders: list[list[Op]] = [[] for _ in range(problem.num_stages)]
    for op in model.tasks:
        orders[problem.device_of(op.stage)].append(op)
    for order in orders:
        order.sort(key=lambda op: (solver.value(model.tasks[op].start),
                                   solver.value(model.tasks[op].start) + model.tasks[op].duration, rank[op]))
    return Schedule.from_lists(name, orders)


# ------------------------------------------------------------------------------------------------ solve


def solve(
    problem: Problem,
    *,
    objective: str = "makespan",
    time_limit_s: float = 60.0,
    num_workers: int | None = None,
    random_seed: int = 0,
    progress: ProgressCallback | None = None,
    hints: Sequence[Schedule] = (),
) -> SolveResult:
    """Find the schedule of ``problem`` with the least ``objective`` within the budget, and a proven bound.

    ``hints`` are extra warm starts (e.g. a previous answer at a smaller budget). With one worker and a fixed
    seed the answer is reproducible. Raises :class:`InfeasibleBudget` when no schedule fits the budget at all.
    """
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    started = time.monotonic()
    budget = problem.budget_per_device
    need = minimum_budget(problem)
    if budget is not None and any(b < n * (1 - _EPS) for b, n in zip(budget, need)):
        worst = max(range(problem.num_stages), key=lambda d: need[d] - budget[d])
        raise InfeasibleBudget(
            f"memory.budget {budget[worst]:g} on device {worst} admits no schedule: one microbatch holds "
            f"{need[worst]:g} there across its {problem.num_chunks} chunks; raise memory.budget to at least "
            f"{max(need):g}"
        )

    ticked, time_scale, exact = tick_problem(problem)
    candidates = warm_starts(problem, objective, extra=hints)
    if not candidates:
        raise InfeasibleBudget(
            f"no schedule fits memory.budget; raise it to at least {max(need):g} (one microbatch in flight)"
        )
    best = candidates[0]
    hint_ticks = compute_metrics(simulate(ticked, best.schedule))
    horizon = int(round(hint_ticks.makespan if objective == "makespan" else 2 * objective_of(hint_ticks, objective)))
    # Makespan: no better schedule ends later than the best warm start. Stage span: with F(0, 0) at 0, every
    # op depends on it and every device's last B precedes B(0, N-1), which ends within one span S of time 0;
    # so each device starts by S and ends by 2S, S <= the warm start's.

    bound = (stage_span_lower_bound(ticked) if objective == "stage_span" else makespan_lower_bound(ticked))
    bound /= time_scale
    if best.objective <= bound * (1 + _EPS):
        log.info("warm start %s meets the lower bound: optimal without search", best.schedule.name)
        return _result(problem, objective, best.schedule, best.schedule.name, bound, time_scale, started,
                       best, candidates)

    model = _Model(ticked, objective, horizon)
    model.add_hint(simulate(ticked, best.schedule))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = int(num_workers or 0)
    solver.parameters.random_seed = int(random_seed)
    if progress is not None:
        solver.best_bound_callback = lambda value: progress(
            Progress(time.monotonic() - started, None, value / time_scale)
        )
    status = solver.solve(model.model, _Progress(progress, time_scale, started))
    log.info("CP-SAT status %s in %.2f s", solver.status_name(status), solver.wall_time)

    source = best.schedule.name
    chosen = best.schedule
    raw: tuple[float, dict[Op, tuple[float, float]]] | None = None
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        bound = max(bound, solver.best_objective_bound / time_scale)
        solved = _read_order(model, solver, "optimal")
        solved_metrics = compute_metrics(simulate(problem, solved))
        if solved_metrics.feasible and objective_of(solved_metrics, objective) < best.objective * (1 - _EPS):
            chosen, source = solved, "cp-sat"
            if exact:
                times = {op: (solver.value(t.start) / time_scale, (solver.value(t.start) + t.duration) / time_scale)
                         for op, t in model.tasks.items()}
                raw = (solver.objective_value / time_scale, times)
        else:
            log.info("the solver's order is no better than warm start %s; returning that", best.schedule.name)
    elif status == cp_model.INFEASIBLE:
        log.warning("CP-SAT reports the tick model infeasible; returning the best warm start")
    return _result(problem, objective, chosen, source, bound, time_scale, started, best, candidates, raw)


def _result(
    problem: Problem,
    objective: str,
    chosen: Schedule,
    source: str,
    bound: float,
    time_scale: int,
    started: float,
    best: _Candidate,
    candidates: list[_Candidate],
    raw: tuple[float, dict[Op, tuple[float, float]]] | None = None,
) -> SolveResult:
    """Replay the chosen order in the problem's own units and package the answer."""
    final = Schedule(name="optimal", orders=chosen.orders, flushes=chosen.flushes)
    timeline = simulate(problem, final)
    metrics = compute_metrics(timeline)
    value = objective_of(metrics, objective)
    # The bound is proven (the tick model is the problem itself or a relaxation of it): never above a schedule.
    assert bound <= value * (1 + 1e-9) + 1e-9, f"lower bound {bound} above a feasible schedule's {value}"
    lower = min(value, bound)
    gap = (value - lower) / value if value > 0 else 0.0
    if gap <= 1e-9:  # float noise of a proven optimum (e.g. 87.21000000000001 against 87.21)
        lower, gap = value, 0.0
    return SolveResult(
        status=OPTIMAL if gap <= 1e-9 else FEASIBLE,
        objective_name=objective,
        objective=value,
        lower_bound=lower,
        gap=gap,
        solve_time_s=time.monotonic() - started,
        schedule=final,
        timeline=timeline,
        metrics=metrics,
        source=source,
        best_heuristic=best.schedule.name,
        best_heuristic_objective=best.objective,
        ticks_per_unit=time_scale,
        heuristics={c.schedule.name: c.objective for c in candidates},
        solver_objective=None if raw is None else raw[0],
        solver_times=None if raw is None else raw[1],
    )
