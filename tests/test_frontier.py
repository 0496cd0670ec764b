"""The memory-time frontier: every schedule at every budget, an optimizer curve that never rises, and the CLI.

Real CP-SAT solves on small problems with short limits; costs are unequal across stages and kinds.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipeplan import ConfigError, Problem, schedule_names
from pipeplan import frontier as frontier_module
from pipeplan.cli import USER_ERROR, main
from pipeplan.config import SolverSettings
from pipeplan.frontier import INFEASIBLE, FrontierRow, SweepProgress, _carry_bounds_down, _keep_previous, frontier
from pipeplan.report.files import FRONTIER_COLUMNS
from pipeplan.solver import OPTIMAL, InfeasibleBudget, solve

SETTINGS = SolverSettings(time_limit_s=2, num_workers=1, random_seed=0)
# Three devices, the first and last heavier, split backward, comm latency.
SPLIT = Problem.build(num_stages=3, num_microbatches=6, forward=[1.1, 1.0, 1.4], backward=[1.0, 1.0, 1.3],
                backward_weight=0.5, comm=0.05, activation=1, weight_activation=0.35)
# Two chunks per device in V placement: each holds 0.5 per chunk, so one microbatch needs 1 per device.
VSHAPE = Problem.build(num_stages=2, num_microbatches=6, num_chunks=2, placement="v", forward=1.0, backward=1.0,
                 backward_weight=0.5, comm=0.03, activation=1, weight_activation=0.35)
TINY_CONFIG = Path(__file__).parent / "configs" / "good-minimal.yaml"


def optimizer_rows(rows: list[FrontierRow]) -> list[FrontierRow]:
    return [row for row in rows if row.schedule == "optimal"]


def check_frontier(rows: list[FrontierRow]) -> None:
    """The optimizer's curve never rises, never loses to a named schedule, and its bounds are consistent."""
    solved = [row for row in optimizer_rows(rows) if row.status != INFEASIBLE]
    assert [row.budget for row in solved] == sorted(row.budget for row in solved)
    for smaller, larger in zip(solved, solved[1:]):
        assert larger.objective is not None and smaller.objective is not None
        assert larger.objective <= smaller.objective + 1e-9
        assert larger.lower_bound is not None and smaller.lower_bound is not None
        assert larger.lower_bound <= smaller.lower_bound + 1e-9  # a bound at b holds at every smaller budget
    for row in solved:
        assert row.feasible and row.peak_memory is not None and row.peak_memory <= row.budget + 1e-9
        assert row.lower_bound is not None and row.objective is not None and row.gap is not None
        assert row.lower_bound <= row.objective + 1e-9
        assert row.gap == pytest.approx((row.objective - row.lower_bound) / row.objective)
        assert (row.status == OPTIMAL) == (row.gap <= 1e-9)
        named = [r for r in rows if r.budget == row.budget and r.schedule != "optimal" and r.feasible]
        for other in named:
            assert other.objective is not None and row.objective <= other.objective + 1e-9, other


def test_every_named_schedule_is_reported_at_every_budget() -> None:
    rows = frontier(SPLIT, [3, 1, 2, 6, 2], SETTINGS)  # any order, duplicates dropped
    budgets = [1.0, 2.0, 3.0, 6.0]
    applicable = ["gpipe", "1f1b", "zb-h1", "zb-h2"]
    assert [(row.budget, row.schedule) for row in rows] == [
        (b, name) for b in budgets for name in [*applicable, "optimal"]]
    by_key = {(row.budget, row.schedule): row for row in rows}
    assert not by_key[(1.0, "zb-h1")].feasible  # over budget, reported anyway
    assert by_key[(1.0, "zb-h1")].objective is not None
    assert by_key[(6.0, "zb-h2")].feasible  # 2P - 1 = 5 activations fit in 6
    assert all(row.status is None for row in rows if row.schedule != "optimal")
    assert set(applicable) < set(schedule_names())
    check_frontier(rows)
    # With room for every microbatch the optimizer reaches at least ZB-H2's makespan.
    assert by_key[(6.0, "optimal")].objective <= by_key[(6.0, "zb-h2")].objective  # type: ignore[operator]


def test_a_budget_below_one_activation_is_a_row_with_the_reason() -> None:
    rows = frontier(SPLIT, [0.5, 2], SETTINGS)
    (first, second) = optimizer_rows(rows)
    assert first.status == INFEASIBLE and not first.feasible and first.objective is None
    assert "the budget (0.5) on device 0 is below one activation (1)" in first.note
    assert [row.budget for row in rows].count(0.5) == 1  # no named rows: no problem can be built there
    assert second.status != INFEASIBLE and second.objective is not None and second.note == ""


@pytest.mark.parametrize(("budgets", "message"), [
    ([float("inf")], "budgets[0] must be a finite number > 0, got inf"),
    ([4, float("nan")], "budgets[1] must be a finite number > 0, got nan"),
    ([0], "budgets[0] must be a finite number > 0, got 0"),
    ([True], "budgets[0] must be a number, got True"),
    (["4"], "budgets[0] must be a number, got '4'"),
    (4, "budgets must be a list of numbers, got 4"),
    ([], "give at least one budget"),
], ids=["inf", "nan", "zero", "bool", "string", "number", "empty"])
def test_bad_budgets_name_the_argument(budgets: object, message: str) -> None:
    # inf and nan used to be solved (a row with budget nan, or "no budget from inf to inf admits a schedule"),
    # True taken as 1, and the others failed inside Python (TypeError, ValueError without the name).
    with pytest.raises(ConfigError, match=re.escape(message)):
        frontier(Problem.build(3, 4), budgets, SolverSettings(time_limit_s=1))  # type: ignore[arg-type]


def test_settings_must_be_solver_settings_or_none_for_the_defaults() -> None:
    with pytest.raises(ConfigError, match="settings must be a pipeplan.SolverSettings or None"):
        frontier(Problem.build(3, 4), [4], {"time_limit_s": 1})  # type: ignore[arg-type]
    # None (solve() takes it too) used to be refused: the defaults, here proven optimal at once.
    [*_, optimal] = frontier(Problem.build(3, 4), [4])
    assert optimal.schedule == "optimal" and optimal.status == OPTIMAL


def test_keywords_override_single_settings_as_in_solve() -> None:
    """frontier() takes solve()'s keywords: objective, time_limit_s, num_workers and random_seed override the
    settings' fields (a script had to build a SolverSettings for a time limit), named as keywords in errors."""
    # The split-backward family at P=4, N=8, budget 8: both optima proven at once, 23.09 and 22.68 apart.
    problem = Problem.build(4, 8, backward=1.0, backward_weight=0.5, comm=0.03, weight_activation=0.35)
    make = frontier(problem, [8], SETTINGS)[-1]
    span = frontier(problem, [8], SETTINGS, objective="stage_span")[-1]
    assert make.status == span.status == OPTIMAL
    assert make.objective == make.makespan == pytest.approx(23.09)
    assert span.objective == span.stage_span == pytest.approx(22.68)
    # Two chunks in V at budget 2: not proven in seconds, so the keyword's limit is what ends each solve.
    v_shape = Problem.build(4, 8, backward=1.0, backward_weight=0.5, comm=0.03, weight_activation=0.35, num_chunks=2,
                            placement="v")
    quick = frontier(v_shape, [2], replace(SETTINGS, time_limit_s=120), time_limit_s=0.5)[-1]
    assert quick.status != OPTIMAL and quick.solve_time_s is not None and quick.solve_time_s < 10
    with pytest.raises(ConfigError, match="^time_limit_s must be a positive number of seconds, got 0"):
        frontier(problem, [4], time_limit_s=0)
    with pytest.raises(ConfigError, match="^num_workers must be a whole number from 1 to 10000"):
        frontier(problem, [4], SETTINGS, num_workers=0)
    with pytest.raises(ConfigError, match="^objective must be one of makespan, stage_span"):
        frontier(problem, [4], objective="speed")


def test_a_budget_below_the_chunks_minimum_is_a_row_and_all_such_budgets_an_error() -> None:
    rows = frontier(VSHAPE, [0.75, 1.0], SETTINGS)
    infeasible = optimizer_rows(rows)[0]
    assert infeasible.status == INFEASIBLE
    assert "raise the budget to at least 1" in infeasible.note
    # The problem exists at 0.75, so the named schedules are reported there, all over budget.
    named = [row for row in rows if row.budget == 0.75 and row.schedule != "optimal"]
    assert named and not any(row.feasible for row in named)
    check_frontier(rows)
    with pytest.raises(InfeasibleBudget, match="no budget from 0.6 to 0.75 admits a schedule; the smallest that "
                                               "does is 1"):
        frontier(VSHAPE, [0.6, 0.75], SETTINGS)


def test_optimizer_curve_never_rises_with_short_limits() -> None:
    """Short limits leave some budgets unproven; the curve must still fall monotonically."""
    problem = replace(VSHAPE, num_microbatches=8)
    rows = frontier(problem, [1.0, 1.5, 2.0, 2.5, 3.0], replace(SETTINGS, time_limit_s=0.3))
    check_frontier(rows)


def test_progress_reports_each_budget_then_its_solve() -> None:
    seen: list[SweepProgress] = []
    frontier(SPLIT, [2, 3], SETTINGS, progress=seen.append)
    starts = [p for p in seen if p.solve is None]
    assert [(p.index, p.total, p.budget) for p in starts] == [(0, 2, 2.0), (1, 2, 3.0)]
    assert seen[0].solve is None
    for p in seen:
        if p.solve is not None:
            assert p.solve.elapsed_s >= 0


def test_a_worse_answer_at_a_larger_budget_is_replaced_by_the_smaller_budgets_schedule() -> None:
    """The guard behind the monotone curve: the previous answer, replayed under the larger budget, is kept."""
    small = SPLIT.with_budget(2.0)
    large = SPLIT.with_budget(3.0)
    at_small = solve(small, time_limit_s=2, num_workers=1)
    at_large = solve(large, time_limit_s=2, num_workers=1)
    kept = _keep_previous(large, at_small, 2.0, at_large)
    assert kept.schedule == at_small.schedule
    assert kept.objective == pytest.approx(at_small.objective)
    assert kept.metrics.feasible and kept.metrics.peak_memory <= 2.0 + 1e-9
    assert kept.lower_bound == pytest.approx(min(at_small.objective, at_large.lower_bound))
    assert kept.source == "budget 2"
    assert kept.solver_times is None


def test_bounds_proven_at_larger_budgets_carry_down() -> None:
    def opt(budget: float, objective: float, bound: float) -> FrontierRow:
        gap = (objective - bound) / objective
        return FrontierRow(budget, "optimal", True, objective, objective, objective, 0.9, budget,
                           status=OPTIMAL if gap == 0 else "FEASIBLE", lower_bound=bound, gap=gap)

    rows = [opt(4, 10.0, 8.0), opt(5, 9.5, 9.5), opt(6, 9.5, 9.0)]
    carried = _carry_bounds_down(rows)
    assert [row.lower_bound for row in carried] == [9.5, 9.5, 9.0]
    assert carried[0].gap == pytest.approx(0.05) and carried[0].status == "FEASIBLE"
    proven = _carry_bounds_down([opt(4, 9.5, 8.0), opt(5, 9.5, 9.5)])
    assert proven[0].status == OPTIMAL and proven[0].gap == 0  # the larger budget's proof settles the smaller


def test_progress_flag_prints_lines_on_a_pipe_in_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    """Without a store and with one job the budgets are solved in this process: --progress used to print nothing
    there on a pipe. Each budget's start is a line, and so is each budget's last report (held back by the limit of
    a line a second, it is printed before the next budget starts)."""
    argv = ["frontier", str(TINY_CONFIG), "--budgets", "2:3:1", "--time-limit", "1", "--workers", "1"]
    assert main(argv) == 0
    assert capsys.readouterr().err == ""  # not a terminal: nothing without the flag
    assert main([*argv, "--progress"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert "budget 1/2 (2 slots): named schedules ..." in lines and "budget 2/2 (3 slots): named schedules ..." in lines
    assert any(line.startswith("budget 1/2 (2 slots): solving: ") for line in lines), lines
    assert lines[-1].startswith("budget 2/2 (3 slots): solving: "), lines


def test_frontier_command_writes_csv_and_a_self_contained_plot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    png = shutil.which("chromium") is not None and importlib.util.find_spec("kaleido") is not None
    argv = ["frontier", str(TINY_CONFIG), "--budgets", "0.5:3:0.5", "--time-limit", "2", "--workers", "1",
            "--out", str(out), "--quiet"]
    code = main(argv if png else [*argv, "--no-png"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err == ""  # no progress display: not a terminal
    table = captured.out
    assert "makespan (units) against budget (slots)" in table
    assert "budget 0.5: the budget (0.5) on device 0 is below one activation (1)" in table
    with (out / "frontier.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == list(FRONTIER_COLUMNS)
    assert sorted({float(row["budget"]) for row in rows}) == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    optimal = [row for row in rows if row["schedule"] == "optimal"]
    assert [row["status"] for row in optimal][0] == INFEASIBLE
    values = [float(row["objective"]) for row in optimal[1:]]
    assert values == sorted(values, reverse=True)
    html = (out / "frontier.html").read_text(encoding="utf-8")
    assert html.count("* plotly.js v") == 1 and "<script src" not in html
    # Under the chart, the table the terminal printed: a budget that admits nothing says why, an over-budget value
    # is in parentheses (the page was the chart alone, which leaves both out).
    table = html[html.index('<table class="frontier">'):html.index("</table>", html.index('<table class="frontier">'))]
    assert "<th>budget (slots)</th>" in table and "<th>lower bound</th>" in table
    assert '<td class="num">0.5</td>' in table and "INFEASIBLE" in table
    assert "the budget (0.5) on device 0 is below one activation (1)" in table
    assert table.count("<tr>") == 1 + 6  # the header and one row a budget
    expected = ["frontier.csv", "frontier.html", *(["frontier.png"] if png else []), "store.sqlite"]
    assert sorted(p.name for p in out.iterdir()) == expected
    assert [p.name for p in tmp_path.iterdir()] == ["sweep"]


@pytest.mark.parametrize("store", [False, True])
def test_frontier_json_is_every_row_and_stdout_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                     store: bool) -> None:
    """--format json prints one object, the rows frontier.csv holds (a budget that admits nothing with its note);
    what else the command says (the store's count, what it wrote) goes to stderr. In this process, and as tasks
    with a store."""
    out = tmp_path / "sweep"
    argv = ["frontier", str(TINY_CONFIG), "--budgets", "0.5:2:0.5", "--time-limit", "1", "--workers", "1",
            "--format", "json", "--quiet", "--no-png", *(["--out", str(out)] if store else [])]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)
    assert (data["name"], data["objective"], data["units"]) == ("good-minimal", "makespan",
                                                                {"time": "units", "memory": "slots"})
    assert data["finished"] is True
    rows = data["rows"]
    assert sorted({row["budget"] for row in rows}) == [0.5, 1.0, 1.5, 2.0]
    assert set(rows[0]) == set(FRONTIER_COLUMNS)
    optimal = [row for row in rows if row["schedule"] == "optimal"]
    assert optimal[0]["status"] == INFEASIBLE and "below one activation (1)" in optimal[0]["note"]
    values = [row["objective"] for row in optimal[1:]]
    assert values == sorted(values, reverse=True) and all(row["feasible"] for row in optimal[1:])
    if store:
        with (out / "frontier.csv").open(encoding="utf-8", newline="") as file:
            written = list(csv.DictReader(file))
        assert [(float(r["budget"]), r["schedule"], r["objective"] and float(r["objective"])) for r in written] == [
            (row["budget"], row["schedule"], "" if row["objective"] is None else row["objective"]) for row in rows]
        assert f"results came from the store {out}/store.sqlite" in captured.err
        assert f"wrote {out}/: frontier.csv, frontier.html, store.sqlite" in captured.err
    else:
        assert captured.err == ""


@pytest.mark.parametrize("folder", ["sweep", "new/parents/sweep"])
def test_frontier_command_with_no_workable_budget_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          folder: str) -> None:
    """Nothing is left behind: neither --out nor the parents of it that the run created."""
    out = tmp_path / folder
    code = main(["frontier", str(TINY_CONFIG), "--budgets", "0.25:0.75:0.25", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == USER_ERROR
    assert "no budget from 0.25 to 0.75 admits a schedule; the smallest that does is 1" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_frontier_ignores_a_budget_in_the_config_that_admits_nothing(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep sets the budget, so a config whose own budget is below one activation still sweeps."""
    config = tmp_path / "small.yaml"
    config.write_text("pipeline: {num_stages: 3, num_microbatches: 4}\n"
                      "costs: {forward: 1.0, backward: 2.0}\nmemory: {activation: 2, budget: 1}\n")
    assert main(["frontier", str(config), "--budgets", "2:6:2", "--time-limit", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "OPTIMAL" in out
    assert main(["solve", str(config), "--time-limit", "2"]) == 2
    assert "below one activation" in capsys.readouterr().err


def test_each_budget_is_warm_started_from_the_previous_answer_under_its_budgets_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Solved in sequence, each budget gets the previous answer as a warm start, named by its budget, so that when
    it wins the row's source says "budget X" (it used to say "optimal", the previous answer's schedule name)."""
    real_solve = frontier_module.solve_checked
    hints_seen: list[list[str]] = []

    def recording_solve(*args: Any, **kwargs: Any) -> Any:
        hints_seen.append([hint.name for hint in kwargs.get("hints", [])])
        # The named schedules replayed for the frontier's rows are the optimizer's warm starts as they are.
        assert {schedule.name for schedule, _ in kwargs["named"]} >= {"1f1b", "zb-h1"}
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(frontier_module, "solve_checked", recording_solve)
    problem = Problem.build(4, 8, forward=1, backward=1, backward_weight=0.5, comm=0.03)
    rows = [r for r in frontier(problem, [4, 5, 6], SolverSettings(time_limit_s=1, num_workers=2))
            if r.schedule == "optimal"]
    assert hints_seen == [[], ["budget 4"], ["budget 5"]]
    assert all(r.source != "optimal" for r in rows)


def test_the_frontier_chart_names_the_schedules_it_cannot_draw() -> None:
    """A schedule over every budget swept has no point to draw, and plotly left it out of the legend without a
    word (the table lists its values in parentheses); the chart now names it."""
    from pipeplan.report.figures import frontier_figure

    def row(budget: float, schedule: str, feasible: bool, value: float) -> FrontierRow:
        return FrontierRow(budget, schedule, feasible, value, value, value, 0.9, budget + (0 if feasible else 5),
                           **({"status": OPTIMAL, "lower_bound": value, "gap": 0.0} if schedule == "optimal" else {}))

    rows = [row(b, s, s != "zb-h2", v) for b in (6, 8) for s, v in (("1f1b", 20.0), ("zb-h2", 17.0), ("optimal", 18.0))]
    fig = frontier_figure(rows, "makespan", "t")
    assert [a.text for a in fig.layout.annotations] == ["not drawn, over every budget swept: zb-h2"]
    assert not frontier_figure([r for r in rows if r.schedule != "zb-h2"], "makespan", "t").layout.annotations
