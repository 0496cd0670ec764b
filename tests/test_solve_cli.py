"""``pipeplan solve`` through ``pipeplan.cli.main``: the JSON object, the flags, the --out folder and the table.

The config is the benchmark family at P=4, N=8, budget 8, where CP-SAT beats every named schedule (23.09 against
ZB-H2's 23.18 for makespan, 22.68 for stage span), so the optimizer's entry is the chosen one. Short time limits.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from pipeplan import Op, OpKind, Problem, Schedule, compute_metrics, load_config, simulate
from pipeplan.cli import USER_ERROR, main
from pipeplan.report.files import read_results

ROOT = Path(__file__).resolve().parent.parent
SEED = str(ROOT / "models" / "seed-8x64.yaml")
SUMMARY_KEYS = {"name", "num_stages", "num_microbatches", "memory_budget", "objective", "schedules", "chosen"}
OPTIMIZER_KEYS = {"status", "lower_bound", "gap", "solve_time_s"}
OP_KEYS = {"device", "stage", "chunk", "microbatch", "kind", "start", "end"}
FAST = ("--time-limit", "5", "--workers", "2", "--quiet")

FAMILY_YAML = """\
name: family-4x8
pipeline: {num_stages: 4, num_microbatches: 8}
costs: {forward: 1.0, backward: 1.0, backward_weight: 0.5, comm: 0.03}
memory: {activation: 1, weight_activation: 0.35, budget: 8}
solver: {objective: makespan, time_limit_s: 30, num_workers: 2, random_seed: 0}
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def family(tmp_path: Path) -> str:
    path = tmp_path / "family-4x8.yaml"
    path.write_text(FAMILY_YAML, encoding="utf-8")
    return str(path)


def solve_json(capsys: pytest.CaptureFixture[str], config: str, *flags: str) -> dict[str, Any]:
    code, out, err = run(capsys, "solve", config, "--format", "json", *FAST, *flags)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def by_name(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["schedule"]: row for row in summary["schedules"]}


def replay_record(problem: Problem, record: dict[str, Any]) -> tuple[dict[Op, tuple[float, float]], Schedule]:
    """The ops of a schedules/<name>.json file as written, and the per-device orders (sorted by start)."""
    written: dict[Op, tuple[float, float]] = {}
    orders: list[list[tuple[float, float, Op]]] = [[] for _ in range(problem.num_devices)]
    for item in record["ops"]:
        assert set(item) == OP_KEYS
        op = Op(OpKind(item["kind"]), item["stage"], item["microbatch"], item["chunk"])
        assert op == problem.op(op.kind, op.stage, op.microbatch)  # the chunk field agrees with the placement
        written[op] = (item["start"], item["end"])
        orders[item["device"]].append((item["start"], item["end"], op))
    schedule = Schedule.from_lists(record["schedule"], [[op for _, _, op in sorted(order)] for order in orders])
    return written, schedule


# ------------------------------------------------------------------------------------------------- JSON


def test_json_object_has_the_issue_keys_and_the_optimizer_wins(
    capsys: pytest.CaptureFixture[str], family: str
) -> None:
    summary = solve_json(capsys, family)
    assert SUMMARY_KEYS <= set(summary)
    assert (summary["name"], summary["num_stages"], summary["num_microbatches"]) == ("family-4x8", 4, 8)
    assert summary["memory_budget"] == 8
    assert summary["objective"] == "makespan"
    rows = by_name(summary)
    assert {"gpipe", "1f1b", "zb-h1", "zb-h2", "optimal"} <= set(rows)
    optimal = rows["optimal"]
    assert OPTIMIZER_KEYS <= set(optimal)
    assert optimal["status"] == "OPTIMAL"
    assert optimal["makespan"] == pytest.approx(23.09)
    assert optimal["lower_bound"] == pytest.approx(23.09)
    assert optimal["gap"] == pytest.approx(0.0, abs=1e-9)
    assert optimal["solve_time_s"] >= 0 and optimal["feasible"] is True
    for name, row in rows.items():
        if row["feasible"] and name != "optimal":
            assert optimal["makespan"] < row["makespan"] - 1e-6, name
    assert summary["chosen"] == "optimal"


def test_every_entry_has_the_fields_of_simulate(capsys: pytest.CaptureFixture[str], family: str) -> None:
    summary = solve_json(capsys, family)
    rows = by_name(summary)
    for name in ("gpipe", "1f1b", "zb-h1", "zb-h2"):
        code, out, err = run(capsys, "simulate", family, "--schedule", name, "--format", "json")
        assert code == 0, err
        simulated = json.loads(out)
        assert set(simulated) <= set(rows[name])
        assert {key: rows[name][key] for key in simulated} == simulated, name
    fields = set(json.loads(run(capsys, "simulate", family, "--schedule", "1f1b", "--format", "json")[1]))
    for name, row in rows.items():
        assert fields <= set(row), name
        if name != "optimal":
            assert not OPTIMIZER_KEYS & {k for k, v in row.items() if v is not None}, name


def test_flags_override_the_config(capsys: pytest.CaptureFixture[str], family: str) -> None:
    summary = solve_json(capsys, family, "--objective", "stage_span", "--time-limit", "3", "--workers", "1",
                         "--seed", "5")
    assert summary["objective"] == "stage_span"
    assert summary["config"]["solver"] == {"objective": "stage_span", "time_limit_s": 3.0, "num_workers": 1,
                                           "random_seed": 5}
    rows = by_name(summary)
    # Stage span is what was minimised: 22.68, below the makespan optimum's 23.09 and every named stage span.
    assert rows["optimal"]["stage_span"] == pytest.approx(22.68)
    assert rows["optimal"]["lower_bound"] == pytest.approx(22.68)
    assert all(rows["optimal"]["stage_span"] < row["stage_span"] for name, row in rows.items()
               if name != "optimal" and row["feasible"])
    # Without flags the config's settings hold.
    default = solve_json(capsys, family)
    assert default["objective"] == "makespan"
    assert default["config"]["solver"]["random_seed"] == 0


def test_one_worker_and_a_seed_reproduce_the_schedule(
    capsys: pytest.CaptureFixture[str], family: str, tmp_path: Path
) -> None:
    records = []
    for attempt in ("a", "b"):
        out = tmp_path / attempt
        code, _, err = run(capsys, "solve", family, *FAST, "--workers", "1", "--seed", "3", "--out", str(out))
        assert code == 0, err
        records.append(json.loads((out / "schedules" / "optimal.json").read_text(encoding="utf-8")))
    assert records[0] == records[1]


def test_time_limit_flag_cuts_a_long_configured_solve(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Two chunks per device: CP-SAT cannot prove it in a second, and the config allows 600 s."""
    config = tmp_path / "chunks.yaml"
    config.write_text(FAMILY_YAML.replace("num_microbatches: 8}", "num_microbatches: 8, num_chunks: 2}")
                      .replace("budget: 8", "budget: 4").replace("time_limit_s: 30", "time_limit_s: 600"),
                      encoding="utf-8")
    started = time.monotonic()
    code, out, err = run(capsys, "solve", str(config), "--format", "json", "--time-limit", "1", "--workers", "2",
                         "--quiet")
    assert code == 0, err
    assert time.monotonic() - started < 15
    optimal = by_name(json.loads(out))["optimal"]
    assert optimal["status"] in ("OPTIMAL", "FEASIBLE")
    assert optimal["lower_bound"] <= optimal["makespan"] + 1e-9
    assert (optimal["status"] == "OPTIMAL") == (optimal["gap"] <= 1e-9)


# --------------------------------------------------------------------------------------------- --out DIR


def test_out_folder_holds_summary_metrics_and_schedules(
    capsys: pytest.CaptureFixture[str], family: str, tmp_path: Path
) -> None:
    out = tmp_path / "result"
    code, stdout, err = run(capsys, "solve", family, "--format", "json", *FAST, "--out", str(out))
    assert code == 0, err
    summary = json.loads(stdout)
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == summary

    with (out / "metrics.csv").open(encoding="utf-8", newline="") as file:
        table = list(csv.DictReader(file))
    assert [row["schedule"] for row in table] == [row["schedule"] for row in summary["schedules"]]
    for written, row in zip(table, summary["schedules"]):
        assert {"schedule", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory",
                "peak_memory_per_device", "busy_per_device", "flushes"} | OPTIMIZER_KEYS <= set(written)
        for key in ("makespan", "stage_span", "utilization", "bubble", "peak_memory"):
            assert float(written[key]) == pytest.approx(row[key], rel=1e-12), (row["schedule"], key)
        assert written["feasible"] == str(row["feasible"])
        assert int(written["flushes"]) == row["flushes"]
        for key in ("peak_memory_per_device", "busy_per_device"):
            assert [float(v) for v in written[key].split()] == pytest.approx(row[key]), (row["schedule"], key)
        for key in OPTIMIZER_KEYS:
            if row["schedule"] == "optimal":
                value = row[key] if key == "status" else pytest.approx(row[key])
                assert (written[key] if key == "status" else float(written[key])) == value
            else:
                assert written[key] == ""

    problem = load_config(family).problem
    files = sorted(path.name for path in (out / "schedules").iterdir())
    assert files == sorted(f"{row['schedule']}.json" for row in summary["schedules"])
    for row in summary["schedules"]:
        record = json.loads((out / "schedules" / f"{row['schedule']}.json").read_text(encoding="utf-8"))
        assert record["schedule"] == row["schedule"]
        assert len(record["ops"]) == len(problem.all_ops())
        written, schedule = replay_record(problem, record)
        assert set(written) == set(problem.all_ops())
        ends = [end for _, end in written.values()]
        assert max(ends) - min(start for start, _ in written.values()) == pytest.approx(row["makespan"])


def test_optimal_json_replays_to_the_same_times(
    capsys: pytest.CaptureFixture[str], family: str, tmp_path: Path
) -> None:
    out = tmp_path / "result"
    for objective in ("makespan", "stage_span"):
        code, _, err = run(capsys, "solve", family, *FAST, "--objective", objective, "--out", str(out), "--force")
        assert code == 0, err
        problem = load_config(family).problem
        record = json.loads((out / "schedules" / "optimal.json").read_text(encoding="utf-8"))
        written, schedule = replay_record(problem, record)
        timeline = simulate(problem, schedule)
        for op, start, end in zip(timeline.ops, timeline.start, timeline.end):
            assert math.isclose(start, written[op][0], abs_tol=1e-9), op.label
            assert math.isclose(end, written[op][1], abs_tol=1e-9), op.label
        summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        assert by_name(summary)["optimal"][objective] == pytest.approx({"makespan": 23.09, "stage_span": 22.68}[
            objective])


def test_out_folder_that_exists_is_refused_before_solving(
    capsys: pytest.CaptureFixture[str], family: str, tmp_path: Path
) -> None:
    out = tmp_path / "result"
    out.mkdir()
    (out / "keep.txt").write_text("mine", encoding="utf-8")
    code, stdout, err = run(capsys, "solve", family, *FAST, "--out", str(out))
    assert code == USER_ERROR
    assert "already exists" in err and "--force" in err
    assert stdout == ""
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pipeline: {num_stages: 4, num_microbatches: 8}\nmemory: {activation: 2, budget: 1}\n",
         "memory.budget (1) on device 0 is below one activation (2)"),
        ("pipeline: {num_stages: 2, num_microbatches: 4, num_chunks: 2}\nmemory: {activation: [1, 2, 1.5, 1], "
         "budget: 2.5}\n", "at least 3"),
        ("pipeline: {num_stages: 4, num_microbatches: 8}\nsolver: {objective: speed}\n",
         "solver.objective must be one of makespan, stage_span"),
    ],
    ids=["budget-below-activation", "budget-below-chunks", "bad-objective"],
)
def test_config_error_exits_2_and_leaves_no_out_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text, encoding="utf-8")
    out = tmp_path / "result"
    code, stdout, err = run(capsys, "solve", str(config), *FAST, "--out", str(out))
    assert code == USER_ERROR == 2
    assert message in err
    assert "Traceback" not in err
    assert stdout == ""
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.yaml"]  # no staging folder left behind either


# ------------------------------------------------------------------------------------------------ table


def test_table_names_the_chosen_optimizer(capsys: pytest.CaptureFixture[str], family: str) -> None:
    code, out, err = run(capsys, "solve", family, *FAST)
    assert code == 0, err
    assert "chosen: optimal" in out
    assert "OPTIMAL" in out
    for name in ("gpipe", "1f1b", "zb-h1", "zb-h2", "optimal"):
        assert name in out
    assert "23.09" in out


def test_table_gives_a_tie_to_the_named_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    """The seed: 1F1B already reaches the optimum 213, so it is chosen over the optimizer's equal schedule."""
    code, out, err = run(capsys, "solve", SEED, *FAST)
    assert code == 0, err
    assert "chosen: 1f1b" in out
    assert "213" in out
    code, out, err = run(capsys, "solve", SEED, "--format", "json", *FAST)
    summary = json.loads(out)
    assert summary["chosen"] == "1f1b"
    assert by_name(summary)["optimal"]["makespan"] == by_name(summary)["1f1b"]["makespan"] == 213.0
    assert by_name(summary)["optimal"]["status"] == "OPTIMAL"


def test_json_rounds_results_but_not_the_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Results are written at twelve significant digits, printed and in summary.json (which still rebuilds the
    report: its replay check forgives far more); the config, which reproduces the run, is written as given."""
    path = tmp_path / "digits.yaml"
    path.write_text(FAMILY_YAML.replace("forward: 1.0", "forward: 1.2345678901234567"), encoding="utf-8")
    out = tmp_path / "out"
    printed = solve_json(capsys, str(path), "--time-limit", "2", "--out", str(out))
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == printed
    assert printed["config"]["costs"]["forward"] == 1.2345678901234567
    results = read_results(out)  # replays every schedule and checks the summary's numbers against it
    pairs = [(row[key], getattr(compute_metrics(results.timelines[row["schedule"]]), key))
             for row in printed["schedules"] for key in ("makespan", "stage_span", "utilization", "bubble")]
    assert len(pairs) > 8
    assert any(value != exactly for value, exactly in pairs)  # some sum of these costs is not a short float
    assert all(value == float(f"{exactly:.12g}") for value, exactly in pairs)
    code, _, err = run(capsys, "report", str(out), "--force")
    assert code == 0, err
    # metrics.csv's lists at the same twelve digits (they were at six: 15.627 for 15.6270201827).
    with (out / "metrics.csv").open(encoding="utf-8", newline="") as file:
        table = {row["schedule"]: row for row in csv.DictReader(file)}
    for row in printed["schedules"]:
        busy = [float(v) for v in table[row["schedule"]]["busy_per_device"].split()]
        assert busy == row["busy_per_device"] and any(len(f"{v:g}") < len(repr(v)) for v in busy)


def test_without_a_budget_the_other_layout_hints_name_none(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             family: str) -> None:
    """With no memory.budget the hints said "zb-v ... reaches makespan 21.98 units within the budget"."""
    path = tmp_path / "unlimited.yaml"
    path.write_text(FAMILY_YAML.replace(", budget: 8", ""), encoding="utf-8")
    code, out, err = run(capsys, "solve", str(path), "--time-limit", "2", "--workers", "1", "--quiet", "--out",
                         str(tmp_path / "out"))
    assert code == 0, err
    hints = [line for line in out.splitlines() if line.startswith("other layout: ")]
    assert hints and all(" units; set them under pipeline:" in line for line in hints), out
    assert "budget" not in " ".join(hints)
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert '<p class="note">Faster on another layout (the optimizer searched' in page
    # Under a budget they still say so.
    code, out, err = run(capsys, "solve", family, "--time-limit", "2", "--workers", "1", "--quiet")
    assert code == 0, err
    assert " within the budget; set them under pipeline:" in out, out
