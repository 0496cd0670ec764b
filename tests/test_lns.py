"""The large-neighbourhood search: its windows, and moves that only ever keep valid, better schedules."""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from typing import Any

import pytest
from exhaustive import examples, small_problems
from hypothesis import event, given, settings
from hypothesis import strategies as st
from invariants import assert_valid
from ortools.sat.python import cp_model

import pipeplan.cpsat
import pipeplan.solver
from pipeplan import Problem, compute_metrics, lns, simulate
from pipeplan.config import SolverSettings
from pipeplan.lns import WIDTHS, windows
from pipeplan.schedule import Schedule
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.solver import (
    RIVAL_MARGIN,
    _horizon,
    _Model,
    _neighbourhood_search,
    _rival,
    _search_around,
    objective_of,
    solve,
    tick_problem,
    warm_starts,
)


def test_windows_slide_from_the_end_over_the_whole_schedule_then_go_random() -> None:
    makespan = 100
    first = list(itertools.islice(windows(makespan, seed=0), 200))
    assert (first[0].begin, first[0].end) == (100 - int(100 * WIDTHS[0]), 100)
    sliding = [w for w in first if w.end - w.begin == int(100 * WIDTHS[0])]
    covered = set().union(*(range(w.begin, w.end) for w in sliding))
    assert covered == set(range(makespan))
    assert all(0 <= w.begin < w.end <= makespan for w in first)


@pytest.mark.parametrize("large", [False, True], ids=["small-model", "large-model"])
def test_the_search_starts_with_tail_windows_of_the_incumbent_as_it_is(large: bool,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The first neighbourhoods free the incumbent's last TAIL_WIDTHS of time, each given up to TAIL_SHARE of
    the time left and watched by the tail rule with TAIL_S least seconds (LARGE_TAIL_SHARE and LARGE_TAIL_S on a
    model of more than LARGE_TAIL_OPS ops); each tail is taken of the incumbent as it is then (so after the first
    improves it, the second ends at the new makespan); the sliding windows of 1 s follow, unwatched."""
    tail_s, share = lns.TAIL_S, lns.TAIL_SHARE
    if large:  # this model counted as large, with least seconds of its own, so that they show
        tail_s, share = 1.2, lns.LARGE_TAIL_SHARE
        monkeypatch.setattr(lns, "LARGE_TAIL_OPS", 0)
        monkeypatch.setattr(lns, "LARGE_TAIL_S", tail_s)
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, _ = tick_problem(problem)
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    seen: list[tuple[lns.Neighbourhood, int]] = []  # each window and the incumbent's makespan (ticks) it was cut from
    restrict = lns._restrict

    def recorded(base: lns.LnsModel, incumbent: lns.Placed, window: lns.Neighbourhood, bound: int) -> Any:
        seen.append((window, max(max(row) for row in incumbent.end)))
        return restrict(base, incumbent, window, bound)

    limits: list[float] = []
    least: list[float | None] = []  # each sub-solve's tail rule's least seconds, None when it has none
    run = pipeplan.cpsat.run_stoppable

    def timed(solver: cp_model.CpSolver, model: cp_model.CpModel, should_stop: Any, callback: Any = None) -> Any:
        limits.append(solver.parameters.max_time_in_seconds)
        least.append(callback.least if isinstance(callback, lns._TailWatch) else None)
        return run(solver, model, should_stop, callback)

    monkeypatch.setattr(lns, "_restrict", recorded)
    monkeypatch.setattr(pipeplan.cpsat, "run_stoppable", timed)
    deadline = time.monotonic() + 4.0
    _neighbourhood_search(model, poor, SolverSettings(num_workers=1), deadline, stop=None)
    tails = len(lns.TAIL_WIDTHS)
    assert len(seen) > tails
    for (window, end), width, limit, rule in zip(seen, lns.TAIL_WIDTHS, limits, least):
        assert (window.begin, window.end) == (int(end * (1 - width)), end)
        assert limit <= share * 4.0 and rule == tail_s
    assert seen[0][1] == round(max(simulate(ticked, poor).end))  # the first tail: of the incumbent handed over
    assert seen[1][1] < seen[0][1]  # the first tail improved one microbatch at a time; the second is of the result
    assert limits[0] > lns.SUB_SOLVE_S  # more than a sliding window's second
    assert all(limit <= lns.SUB_SOLVE_S for limit in limits[tails:])
    assert least[tails:] == [None] * len(least[tails:])
    # The sliding windows are measured on the incumbent as the tails left it.
    first_slide, end = seen[tails]
    assert (first_slide.begin, first_slide.end) == (end - max(1, int(end * WIDTHS[0])), end)


def test_the_tail_rule_waits_its_least_seconds_then_for_a_quiet_spell_that_grows_with_the_search() -> None:
    """tail_done: never before the least seconds; after them, once TAIL_QUIET_S have passed without a better
    schedule, or TAIL_QUIET_SHARE of the time to the last better one when that is longer."""
    assert lns.tail_rule(lns.LARGE_TAIL_OPS) == lns.TailRule(lns.TAIL_S, lns.TAIL_SHARE)
    assert lns.tail_rule(lns.LARGE_TAIL_OPS + 1) == lns.TailRule(lns.LARGE_TAIL_S, lns.LARGE_TAIL_SHARE)
    least = 3.0
    assert not lns.tail_done(2.9, 0.0, least)  # nothing found yet, but within its least seconds
    assert lns.tail_done(3.1, 0.0, least)  # nothing found in them
    assert not lns.tail_done(3.4, 1.5, least)  # found 1.9 s ago: within TAIL_QUIET_S
    assert lns.tail_done(3.6, 1.5, least)
    found = 20.0  # a search that took 20 s to its last better schedule waits 30 % of that, 6 s, not 2
    assert lns.TAIL_QUIET_SHARE * found > lns.TAIL_QUIET_S
    assert not lns.tail_done(found + 5.9, found, least)
    assert lns.tail_done(found + 6.1, found, least)
    assert not lns.tail_done(1.0, 0.9, least=0.5) and lns.tail_done(3.0, 0.9, least=0.5)


def test_tail_windows_end_by_the_tail_rule_before_their_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a problem whose tails CP-SAT does not settle within a second, each tail's sub-solve that ends before
    its limit and unproven ends when the rule says so, none before its least seconds, and the answer is valid;
    the rule's seconds are scaled down so that the tails end within the test's few seconds."""
    monkeypatch.setattr(lns, "TAIL_S", 0.4)
    monkeypatch.setattr(lns, "TAIL_QUIET_S", 0.3)
    problem = Problem.build(4, 16, forward=[1.0, 1.25, 0.75, 1.0], backward=[1.5, 1.0, 2.0, 1.25],
                            backward_weight=0.5, comm=0.03, weight_activation=0.35, budget=3, num_chunks=2,
                            placement="loop")
    ticked, _, _ = tick_problem(problem)
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    runs: list[tuple[float, float, float, str, lns._TailWatch]] = []  # limit, began, ended, status, watch
    run = pipeplan.cpsat.run_stoppable

    def timed(solver: cp_model.CpSolver, model: cp_model.CpModel, should_stop: Any, callback: Any = None) -> Any:
        began = time.monotonic()
        status = run(solver, model, should_stop, callback)
        if isinstance(callback, lns._TailWatch):
            runs.append((solver.parameters.max_time_in_seconds, began, time.monotonic(),
                         solver.status_name(status), callback))
        return status

    monkeypatch.setattr(pipeplan.cpsat, "run_stoppable", timed)
    found = _neighbourhood_search(model, poor, SolverSettings(num_workers=2), time.monotonic() + 3.5, stop=None)
    timeline = simulate(ticked, found)
    metrics = compute_metrics(timeline)
    assert_valid(ticked, timeline, metrics)
    assert metrics.feasible and metrics.makespan < compute_metrics(simulate(ticked, poor)).makespan
    ended_by_rule = 0
    for limit, began, ended, status, watch in runs:
        assert watch.least == lns.TAIL_S
        ran = ended - began
        if status in ("OPTIMAL", "INFEASIBLE"):  # settled by CP-SAT before the rule or the limit
            continue
        assert ran >= min(lns.TAIL_S, limit) - 0.05  # never cut before its least seconds
        if ran < limit - 0.5:  # ended well before its limit: by the rule, within the stop's polling
            ended_by_rule += 1
            assert watch.quiet is not None
            elapsed, found_at = watch.quiet
            assert lns.TAIL_S < elapsed <= ran + 0.01 and found_at <= elapsed
            assert lns.tail_done(elapsed, found_at, watch.least)
            assert not lns.tail_done(elapsed - 0.2, found_at, watch.least)  # and not long before it ended
    assert ended_by_rule >= 1


# CP-SAT's (9.15) workers that build a linear relaxation whatever the level, besides every "*max_lp*" one; kept
# here apart from pipeplan.lns.LP_WORKERS so that a name dropped there shows up in the log below.
BUILD_AN_LP = {"default_lp", "reduced_costs", "pseudo_costs", "lb_tree_search", "objective_lb_search"}


@pytest.mark.parametrize("num_workers", [1, 2, 4])
def test_improves_a_poor_incumbent_and_keeps_it_valid(num_workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # P=3, N=6, a budget of 2 activations and unequal costs; one microbatch at a time is far from optimal.
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, exact = tick_problem(problem)
    assert exact
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    settings = SolverSettings(num_workers=num_workers)
    # Every sub-solve runs without CP-SAT's linear relaxation (its set-up overran a 1 s sub-solve by 4 s): at level
    # 0 and with none of the workers that build one among those CP-SAT's log says it ran (CP-SAT ignores a name
    # it does not know, so a renamed worker would show up there).
    seen: list[tuple[int, str, list[str]]] = []
    solve_one = cp_model.CpSolver.solve

    def recorded(solver: cp_model.CpSolver, *args: Any, **kwargs: Any) -> Any:
        log: list[str] = []
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = log.append
        status = solve_one(solver, *args, **kwargs)
        workers = [line for line in "\n".join(log).splitlines() if "full problem subsolver" in line]
        seen.append((solver.parameters.linearization_level, solver.status_name(status), workers))
        return status

    monkeypatch.setattr(cp_model.CpSolver, "solve", recorded)
    found = _neighbourhood_search(model, poor, settings, time.monotonic() + 2.0, stop=None)
    assert seen and all(level == 0 and status != "MODEL_INVALID" for level, status, _ in seen)
    listed = [line for _, _, workers in seen for line in workers]
    if num_workers > 1:
        assert listed  # some sub-solve reached CP-SAT's parallel search
    ran = {name for line in listed for name in re.findall(r"[\w/]+", line.split(":", 1)[1])}
    assert not {name for name in ran if "max_lp" in name or name in BUILD_AN_LP}
    before = objective_of(compute_metrics(simulate(problem, poor)), "makespan")
    timeline = simulate(problem, found)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert metrics.makespan < before


def test_a_sub_solve_cp_sat_rejects_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A neighbourhood's model or parameters that CP-SAT rejects are a bug, not a window without a better
    schedule: the search raises instead of trying the next window."""
    problem = Problem.build(3, 4, forward=1.0, backward=1.0, backward_weight=0.5, comm=0.25, budget=2)
    ticked, _, _ = tick_problem(problem)
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    monkeypatch.setattr(lns, "_without_linear_relaxation",
                        lambda solver: solver.parameters.subsolvers.append("no_such_worker"))
    with pytest.raises(RuntimeError, match="rejected a neighbourhood's model"):
        _neighbourhood_search(model, poor, SolverSettings(num_workers=2), time.monotonic() + 2.0, stop=None)


def v_problem(budget: float) -> Problem:
    """P=4, N=16, 2 chunks in V placement, F:B:W = 1 : 1 : 0.5, comm 0.03: V-Half's pattern and the greedy rules
    come within 3 % of each other at a budget of 3 activations."""
    problem = Problem.build(4, 16, forward=1.0, backward=1.0, backward_weight=0.5, comm=0.03, activation=1.0,
                            weight_activation=0.35, budget=budget)
    return problem.with_layout(2, "v")


def test_the_rival_is_the_best_other_order_within_the_margin() -> None:
    candidates = warm_starts(v_problem(3), "makespan")
    best = candidates[0]
    rival = _rival(candidates, [best.schedule], best.objective)
    assert rival is not None
    assert rival.orders != best.schedule.orders
    others = [c for c in candidates if c.schedule.orders != best.schedule.orders]
    assert rival is others[0].schedule
    assert others[0].objective <= best.objective * (1 + RIVAL_MARGIN)
    # Below the margin: no rival. Many greedy rules give the same orders; they are never each other's rival.
    assert _rival(candidates, [best.schedule], others[0].objective / (1 + RIVAL_MARGIN) * 0.99) is None
    assert _rival([best, best], [best.schedule], best.objective) is None
    # Every schedule taken is excluded: with the first two shapes taken, the rival is the third.
    third = next(c for c in others if c.schedule.orders != rival.orders)
    next_one = _rival(candidates, [best.schedule, rival], best.objective * 2)
    assert next_one is not None and next_one.orders == third.schedule.orders


def test_the_search_probes_from_incumbent_and_rival_then_goes_on_from_the_better(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = v_problem(3)
    ticked, scale, _ = tick_problem(problem)
    candidates = warm_starts(problem, "makespan")
    incumbent = candidates[0]
    rival = _rival(candidates, [incumbent.schedule], incumbent.objective)
    assert rival is not None
    model = _Model(ticked, "makespan", _horizon(ticked, incumbent.schedule, "makespan"))
    runs: list[tuple[Schedule, Schedule]] = []  # (start, result) of each run of the search
    search = pipeplan.solver._neighbourhood_search

    def recorded(model: _Model, start: Schedule, *args: Any, **kwargs: Any) -> Schedule:
        found = search(model, start, *args, **kwargs)
        runs.append((start, found))
        return found

    def value(schedule: Schedule) -> float:
        return objective_of(compute_metrics(simulate(problem, schedule)), "makespan")

    monkeypatch.setattr(pipeplan.solver, "_neighbourhood_search", recorded)
    found, found_value = _search_around(problem, model, incumbent.schedule, incumbent.objective, rival,
                                        SolverSettings(num_workers=2), time.monotonic() + 4, None, 0.0, scale)
    assert [start for start, _ in runs[:2]] == [incumbent.schedule, rival]
    assert len(runs) == 3
    probes = [incumbent.schedule] + [result for _, result in runs[:2]]
    assert value(runs[2][0]) == min(value(schedule) for schedule in probes)
    assert found_value == pytest.approx(value(found))
    assert found_value == min(value(schedule) for schedule in [*probes, runs[2][1]])
    timeline = simulate(problem, found)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert found_value <= incumbent.objective


def test_solve_probes_from_a_rival_warm_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wired into :func:`solve`: with no time for the whole-model search (its share 0), the neighbourhood search
    runs from the best warm start, from the rival, then from the better."""
    problem = v_problem(3)
    starts: list[str] = []
    search = pipeplan.solver._neighbourhood_search

    def recorded(model: _Model, start: Schedule, *args: Any, **kwargs: Any) -> Schedule:
        starts.append(start.name)
        return search(model, start, *args, **kwargs)

    monkeypatch.setattr(pipeplan.solver, "_neighbourhood_search", recorded)
    monkeypatch.setattr(pipeplan.solver, "SEARCH_SHARE", 0.0)
    result = solve(problem, time_limit_s=3, num_workers=2, random_seed=0)
    candidates = warm_starts(problem, "makespan")
    rival = _rival(candidates, [candidates[0].schedule], candidates[0].objective)
    assert rival is not None
    assert starts[:2] == [candidates[0].schedule.name, rival.name]
    assert len(starts) == 3
    assert_valid(problem, result.timeline, result.metrics)
    assert result.metrics.feasible
    assert result.objective <= candidates[0].objective


def test_each_better_schedule_is_heard_as_it_is_found() -> None:
    """The neighbourhood search hands on every improvement as it finds it (for progress reports), and the
    search around an incumbent reports only objectives better than all before, the last being its answer."""
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, scale, _ = tick_problem(problem)
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    settings = SolverSettings(num_workers=1)
    heard: list[Schedule] = []
    found = _neighbourhood_search(model, poor, settings, time.monotonic() + 3.0, stop=None,
                                  on_improvement=heard.append)
    values = [objective_of(compute_metrics(simulate(problem, s)), "makespan") for s in [poor, *heard]]
    assert len(values) > 1
    assert all(after < before for before, after in zip(values, values[1:]))
    assert heard[-1].orders == found.orders

    before = objective_of(compute_metrics(simulate(problem, poor)), "makespan")
    reported: list[float] = []
    best, best_value = _search_around(problem, model, poor, before, None, settings, time.monotonic() + 3.0, None,
                                      0.0, scale, report=reported.append)
    assert reported
    assert all(after < previous for previous, after in zip([before, *reported], reported))
    assert reported[-1] == pytest.approx(best_value)
    assert best_value < before


def test_a_target_a_float_hair_below_the_incumbent_counts_as_met(caplog: pytest.LogCaptureFixture) -> None:
    """A bound handed over in the config's unit comes back into ticks with float noise (1.13 * 100 is
    112.99999999999999): an incumbent of 113 ticks meets it, so no neighbourhood is tried."""
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, _ = tick_problem(problem)
    poor = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    model = _Model(ticked, "makespan", _horizon(ticked, poor, "makespan"))
    value = objective_of(compute_metrics(simulate(ticked, poor)), "makespan")
    settings = SolverSettings(num_workers=1)
    for target, tried in ((value * (1 - 1e-15), 0), (value - 1, None)):
        caplog.clear()
        with caplog.at_level("INFO", logger="pipeplan.lns"):
            found = _neighbourhood_search(model, poor, settings, time.monotonic() + 0.5, stop=None, target=target)
        counts = [int(m.group(1)) for r in caplog.records if (m := re.match(r"LNS: (\d+) neighbourhoods", r.message))]
        assert len(counts) == 1
        if tried == 0:
            assert counts == [0] and found is poor
        else:  # a whole tick below: the search runs
            assert counts[0] > 0


def reference_restriction(base: lns.LnsModel, timeline: Any, window: lns.Neighbourhood,
                          bound: int) -> cp_model.CpModel:
    """What a neighbourhood's model means, written with CP-SAT's expression API: ops that end by the window's
    start keep their starts, each device's ops that start at or after its end keep their incumbent order, the
    incumbent is the hint (without it CP-SAT may find no solution of a wide window in seconds)."""
    model = base.model.clone()

    def var(op: Any) -> cp_model.IntVar:
        return model.get_int_var_from_proto_index(base.starts[op].index)

    later: dict[int, list[tuple[int, Any]]] = {}  # device -> (start, op), in the timeline's order
    for op, device, start in zip(timeline.ops, timeline.device, timeline.start):
        tick = int(round(start))
        if tick + base.durations[op] <= window.begin:
            model.add(var(op) == tick)
        elif tick >= window.end:
            later.setdefault(device, []).append((tick, op))
    for ops in later.values():
        ops.sort(key=lambda item: item[0])  # stable: start ties keep the timeline's order
        for (_, before), (_, after) in zip(ops, ops[1:]):
            model.add(var(after) >= var(before) + base.durations[before])
    model.clear_hints()
    for op, start in zip(timeline.ops, timeline.start):
        model.add_hint(var(op), int(round(start)))
    model.add(model.get_int_var_from_proto_index(base.objective.index) <= bound)
    return model


def fixed_to(model: cp_model.CpModel, base: lns.LnsModel, starts: dict[Any, int]) -> bool:
    """Whether ``model`` has a solution with these op starts."""
    fixed = model.clone()
    for op, start in starts.items():
        fixed.add(fixed.get_int_var_from_proto_index(base.starts[op].index) == start)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 10
    return solver.solve(fixed) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def neighbourhood_case(problem: Problem, objective: str, free_forward: bool, begin: float,
                       width: float) -> tuple[lns.LnsModel, Any, int, lns.Neighbourhood]:
    """The solver's model of ``problem`` as the neighbourhood search sees it, the best warm start's replay (ticks),
    its objective and a window from ``begin`` (a fraction of its makespan) ``width`` wide; with ``free_forward``
    the first stage's forward takes no time (ops that start together on a device)."""
    if free_forward:
        problem = dataclasses.replace(problem, forward=(0.0, *problem.forward[1:]))
    ticked, _, _ = tick_problem(problem)
    incumbent = warm_starts(ticked, objective)[0]
    model = _Model(ticked, objective, _horizon(ticked, incumbent.schedule, objective))
    timeline = simulate(ticked, incumbent.schedule)
    makespan = int(round(max(timeline.end)))
    value = int(round(objective_of(compute_metrics(timeline), objective)))
    window = lns.Neighbourhood(int(begin * makespan), int(begin * makespan) + max(1, int(width * makespan)))
    return model.for_lns, timeline, value, window


@settings(max_examples=examples(10, 30), deadline=None)
@given(problem=small_problems(), begin=st.floats(0.0, 1.0), width=st.floats(0.05, 0.5),
       objective=st.sampled_from(["makespan", "stage_span"]), free_forward=st.booleans())
def test_a_neighbourhood_holds_what_it_should_and_nothing_more(problem: Problem, begin: float, width: float,
                                                              objective: str, free_forward: bool) -> None:
    """The neighbourhood's model, written into CP-SAT's proto, is its definition (the same constraints through
    the expression API): the incumbent solves both, a solution of either solves the other, every solution holds
    the ops before the window and keeps the order of those after it, and where both prove an optimum it is the
    same. Unequal costs, 1 or 2 chunks, both objectives, and a first stage whose forward takes no time (ops that
    start together on a device). (Solutions sampled, not a proof of equal sets.)"""
    base, timeline, value, window = neighbourhood_case(problem, objective, free_forward, begin, width)
    models = (lns._restrict(base, lns.placed(base, timeline), window, value),
              reference_restriction(base, timeline, window, value))
    held = {op: int(round(start)) for op, start in zip(timeline.ops, timeline.start)}
    assert all(fixed_to(restricted, base, held) for restricted in models)
    optima = []
    for restricted, other in (models, models[::-1]):
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = 2
        status = solver.solve(restricted)
        assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE), solver.status_name(status)
        optima.append(solver.objective_value if status == cp_model.OPTIMAL else None)
        starts = {op: solver.value(base.starts[op]) for op in timeline.ops}
        assert solver.objective_value <= value
        for op, start in held.items():
            if start + base.durations[op] <= window.begin:
                assert starts[op] == start
        for d in set(timeline.device):
            after = sorted(((held[op], base.durations[op], op) for op, device in zip(timeline.ops, timeline.device)
                            if device == d and held[op] >= window.end), key=lambda item: item[:2])
            for (_, duration, first), (_, _, second) in zip(after, after[1:]):
                assert starts[second] >= starts[first] + duration
        assert fixed_to(other, base, starts)
    if None not in optima:
        assert optima[0] == optima[1]


def solved(model: cp_model.CpModel, seconds: float = 10.0) -> tuple[int, cp_model.CpSolver]:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = seconds
    return solver.solve(model), solver


@settings(max_examples=examples(15, 40), deadline=None)
@given(problem=small_problems(), begin=st.floats(0.0, 1.0), width=st.floats(0.05, 0.6),
       objective=st.sampled_from(["makespan", "stage_span"]), cut=st.floats(0.0, 0.15), free_forward=st.booleans())
def test_narrowed_start_domains_lose_no_schedule(problem: Problem, begin: float, width: float, objective: str,
                                                 cut: float, free_forward: bool) -> None:
    """With the objective capped below the incumbent's, as the search asks, the neighbourhood's model (its start
    domains narrowed by what the precedences imply) and its definition agree: when the narrowing alone shows the
    neighbourhood empty, CP-SAT proves the definition infeasible; otherwise each solution CP-SAT finds of either
    solves the other, and where one is proven infeasible so is the other. Unequal costs, 1 or 2 chunks, both
    objectives, ops of no duration."""
    base, timeline, value, window = neighbourhood_case(problem, objective, free_forward, begin, width)
    bound = value - 1 - int(cut * value)
    narrowed = lns._restrict(base, lns.placed(base, timeline), window, bound)
    definition = reference_restriction(base, timeline, window, bound)
    status, solver = solved(definition)
    if narrowed is None:
        event("shown empty by the precedences")
        assert status == cp_model.INFEASIBLE, solver.status_name(status)
        return
    other_status, other = solved(narrowed)
    event(f"built; definition {solver.status_name(status)}")
    assert cp_model.MODEL_INVALID not in (status, other_status)
    decided = {cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE}
    if status in decided and other_status in decided:
        assert (status == cp_model.INFEASIBLE) == (other_status == cp_model.INFEASIBLE)
    if status == other_status == cp_model.OPTIMAL:
        assert solver.objective_value == other.objective_value
    for found, result, into in ((status, solver, narrowed), (other_status, other, definition)):
        if found in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            assert fixed_to(into, base, {op: result.value(base.starts[op]) for op in timeline.ops})


def test_narrowed_start_domains_follow_the_held_ops_and_the_cap() -> None:
    """On a tail window with the makespan capped a tick below the incumbent's, every free op's start domain ends
    by the cap less its duration (the W passes, whose ends the makespan is at least, and through the precedences
    every op before them), and each free op right after a held one on a chain starts no sooner than the held
    op's start plus their delay; the base model's domains are wider."""
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, _ = tick_problem(problem)
    incumbent = warm_starts(ticked, "makespan")[0]
    model = _Model(ticked, "makespan", _horizon(ticked, incumbent.schedule, "makespan"))
    base = model.for_lns
    timeline = simulate(ticked, incumbent.schedule)
    start = {op: int(round(begin)) for op, begin in zip(timeline.ops, timeline.start)}
    makespan = int(round(max(timeline.end)))
    window = lns.Neighbourhood(makespan // 2, makespan)
    narrowed = lns._restrict(base, lns.placed(base, timeline), window, makespan - 1)
    assert narrowed is not None

    def domain(cp: cp_model.CpModel, op: Any) -> tuple[int, int]:
        values = cp.proto.variables[base.starts[op].index].domain
        return values[0], values[len(values) - 1]

    held = {op for op in timeline.ops if start[op] + base.durations[op] <= window.begin}
    free = [op for op in timeline.ops if op not in held]
    assert held and free
    for op in free:
        assert domain(narrowed, op)[1] <= makespan - 1 - base.durations[op]
    narrower = [op for op in free if domain(narrowed, op) != domain(model.model, op)]
    assert narrower
    after_held = [(before, after, delay) for before, after, delay in model.precedences
                  if before in held and after not in held]
    assert after_held
    for before, after, delay in after_held:
        assert domain(narrowed, after)[0] >= start[before] + delay


@settings(max_examples=examples(10, 30), deadline=None)
@given(problem=small_problems(), objective=st.sampled_from(["makespan", "stage_span"]), free_forward=st.booleans())
def test_the_models_precedences_hold_in_every_replay(problem: Problem, objective: str, free_forward: bool) -> None:
    """Each precedence the solver's model records (the neighbourhood search narrows domains by them) is a linear
    row of the model, one for each dependency and each pair of microbatches next to each other of one kind on one
    stage; it holds in the simulator's replay of every warm start, and the order the search visits ops in ascends
    along each of them (also where ops of no duration start together)."""
    if free_forward:
        problem = dataclasses.replace(problem, forward=(0.0, *problem.forward[1:]))
    ticked, _, _ = tick_problem(problem)
    candidates = warm_starts(ticked, objective)
    model = _Model(ticked, objective, _horizon(ticked, candidates[0].schedule, objective))
    dependencies = sum(len(ticked.dependencies(op)) for op in model.tasks)
    symmetry = ticked.num_model_stages * len(ticked.kinds) * (ticked.num_microbatches - 1)
    assert len(model.precedences) == dependencies + symmetry
    rows = set()
    for constraint in model.model.proto.constraints:
        linear = constraint.linear
        if len(linear.vars) == 2 and sorted(linear.coeffs) == [-1, 1] and len(linear.domain) == 2:
            first, second = linear.vars
            after, before = (first, second) if linear.coeffs[0] == 1 else (second, first)
            rows.add((before, after, linear.domain[0]))
    for before, after, delay in model.precedences:
        assert (model.tasks[before].start.index, model.tasks[after].start.index, delay) in rows
    base = model.for_lns
    for candidate in candidates:
        timeline = simulate(ticked, candidate.schedule)
        start = {op: round(begin) for op, begin in zip(timeline.ops, timeline.start)}
        for before, after, delay in model.precedences:
            assert start[after] >= start[before] + delay
        position = {k: i for i, k in enumerate(lns.placed(base, timeline).order)}
        graph = base.graph
        for before, after, _ in model.precedences:
            k, j = graph.number[base.starts[before].index], graph.number[base.starts[after].index]
            assert position[k] < position[j]


@pytest.mark.parametrize("objective", ["makespan", "stage_span"])
def test_a_held_op_beyond_the_models_horizon_agrees_with_the_definition(objective: str) -> None:
    """A rival warm start may end after the horizon the model was built for (from the best warm start): an op of
    it held before a late window lies outside its start's domain, so the neighbourhood is shown empty without
    CP-SAT (with or without precedences to narrow by), and CP-SAT proves its definition infeasible."""
    problem = Problem.build(3, 6, forward=[1.0, 1.5, 1.0], backward=[1.5, 1.0, 2.0], backward_weight=0.5,
                            comm=0.25, weight_activation=0.5, budget=2)
    ticked, _, _ = tick_problem(problem)
    slow = gpipe_with_flush_size(ticked, 1, name="gpipe-1")
    timeline = simulate(ticked, slow)
    makespan = int(round(max(timeline.end)))
    model = _Model(ticked, objective, makespan // 2)  # a horizon half the slow schedule's makespan
    base = model.for_lns
    window = lns.Neighbourhood(makespan - 2, makespan)  # nearly every op is held, many beyond the horizon
    beyond = [op for op, start in zip(timeline.ops, timeline.start)
              if start + base.durations[op] <= window.begin and start > model.horizon]
    assert beyond
    for narrowing in (base, dataclasses.replace(base, precedences=(), objective_ends=())):
        assert lns._restrict(narrowing, lns.placed(narrowing, timeline), window, makespan) is None
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(reference_restriction(base, timeline, window, makespan)) == cp_model.INFEASIBLE
