"""The planner's contract: ``plan(num_stages=8, total_microbatches=64, memory_budget=8)`` and friends."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pipeplan import (
    ConfigError,
    NotApplicable,
    Problem,
    SolverSettings,
    compute_metrics,
    formulas,
    generate,
    plan,
    schedule_names,
    simulate,
)
from pipeplan import problem as problem_module
from pipeplan.metrics import order_peaks
from pipeplan.planner import compare, evaluate_named
from pipeplan.schedules.gpipe import gpipe_with_flush_size
from pipeplan.solver import StopRequest, objective_of

ENTRY_KEYS = {"schedule", "utilization", "bubble", "makespan", "peak_memory", "fits"}


def test_seed_chooses_1f1b_at_90_percent() -> None:
    result = plan(num_stages=8, total_microbatches=64, memory_budget=8)
    chosen = result["chosen"]
    assert chosen["schedule"] == "1f1b"
    work = 64 * (1.0 + 2.0)
    assert chosen["utilization"] == pytest.approx(work / formulas.one_f_one_b_makespan(8, 64, 1.0, 2.0))
    assert str(chosen["utilization"]).startswith("0.9014")
    assert chosen["makespan"] == formulas.one_f_one_b_makespan(8, 64, 1.0, 2.0)
    assert chosen["peak_memory"] == 8
    assert chosen["bubble"] == pytest.approx(1 - chosen["utilization"])
    assert ENTRY_KEYS <= set(chosen)


def test_candidates_cover_every_generator_and_gpipe_flush_sizes() -> None:
    result = plan(num_stages=8, total_microbatches=64, memory_budget=8)
    candidates = result["candidates"]
    for entry in candidates:
        assert ENTRY_KEYS <= set(entry)
        assert entry["fits"] == entry["feasible"]
    problem = Problem.build(num_stages=8, num_microbatches=64, budget=8)
    applicable = []
    for name in schedule_names():
        try:
            generate(name, problem)
        except NotApplicable:
            continue
        applicable.append(name)
    assert {"gpipe", "1f1b"} <= set(applicable)
    assert set(applicable) <= {c["schedule"] for c in candidates}
    gpipes = [c for c in candidates if c["schedule"] == "gpipe"]
    sizes = {c["microbatches_per_flush"] for c in gpipes}
    assert {64, 32, 8, 1} <= sizes
    # Every flush count from 1 to 64 is represented, once.
    assert sorted(c["flushes"] for c in gpipes) == sorted({math.ceil(64 / k) for k in range(1, 65)})
    for c in gpipes:
        k = c["microbatches_per_flush"]
        assert c["fits"] == (k <= 8), k
        assert c["peak_memory"] == k
        assert c["makespan"] == formulas.gpipe_makespan(8, 64, k, 1.0, 2.0)


def test_unbudgeted_tie_goes_to_the_simpler_schedule() -> None:
    """Without a budget GPipe in one flush and 1F1B both take (N + P - 1)(F + B): GPipe is simpler."""
    result = plan(num_stages=4, total_microbatches=8, num_chunks=1)
    by_name = {c["schedule"]: c for c in result["candidates"] if c["flushes"] == 1}
    assert by_name["gpipe"]["makespan"] == by_name["1f1b"]["makespan"]
    assert result["chosen"]["schedule"] == "gpipe"
    assert result["chosen"]["flushes"] == 1


def test_single_microbatch_tie_goes_to_gpipe() -> None:
    result = plan(num_stages=5, total_microbatches=1, memory_budget=1, forward=0.7, backward=1.3)
    assert result["chosen"]["schedule"] == "gpipe"
    assert result["chosen"]["makespan"] == pytest.approx(5 * 2.0)


def test_costs_are_keywords() -> None:
    result = plan(num_stages=4, total_microbatches=16, memory_budget=4, forward=2.0, backward=1.0, comm=0.0)
    assert result["chosen"]["schedule"] == "1f1b"
    assert result["chosen"]["makespan"] == formulas.one_f_one_b_makespan(4, 16, 2.0, 1.0)


def test_tight_budget_picks_the_best_feasible_variant() -> None:
    """Budget 2 on 8 stages: plain 1F1B would need 8, so 1F1B's warm-up shrinks; GPipe needs 32 flushes."""
    result = plan(num_stages=8, total_microbatches=64, memory_budget=2)
    chosen = result["chosen"]
    assert chosen["fits"]
    assert chosen["peak_memory"] <= 2
    fitting = [c for c in result["candidates"] if c["fits"]]
    assert chosen["bubble"] == min(c["bubble"] for c in fitting)


@pytest.mark.parametrize("budget", [0.5, 0, [8, 8, 8, 0.9, 8, 8, 8, 8]])
def test_budget_below_one_activation_is_an_error(budget: float | list[float]) -> None:
    with pytest.raises(ConfigError, match="below one activation"):
        plan(num_stages=8, total_microbatches=64, memory_budget=budget)
    with pytest.raises(ValueError):
        plan(num_stages=8, total_microbatches=64, memory_budget=budget)


def test_invalid_counts_are_errors() -> None:
    with pytest.raises(ConfigError, match="total_microbatches must be >= 1"):
        plan(num_stages=8, total_microbatches=0, memory_budget=8)


def test_planner_tries_chunked_layouts() -> None:
    """Unbudgeted, interleaving halves the fill and drain: the planner finds it on its own, with 2 loop chunks."""
    result = plan(num_stages=4, total_microbatches=8)
    chosen = result["chosen"]
    assert (chosen["schedule"], chosen["num_chunks"], chosen["placement"]) == ("interleaved-1f1b", 2, "loop")
    one_chunk = min(c["bubble"] for c in result["candidates"] if c["num_chunks"] == 1)
    assert chosen["bubble"] < one_chunk
    assert {(c["num_chunks"], c["placement"]) for c in result["candidates"]} == {(1, "loop"), (2, "loop")}


def test_planner_picks_zb_v_when_it_fits() -> None:
    """F = B = W at 1F1B's memory: ZB-V (V placement) has the least bubble and fits."""
    result = plan(num_stages=4, total_microbatches=16, memory_budget=4, forward=1.0, backward=1.0,
                  backward_weight=1.0)
    chosen = result["chosen"]
    assert (chosen["schedule"], chosen["num_chunks"], chosen["placement"]) == ("zb-v", 2, "v")
    assert chosen["fits"] and chosen["peak_memory"] <= 4


def test_a_placement_without_chunks_keeps_the_planner_to_that_placement() -> None:
    """placement alone picks the layouts the planner tries (it used to be ignored without num_chunks); V with an
    unsplit backward has GPipe only (it used to be "no schedule applies", though GPipe runs in V placement)."""
    result = plan(num_stages=4, total_microbatches=16, forward=1.0, backward=1.0, backward_weight=1.0,
                  placement="v")
    assert {(c["num_chunks"], c["placement"]) for c in result["candidates"]} == {(2, "v")}
    assert result["chosen"]["placement"] == "v"
    result = plan(num_stages=4, total_microbatches=8, placement="loop")
    assert {(c["num_chunks"], c["placement"]) for c in result["candidates"]} == {(1, "loop"), (2, "loop")}
    for keywords in ({"placement": "v"}, {"num_chunks": 2, "placement": "v"}):
        result = plan(num_stages=4, total_microbatches=8, memory_budget=2, **keywords)
        assert [(c["schedule"], c["placement"]) for c in result["candidates"]] == [("gpipe", "v")]
        assert result["chosen"]["fits"] and result["chosen"]["microbatches_per_flush"] == 2


def test_with_chunks_fixed_gpipe_answers_a_budget_nothing_else_fits() -> None:
    """2 chunks in loop placement at 4 activations on 4 devices: interleaved 1F1B needs more, GPipe fits (two
    flushes of four microbatches). It used to say "no schedule fits memory_budget" with a hint about GPipe it had not
    tried; below one microbatch's activations the error names the least budget."""
    chosen = plan(num_stages=4, total_microbatches=8, memory_budget=4, num_chunks=2)["chosen"]
    assert (chosen["schedule"], chosen["num_chunks"], chosen["microbatches_per_flush"]) == ("gpipe", 2, 4)
    assert chosen["fits"] and chosen["peak_memory"] <= 4
    # With room for interleaved 1F1B, it wins (GPipe ties its bubble at more memory, and is not a candidate then).
    for budget in (None, 8):
        roomy = plan(num_stages=4, total_microbatches=8, memory_budget=budget, num_chunks=2)
        assert roomy["chosen"]["schedule"] == "interleaved-1f1b"
    with pytest.raises(ConfigError, match="no schedule fits memory_budget 0.5; the least that fits one is 1 "):
        plan(num_stages=4, total_microbatches=8, memory_budget=0.5, num_chunks=2)


def test_a_chosen_gpipe_on_chunks_replays_from_its_record() -> None:
    """Room for 5 of 16 microbatches: GPipe ran flushes of 5, 5, 5 and 1 while the record said 4 per flush (the
    flush count's even size); now it runs 4 flushes of 4, which the record reproduces, and is faster."""
    kwargs: dict[str, Any] = {"forward": [1.09, 1.2, 1.4, 0.54], "backward": 1.7, "comm": 0.05, "activation": 1.62}
    chosen = plan(4, 16, 8.1, num_chunks=2, **kwargs)["chosen"]
    assert (chosen["schedule"], chosen["flushes"], chosen["microbatches_per_flush"]) == ("gpipe", 4, 4)
    problem = Problem.build(num_stages=4, num_microbatches=16, budget=8.1, num_chunks=2, **kwargs)
    metrics = compute_metrics(simulate(problem, gpipe_with_flush_size(problem, 4)))
    assert (metrics.makespan, metrics.peak_memory) == (chosen["makespan"], chosen["peak_memory"])
    uneven = compute_metrics(simulate(problem, gpipe_with_flush_size(problem, 5)))
    assert uneven.feasible and uneven.makespan > metrics.makespan


def test_a_layout_too_large_to_replay_is_skipped_when_the_planner_picked_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """One chunk within the size limit, two chunks over it: the planner answers with one chunk (it used to replay
    every one-chunk candidate, then fail on the two-chunk layout it had added itself), unless asked for two. The
    limit is lowered here so that the pipeline is small: 4 devices x 10 microbatches x 2 kinds = 80 ops."""
    monkeypatch.setattr(problem_module, "MAX_OPS", 100)
    result = plan(num_stages=4, total_microbatches=10, placement="loop")
    assert {c["num_chunks"] for c in result["candidates"]} == {1}
    with pytest.raises(ConfigError, match="pipeplan replays at most 100: lower total_microbatches to at most 6"):
        plan(num_stages=4, total_microbatches=10, num_chunks=2)
    with pytest.raises(ConfigError, match="placement must be one of loop, v, got 'w'"):
        plan(num_stages=4, total_microbatches=8, placement="w")


def test_with_layout_keeps_each_devices_share() -> None:
    """Cutting a model into chunks and back changes nothing per device; budgets stay per device."""
    problem = Problem.build(
        num_stages=4, num_microbatches=8, forward=[1.1, 1.0, 1.0, 1.4], backward=[1.0, 1.0, 1.0, 1.3],
                      backward_weight=0.5, comm=0.03, activation=[2, 1, 1, 1], weight_activation=0.35,
                      budget=[5, 4, 4, 3])
    v = problem.with_layout(2, "v")
    assert v.num_model_stages == 8 and v.placement == "v"
    for d in range(4):
        stages = v.stages_on_device(d)
        assert sum(v.forward[s] for s in stages) == pytest.approx(problem.forward[d])
        assert sum(v.activation[s] for s in stages) == pytest.approx(problem.activation[d])
        assert v.device_work(d) == pytest.approx(problem.device_work(d))
    assert v.budget == problem.budget
    back = v.with_layout(1, "loop")
    assert back.forward == pytest.approx(problem.forward)
    assert back.comm == problem.comm


def test_compare_points_at_a_better_layout() -> None:
    """On one chunk per device the optimizer cannot use chunks; the comparison says ZB-V (and interleaved zero
    bubble, which ties with it here) would be faster."""
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0, backward_weight=1.0, budget=4)
    comparison = compare(problem, SolverSettings(time_limit_s=5, num_workers=1))
    chosen = min(r["makespan"] for r in comparison.rows() if r["feasible"])
    others = comparison.summary("t")["other_layouts"]
    best = [(r["schedule"], r["placement"]) for r in others if r["makespan"] == others[0]["makespan"]]
    assert ("zb-v", "v") in best and ("interleaved-zb", "loop") in best
    assert others[0]["makespan"] < chosen and others[0]["peak_memory"] <= 4
    assert [r["makespan"] for r in others] == sorted(r["makespan"] for r in others)
    # Once a stop is requested the other layouts are not replayed (at the size limit that took a minute after a
    # Ctrl-C); the answer on the config's own layout still comes back.
    stop = StopRequest()
    stop.request()
    stopped = compare(problem, SolverSettings(time_limit_s=5, num_workers=1), stop=stop)
    assert stopped.summary("t")["other_layouts"] == [] and stopped.optimal.metrics.feasible


def test_compare_builds_the_named_schedules_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison's named schedules are the optimizer's warm starts as they are: on the config's own layout
    they are built and replayed once (at the size limit each pass took seconds), and still win ties."""
    from pipeplan import schedules as registry
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=2.0, budget=4)
    built: list[tuple[int, str]] = []
    real = registry.generate_applicable

    def counted(p: Problem) -> Any:
        built.append((p.num_chunks, p.placement))
        return real(p)

    monkeypatch.setattr(registry, "generate_applicable", counted)
    comparison = compare(problem, SolverSettings(time_limit_s=5, num_workers=1))
    assert built.count((1, "loop")) == 1 and len(built) == len(set(built))
    named = {e.schedule.name: objective_of(e.metrics, "makespan") for e in comparison.named if e.metrics.feasible}
    assert named["1f1b"] == comparison.optimal.heuristics["1f1b"]
    assert set(named) <= set(comparison.optimal.heuristics)
    assert comparison.optimal.best_heuristic in named  # 1F1B is optimal here; the named schedule wins the tie


@pytest.mark.parametrize("layout", [(1, "loop"), (2, "loop"), (2, "v")])
def test_named_schedules_that_fit_are_found_without_replaying_the_others(layout: tuple[int, str]) -> None:
    """The other layouts' comparison leaves out, unreplayed, the schedules whose orders exceed the budget: the
    ones left are exactly the fitting ones of a full replay."""
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=[1.0, 1.5, 1.0, 2.0], backward=2.0,
                            backward_weight=[1.0, 0.5, 1.0, 1.0], comm=0.25, activation=[1, 2, 1, 1],
                            weight_activation=0.5, budget=5).with_layout(*layout)
    every, _ = evaluate_named(problem)
    fitting = [e.schedule.name for e in every if e.metrics.feasible]
    assert 0 < len(fitting) < len(every)
    assert [e.schedule.name for e in evaluate_named(problem, fitting_only=True)[0]] == fitting


def test_peaks_from_orders_need_every_op_to_take_time() -> None:
    """With ops of no time several can start and end at one instant; the orders alone then do not give the peak
    (a release at an instant comes before an allocation there, whatever the order)."""
    problem = Problem.build(num_stages=2, num_microbatches=3, forward=0.0, backward=1.0)
    assert order_peaks(problem, generate("gpipe", problem)) is None
    timed = Problem.build(num_stages=2, num_microbatches=3, forward=1.0, backward=1.0)
    assert order_peaks(timed, generate("gpipe", timed)) == [3.0, 3.0]


@pytest.mark.parametrize(("keywords", "message"), [
    ({"memory_budget": 0.5}, "memory_budget (0.5) on device 0 is below one activation (1)"),
    ({"forward": -1}, "forward must be >= 0, got -1"),
    ({"forward": [1, -2, 1, 1]}, "forward[1] must be >= 0, got -2"),
    ({"total_microbatches": 0}, "total_microbatches must be >= 1, got 0"),
    ({"backward_weight": [1, 0, 1, 1]}, "backward_weight must be > 0 on every stage or 0 on every stage"),
    ({"weight_activation": 0.5}, "weight_activation is 0.5 but the backward is not split (backward_weight is 0)"),
    ({"num_chunks": 3, "placement": "v"}, "placement 'v' needs num_chunks: 2"),
])
def test_plan_errors_name_its_own_keywords(keywords: dict[str, Any], message: str) -> None:
    """plan() is called with keywords, not a config file: its errors name those keywords."""
    with pytest.raises(ConfigError) as info:
        plan(**{"num_stages": 4, "total_microbatches": 8, **keywords})
    assert message in str(info.value)
    assert "memory." not in str(info.value) and "costs." not in str(info.value)
    assert "pipeline." not in str(info.value)


def test_plan_accepts_numpy_scalars() -> None:
    """Counts and sizes often come out of NumPy (e.g. a sweep over np.arange): they are numbers like any other."""
    np = pytest.importorskip("numpy")
    result = plan(num_stages=np.int64(8), total_microbatches=np.int32(64), memory_budget=np.int64(8),
                  forward=np.float32(1.0), backward=np.float64(2.0))
    assert result["chosen"]["schedule"] == "1f1b"
    assert result["chosen"]["makespan"] == pytest.approx(213.0)
    with pytest.raises(ConfigError, match="memory_budget must be a finite number"):
        plan(num_stages=4, total_microbatches=8, memory_budget=np.bool_(True))


def test_peaks_from_orders_need_op_times_that_move_a_float() -> None:
    # An op of 1e-10 starting at 1e7 ends where it starts: the orders then said 1 where the replay says 0.
    tiny = Problem.build(num_stages=2, num_microbatches=4, forward=1e-10, backward=1e-10, comm=1e7, budget=1)
    assert order_peaks(tiny, generate("gpipe", tiny)) is None


def test_plan_warns_of_mixed_forms_as_a_config_does(caplog: pytest.LogCaptureFixture) -> None:
    """With chunks, a list of one value per model stage beside a device's share (a number, split over its chunks)
    is warned of, named by plan's keywords, as load_config warns of a config's fields (plan was silent: found by a
    new user's trial)."""
    with caplog.at_level("WARNING", logger="pipeplan.config"):
        plan(num_stages=4, total_microbatches=8, forward=[1.0] * 8, num_chunks=2)
    assert caplog.messages == ["forward lists one value per model stage, taken as written, while backward (its "
                               "default, 2) is each device's share, split over its 2 chunks (backward 2 is 1 a "
                               "model stage): give every such field in one form"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeplan.config"):
        plan(num_stages=4, total_microbatches=8, forward=[1.0] * 8, backward=[2.0] * 8, backward_weight=[0.5] * 8,
             weight_activation=0.25,
             num_chunks=2)
    assert len(caplog.messages) == 1 and caplog.messages[0].startswith(
        "forward, backward, backward_weight list one value per model stage, taken as written, while "
        "weight_activation is each device's share")
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeplan.config"):
        plan(num_stages=4, total_microbatches=8, forward=[1.0] * 8, backward=[2.0] * 8, num_chunks=2)
        plan(num_stages=4, total_microbatches=8, forward=[1.0, 1.5, 1.0, 1.0], backward_weight=0.5)
    assert caplog.messages == []


def test_plan_pauses_the_garbage_collector_only_while_it_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan() pauses Python's cyclic collector over its replays (they took a third longer with it on) and leaves
    it as it found it: on after, off when it was off, on after an error inside."""
    import gc

    from pipeplan import planner

    seen: list[bool] = []
    real = planner.simulate

    def watched(problem: Any, schedule: Any) -> Any:
        seen.append(gc.isenabled())
        return real(problem, schedule)

    monkeypatch.setattr(planner, "simulate", watched)
    assert gc.isenabled()
    plan(num_stages=4, total_microbatches=8, memory_budget=4)
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        plan(num_stages=4, total_microbatches=8, memory_budget=4)
        assert not gc.isenabled()
    finally:
        gc.enable()

    def failing(problem: Any, schedule: Any) -> Any:
        raise RuntimeError("a replay failed")

    monkeypatch.setattr(planner, "simulate", failing)
    with pytest.raises(RuntimeError, match="a replay failed"):
        plan(num_stages=4, total_microbatches=8, memory_budget=4)
    assert gc.isenabled()
