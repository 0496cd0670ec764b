"""Property tests: on random problems, every registered generator yields a valid, replayable schedule.

Problems have unequal per-stage costs (lists), random comm, a split or unsplit backward, weight_activation up to
activation and, sometimes, a budget of at least one activation. Validity is judged by ``tests/invariants.py``,
which recomputes everything from the op times alone.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_valid

from pipeplan import Problem, compute_metrics, generate, plan, simulate
from pipeplan.metrics import order_peaks
from pipeplan.schedules import generate_applicable
from pipeplan.schedules.gpipe import gpipe_with_flush_size

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Times on a 1/8 grid keep sums exact enough to read failures; they still differ stage to stage.
times = st.integers(min_value=1, max_value=32).map(lambda x: x / 8)
comms = st.integers(min_value=0, max_value=8).map(lambda x: x / 8)


@st.composite
def problem_fields(draw: st.DrawFn, chunks: bool = True, budget: bool | None = None) -> dict[str, Any]:
    """Keyword arguments of a random :class:`Problem`; ``budget`` True/False forces one, None draws it."""
    p = draw(st.integers(min_value=1, max_value=6))
    n = draw(st.integers(min_value=1, max_value=12))
    num_chunks = draw(st.sampled_from([1, 1, 2])) if chunks and p > 1 else 1
    placement = draw(st.sampled_from(["loop", "v"])) if num_chunks == 2 else "loop"
    stages = p * num_chunks
    split = draw(st.booleans())
    fields: dict[str, Any] = {
        "num_stages": p,
        "num_microbatches": n,
        "num_chunks": num_chunks,
        "placement": placement,
        "forward": draw(st.lists(times, min_size=stages, max_size=stages)),
        "backward": draw(st.lists(times, min_size=stages, max_size=stages)),
        "backward_weight": draw(st.lists(times, min_size=stages, max_size=stages)) if split else 0.0,
        "comm": draw(st.one_of(st.just(0.0), comms, st.lists(comms, min_size=stages, max_size=stages))),
    }
    activation = draw(st.lists(st.integers(min_value=1, max_value=4), min_size=stages, max_size=stages))
    fields["activation"] = activation
    if split:
        fractions = draw(st.lists(st.integers(min_value=0, max_value=4), min_size=stages, max_size=stages))
        fields["weight_activation"] = [a * q / 4 for a, q in zip(activation, fractions)]
    with_budget = draw(st.booleans()) if budget is None else budget
    if with_budget:
        # At least the largest activation anywhere, up to about two pipelines' worth above it.
        floor = max(activation)
        extra = draw(st.lists(st.integers(min_value=0, max_value=2 * p * 4), min_size=p, max_size=p))
        fields["budget"] = draw(st.sampled_from([floor + extra[0], [floor + e for e in extra]]))
    return fields


def run_all(problem: Problem) -> dict[str, Any]:
    """Replay every applicable registered generator; return name -> metrics."""
    results = {}
    for schedule in generate_applicable(problem)[0]:
        timeline = simulate(problem, schedule)
        metrics = compute_metrics(timeline)
        assert_valid(problem, timeline, metrics)
        # Every op takes time here, so the orders alone give the replay's peaks, to the last bit.
        assert order_peaks(problem, schedule) == metrics.peak_memory_per_device
        results[schedule.name] = metrics
    return results


@SETTINGS
@given(problem_fields())
def test_every_generator_gives_a_valid_schedule(fields: dict[str, Any]) -> None:
    problem = Problem.build(**fields)
    results = run_all(problem)
    assert "gpipe" in results  # GPipe applies to every problem
    for metrics in results.values():
        work = max(problem.device_work(d) for d in range(problem.num_devices))
        assert metrics.makespan >= work - 1e-9
        assert 0 < metrics.utilization <= 1 + 1e-12
        assert metrics.bubble == 1 - metrics.utilization


@SETTINGS
@given(problem_fields(chunks=False, budget=True))
def test_budgeted_gpipe_and_1f1b_fit_the_budget(fields: dict[str, Any]) -> None:
    """GPipe chooses its flushes and 1F1B shrinks its warm-up so that both fit any budget >= one activation."""
    problem = Problem.build(**fields)
    results = run_all(problem)
    assert results["gpipe"].feasible
    assert results["1f1b"].feasible
    budget = problem.budget
    assert budget is not None
    for peak, limit in zip(results["1f1b"].peak_memory_per_device, budget):
        assert peak <= limit + 1e-9


@SETTINGS
@given(problem_fields(chunks=False))
def test_planner_chooses_a_feasible_lowest_bubble_candidate(fields: dict[str, Any]) -> None:
    result = plan(
        num_stages=fields["num_stages"],
        total_microbatches=fields["num_microbatches"],
        memory_budget=fields.get("budget"),
        forward=fields["forward"],
        backward=fields["backward"],
        backward_weight=fields["backward_weight"],
        comm=fields["comm"],
        activation=fields["activation"],
        weight_activation=fields.get("weight_activation", 0.0),
    )
    chosen = result["chosen"]
    assert chosen["fits"] and chosen["feasible"]
    assert chosen in result["candidates"]
    assert all(chosen["bubble"] <= c["bubble"] + 1e-9 for c in result["candidates"] if c["fits"])
    # The chosen entry replays: rebuild it and check it independently.
    problem = Problem.build(**{**fields, "num_chunks": chosen["num_chunks"], "placement": chosen["placement"]})
    if chosen["schedule"] == "gpipe":
        schedule = gpipe_with_flush_size(problem, chosen["microbatches_per_flush"])
    else:
        schedule = generate(chosen["schedule"], problem)
    timeline = simulate(problem, schedule)
    metrics = compute_metrics(timeline)
    assert_valid(problem, timeline, metrics)
    assert metrics.feasible
    assert metrics.makespan == chosen["makespan"]


@SETTINGS
@given(problem_fields())
def test_op_numbers_are_distinct_and_number_the_dependencies(fields: dict[str, Any]) -> None:
    # The replay looks dependencies up by op number instead of by op; both must say the same.
    problem = Problem.build(**fields)
    ops = problem.all_ops()
    numbers = [problem.op_number(op) for op in ops]
    assert len(set(numbers)) == len(ops)
    assert all(0 <= n < problem.num_op_numbers for n in numbers)
    dependency, lag = problem.numbered_dependency
    for op, number in zip(ops, numbers):
        expected = [(problem.op_number(dep), latency) for dep, latency in problem.dependencies(op)]
        assert len(expected) <= 1  # what the compact table relies on
        assert ([(dependency[number], lag[number])] if dependency[number] >= 0 else []) == expected


def test_a_pickled_problem_carries_its_fields_only() -> None:
    # Its dependency table (built at its first replay) went along to every worker process: 394 KB at 8 x 1024.
    import pickle

    problem = Problem.build(num_stages=8, num_microbatches=1024, budget=4)
    before = len(pickle.dumps(problem))
    timeline = simulate(problem, generate("1f1b", problem))
    assert len(pickle.dumps(problem)) == before < 5_000
    copy = pickle.loads(pickle.dumps(problem))
    assert copy == problem and simulate(copy, generate("1f1b", copy)).end == timeline.end
