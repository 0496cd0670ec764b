"""Long runs improved through short ones: the cuts, the splice, and the search that keeps only valid, better
schedules."""

from __future__ import annotations

import dataclasses
import logging
import time

import pytest
from exhaustive import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from invariants import assert_valid
from strategies import uneven_stage_values

import pipeplan.solver
from pipeplan import Problem, compute_metrics, simulate, splice
from pipeplan.problem import OpKind
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.schedules import generate
from pipeplan.solver import _horizon, _Model, objective_of, solve, tick_problem

# Named schedules whose orders repeat a microbatch at a time once N is large enough, with their layouts.
REPEATING = [("interleaved-zb", 2, "loop"), ("zb-v", 2, "v"), ("zb-h1", 1, "loop"), ("1f1b", 1, "loop")]


def uneven(p: int, n: int, num_chunks: int, placement: str, budget: float | None = None) -> Problem:
    """A split-backward problem with unequal per-device costs and a link latency."""
    return Problem.build(p, n, forward=[1.0, 1.3, 0.9, 1.1][:p], backward=[1.1, 1.2, 1.0, 0.8][:p],
                         backward_weight=0.6, comm=0.07, activation=1, weight_activation=0.3,
                         num_chunks=num_chunks, placement=placement, budget=budget)


def value_of(timeline: object) -> float:
    return objective_of(compute_metrics(timeline), "makespan")  # type: ignore[arg-type]


def at_own_peak(problem: Problem, name: str) -> Problem:
    """``problem`` with the named schedule's own peak as its budget."""
    return problem.with_budget(compute_metrics(simulate(problem, generate(name, problem))).peak_memory)


@pytest.mark.parametrize(("name", "num_chunks", "placement"), REPEATING)
def test_a_repeating_named_schedule_splices_onto_its_half_length_run_unchanged(
        name: str, num_chunks: int, placement: str) -> None:
    problem = uneven(4, 16, num_chunks, placement)
    long = generate(name, problem)
    run = splice.short_run(problem, name, long)
    assert run is not None
    assert run.problem.num_microbatches == 8
    assert dataclasses.replace(run.problem, num_microbatches=16) == problem
    spliced = splice.splice(long, run.base, run.base, shift=8)
    assert spliced is not None
    assert spliced.orders == long.orders


def test_short_lengths_are_half_then_two_groups_of_p_never_below_2p() -> None:
    assert splice.short_lengths(uneven(4, 32, 1, "loop")) == [16, 8]
    assert splice.short_lengths(uneven(4, 16, 1, "loop")) == [8]
    assert splice.short_lengths(uneven(4, 20, 1, "loop")) == [10, 8]
    assert splice.short_lengths(uneven(4, 12, 1, "loop")) == []
    assert splice.short_lengths(uneven(4, 8, 1, "loop")) == []
    assert splice.short_lengths(uneven(2, 3, 1, "loop")) == []


def test_cuts_are_where_the_long_order_is_head_middle_and_shifted_tail() -> None:
    problem = uneven(2, 6, 1, "loop")
    f = [problem.op(OpKind.F, 0, m) for m in range(6)]
    b = [problem.op(OpKind.B, 0, m) for m in range(6)]
    short = [f[0], f[1], b[0], f[2], b[1], b[2]]
    long = [f[0], f[1], b[0], f[2], b[1], f[3], b[2], f[4], b[3], b[4]]
    for c in splice.cuts(long, short, 2):
        assert long[:c] == short[:c]
        assert long[len(long) - (len(short) - c):] == [dataclasses.replace(op, microbatch=op.microbatch + 2)
                                                       for op in short[c:]]
    assert list(splice.cuts(long, short, 2)) == [1, 2, 3, 4, 5]
    assert not splice.cuts(long[::-1], short, 2)
    assert not splice.cuts(short[:3], short, 2)  # the long order may not be shorter


def test_a_change_in_the_drain_lands_in_the_drain_and_one_in_the_fill_in_the_fill() -> None:
    problem = uneven(4, 16, 2, "loop")
    long = generate("interleaved-zb", problem)
    run = splice.short_run(problem, "interleaved-zb", long)
    assert run is not None
    orders = [list(order) for order in run.base.orders]
    orders[1][-2], orders[1][-1] = orders[1][-1], orders[1][-2]  # two last ops of device 1 swapped
    orders[2][0], orders[2][1] = orders[2][1], orders[2][0]  # two first ops of device 2 swapped
    better = Schedule.from_lists("changed", orders)
    spliced = splice.splice(long, run.base, better, shift=8)
    assert spliced is not None
    want = [list(order) for order in long.orders]
    want[1][-2], want[1][-1] = want[1][-1], want[1][-2]
    want[2][0], want[2][1] = want[2][1], want[2][0]
    assert [list(order) for order in spliced.orders] == want


def test_no_short_run_for_orders_that_change_with_n() -> None:
    problem = uneven(4, 16, 1, "loop", budget=3)
    assert splice.short_run(problem, "gpipe", generate("gpipe", problem)) is None
    # nor for a named schedule that does not apply to the problem
    assert splice.short_run(problem, "zb-v", generate("gpipe", problem)) is None


@settings(max_examples=examples(25, 60), deadline=None)
@given(data=st.data(), named=st.sampled_from(REPEATING), p=st.integers(2, 4), groups=st.integers(4, 6),
       in_drain=st.booleans())
def test_a_change_to_the_short_run_lands_in_the_long_run_at_its_place(data: st.DataObject,
                                                                      named: tuple[str, int, str], p: int,
                                                                      groups: int, in_drain: bool) -> None:
    """Two neighbouring ops of one device swapped in the short run's fill or drain (unequal costs): the splice is
    the long run's orders with the same two swapped, in the fill at the same place, in the drain at the same
    distance from the end, every other device as it was; replayed, it runs or is refused as a ScheduleError."""
    name, num_chunks, placement = named
    values = data.draw(uneven_stage_values(p * num_chunks, p))
    values["budget"] = None
    problem = Problem.build(p, groups * p, num_chunks=num_chunks, placement=placement, **values)
    long = generate(name, problem)
    run = splice.short_run(problem, name, long)
    assert run is not None  # these schedules repeat from 2P microbatches on
    shift = problem.num_microbatches - run.problem.num_microbatches
    device = data.draw(st.integers(0, p - 1))
    short = list(run.base.orders[device])
    allowed = splice.cuts(long.orders[device], short, shift)
    # a swap of positions i and i + 1 wholly before the first cut or wholly after the last
    places = range(max(0, allowed.stop - 1), len(short) - 1) if in_drain else range(0, allowed.start - 1)
    assume(len(places) > 0)
    i = data.draw(st.sampled_from(places))
    assume(short[i] != short[i + 1])
    short[i], short[i + 1] = short[i + 1], short[i]
    orders = [list(order) for order in run.base.orders]
    orders[device] = short
    spliced = splice.splice(long, run.base, Schedule.from_lists("changed", orders), shift)
    assert spliced is not None
    want = [list(order) for order in long.orders]
    at = i + len(want[device]) - len(short) if in_drain else i
    want[device][at], want[device][at + 1] = want[device][at + 1], want[device][at]
    assert [list(order) for order in spliced.orders] == want
    try:
        timeline = simulate(problem, spliced)
    except ScheduleError:
        return
    assert_valid(problem, timeline, compute_metrics(timeline))


def short_search(problem: Problem, name: str, seconds: float) -> tuple[Schedule, Schedule | None]:
    """The named schedule's long orders and what :func:`splice.improve` finds from them in ``seconds``."""
    long = generate(name, problem)
    run = splice.short_run(problem, name, long)
    assert run is not None
    ticked = tick_problem(run.problem)[0]
    model = _Model(ticked, "makespan", _horizon(ticked, run.base, "makespan"))
    found = splice.improve(problem, run, ticked, model.for_lns, long, value_of(simulate(problem, long)), value_of,
                           time.monotonic() + seconds, num_workers=1, seed=0)
    if found is not None:
        assert found[1] == value_of(simulate(problem, found[0]))  # the value it gives is its schedule's replay's
    return long, None if found is None else found[0]


@pytest.mark.parametrize(("name", "num_chunks", "placement"), REPEATING[:3])
def test_the_short_run_search_beats_the_named_schedule_with_a_valid_schedule_within_its_budget(
        name: str, num_chunks: int, placement: str) -> None:
    problem = at_own_peak(uneven(4, 16, num_chunks, placement), name)
    long, found = short_search(problem, name, 2.0)
    assert found is not None  # on these problems the search at N=8 finds a better fill or drain in 0.02 s
    timeline = simulate(problem, found)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert value_of(timeline) < value_of(simulate(problem, long)) - 0.01


@settings(max_examples=examples(4, 10), deadline=None)
@given(data=st.data(), named=st.sampled_from(REPEATING[:3]))
def test_what_the_short_run_search_returns_is_valid_within_budget_and_better(data: st.DataObject,
                                                                              named: tuple[str, int, str]) -> None:
    name, num_chunks, placement = named
    p = 3
    values = data.draw(uneven_stage_values(p * num_chunks, p))
    values["budget"] = None
    problem = at_own_peak(Problem.build(p, 4 * p, num_chunks=num_chunks, placement=placement, **values), name)
    long, found = short_search(problem, name, 1.0)
    if found is None:
        return
    timeline = simulate(problem, found)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert value_of(timeline) < value_of(simulate(problem, long))


def test_solve_searches_a_short_run_on_a_large_model_whose_best_warm_start_is_named(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3,072 ops (more than LARGE_MODEL_OPS): no whole-model search; interleaved zero bubble is the best warm start
    # (335.66 against the next, a greedy list schedule, at 336.66). The short run gets its share whatever is left
    # after the warm starts on a loaded machine.
    monkeypatch.setattr(pipeplan.solver, "SHORT_RUN_MIN_S", 0.0)
    problem = at_own_peak(Problem.build(4, 128, forward=[1.0, 1.1, 0.95, 1.05], backward=[1.0, 1.05, 1.1, 0.95],
                                        backward_weight=[0.5, 0.45, 0.55, 0.5], comm=0.03, activation=1,
                                        weight_activation=0.35, num_chunks=2, placement="loop"), "interleaved-zb")
    with caplog.at_level(logging.INFO, logger="pipeplan"):
        result = solve(problem, objective="makespan", time_limit_s=8, num_workers=1, random_seed=0)
    assert "short run: interleaved-zb at N=64 for the search, spliced into N=128" in caplog.text
    assert_valid(problem, result.timeline, result.metrics)
    assert result.metrics.feasible
