"""Memory stated through orders (pipeplan.merge_orders): the device sequences, where it applies, and the
constraints on the whole pipeline (every op, every device's no-overlap, no cumulative) against every feasible
order of tiny problems with chunks, against optima proven without them, and every warm start of random problems
with unequal costs meeting them. In the device relaxations: test_device_bound.py."""

from __future__ import annotations

from exhaustive import brute_force, examples, family, proven_optimum, small_problems, tiny_chunk_problems
from hypothesis import HealthCheck, assume, given, settings
from ortools.sat.python import cp_model
from strategies import binding_problems
from test_device_bound import _relabelled

from pipeplan import Problem, simulate
from pipeplan.merge_orders import MAX_LITERALS, add, applies, literal_count, sequence, width
from pipeplan.problem import Op, OpKind
from pipeplan.solver import tick_problem, warm_starts

EPS = 1e-9


def whole_pipeline_model(ticked: Problem) -> tuple[cp_model.CpModel, dict[Op, cp_model.IntVar]]:
    """Every op of the ticked problem (two or more chunks) with its dependencies, each kind in microbatch order per
    stage, no overlap per device and memory only as this module states it, minimizing the makespan; its starts."""
    model = cp_model.CpModel()
    horizon = int(ticked.total_time()) + 1
    ops = ticked.ops_in_dependency_order()
    starts = {op: model.new_int_var(0, horizon, "") for op in ops}
    duration = {op: int(ticked.duration(op)) for op in ops}
    makespan = model.new_int_var(0, horizon, "makespan")
    for op in ops:
        model.add(makespan >= starts[op] + duration[op])
        for dep, lag in ticked.dependencies(op):
            model.add(starts[op] >= starts[dep] + duration[dep] + int(lag))
        if op.microbatch + 1 < ticked.num_microbatches:
            model.add(starts[ticked.op(op.kind, op.stage, op.microbatch + 1)] >= starts[op] + duration[op])
    for d in range(ticked.num_devices):
        model.add_no_overlap([model.new_fixed_size_interval_var(starts[op], duration[op], "")
                              for op in ops if ticked.device_of(op.stage) == d])
    add(model, ticked, starts, range(ticked.num_devices))
    model.minimize(makespan)
    return model, starts


def whole_pipeline(problem: Problem, limit_s: float = 5.0) -> tuple[float, bool]:
    """(The bound CP-SAT proves on :func:`whole_pipeline_model` of ``problem``, in the problem's unit; whether it
    is optimal)."""
    ticked, scale, exact = tick_problem(problem)
    assert exact
    model, _ = whole_pipeline_model(ticked)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit_s
    solver.parameters.num_workers = 2
    status = solver.solve(model)
    # Every schedule of the problem in microbatch order is a solution: none at all (too strong a constraint) is a bug.
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE), solver.status_name(status)
    return solver.best_objective_bound / scale, status == cp_model.OPTIMAL


def test_sequences_widths_and_where_it_applies() -> None:
    v_shape = family(4, 8, 2).with_layout(2, "v")
    assert sequence(v_shape, 1) == [(OpKind.F, 1), (OpKind.F, 6), (OpKind.B, 6), (OpKind.B, 1)]
    loop = family(4, 8, 2).with_layout(2, "loop")
    assert sequence(loop, 1) == [(OpKind.F, 1), (OpKind.F, 5), (OpKind.B, 5), (OpKind.B, 1)]
    assert width(v_shape, 0) == 4  # a chunk's activation is half a device's: four fit in a budget of 2
    assert width(v_shape.with_budget(None), 0) == 8
    # Pairs 1 to 3 apart (7 + 6 + 5) with 6 position pairs each, and for each forward of microbatch j (two a
    # microbatch) a W-release literal per stage (2) for each older microbatch up to 2k = 8 back (j of them here).
    assert literal_count(v_shape, [0]) == (7 + 6 + 5) * 6 + (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7) * 2 * 2
    assert applies(v_shape, [0]) and applies(loop, [0, 1])
    assert not applies(family(4, 8, 2), [0])  # one chunk: the collision bound covers the pairs
    assert not applies(family(4, 8, 4).with_layout(2, "v"), [0])  # room for every microbatch: memory never binds
    assert not applies(v_shape.with_budget(None), [0])
    large = family(8, 128, 4).with_layout(2, "v")
    assert literal_count(large, range(8)) > MAX_LITERALS and not applies(large, range(8))


@settings(max_examples=examples(40, 100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_chunk_problems())
def test_never_above_any_feasible_order_of_a_tiny_problem(problem: Problem) -> None:
    assert whole_pipeline(problem)[0] <= brute_force(problem)["makespan"] + EPS


@settings(max_examples=examples(6, 10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_never_above_an_optimum_proven_without_it(problem: Problem) -> None:
    # Unequal costs and activations per stage, split or not, budgets from one microbatch's footprint to two.
    assume(problem.num_chunks > 1)
    optimum = proven_optimum(problem, "makespan")
    assume(optimum is not None)
    assert optimum is not None
    assert whole_pipeline(problem)[0] <= optimum + EPS


@settings(max_examples=examples(10, 25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binding_problems())
def test_every_warm_start_meets_them_on_every_device(problem: Problem) -> None:
    """The constraints are a theorem about schedules in microbatch order: every warm start of random problems with
    unequal costs and activations (split or not, budgets from one microbatch up), relabelled into that order, is
    accepted by the whole-pipeline model with its start times fixed (the literals then follow from the times)."""
    assume(problem.num_chunks > 1)
    ticked, _, _ = tick_problem(problem)
    for candidate in warm_starts(problem, "makespan"):
        start = _relabelled(ticked, simulate(ticked, candidate.schedule))
        model, starts = whole_pipeline_model(ticked)
        for op, variable in starts.items():
            model.add(variable == start[op])
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = 10
        solver.parameters.num_workers = 1
        status = solver.solve(model)
        assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE), (candidate.schedule.name, solver.status_name(status))
