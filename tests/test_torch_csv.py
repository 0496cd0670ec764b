"""PyTorch's compute-only schedule CSV: export every family, read it back (pipeplan's reader and, when torch is
installed, torch's own parser and runtime lowering), import torch's own dumps, and every bad file matched to
its message.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import pipeplan.cli
from pipeplan import (
    ConfigError,
    Problem,
    Schedule,
    ScheduleError,
    compute_metrics,
    generate,
    schedule_names,
    simulate,
    solve,
)
from pipeplan.cli import USER_ERROR, main
from pipeplan.problem import counted
from pipeplan.torch_csv import from_torch_csv, read_torch_csv, to_torch_csv

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests" / "configs" / "good-per-stage-split.yaml")

# (layout, split backward): every layout with both backwards; each family exports wherever it applies.
LAYOUTS: list[dict[str, Any]] = [
    {"num_stages": 4, "num_chunks": 1, "placement": "loop"},
    {"num_stages": 3, "num_chunks": 2, "placement": "loop"},
    {"num_stages": 3, "num_chunks": 3, "placement": "loop"},
    {"num_stages": 4, "num_chunks": 2, "placement": "v"},
]


def layout_problem(layout: dict[str, Any], split: bool, n: int = 8) -> Problem:
    return Problem.build(num_microbatches=n, forward=1.0, backward=1.2 if split else 2.0,
                         backward_weight=0.8 if split else 0.0, comm=0.1, **layout)


def every_schedule() -> list[tuple[str, Problem, Schedule]]:
    """Every registered family on every layout it applies to, split and unsplit, plus the optimizer's."""
    found = []
    for layout in LAYOUTS:
        for split in (False, True):
            problem = layout_problem(layout, split)
            for name in schedule_names():
                try:
                    found.append((f"{name}-{layout['placement']}{layout['num_chunks']}-{split}", problem,
                                  generate(name, problem)))
                except ValueError:
                    continue
    for layout in (LAYOUTS[0], LAYOUTS[3]):
        problem = layout_problem(layout, True, n=6)
        found.append((f"optimal-{layout['placement']}", problem,
                      solve(problem, time_limit_s=2, num_workers=1).schedule))
    return found


SCHEDULES = every_schedule()
IDS = [row[0] for row in SCHEDULES]


def test_every_family_is_exported() -> None:
    families = {row[0].split("-loop")[0].split("-v2")[0] for row in SCHEDULES}
    assert set(schedule_names()) | {"optimal"} <= families


@pytest.mark.parametrize(("label", "problem", "schedule"), SCHEDULES, ids=IDS)
def test_export_reads_back_to_the_same_orders(label: str, problem: Problem, schedule: Schedule) -> None:
    text = to_torch_csv(problem, schedule)
    rows = text.splitlines()
    assert len(rows) == problem.num_devices
    kinds = {cell[len(cell.rstrip("0123456789")) - 1] for row in rows for cell in row.split(",")}
    assert kinds == ({"F", "I", "W"} if problem.split_backward else {"F", "B"})
    assert from_torch_csv(problem, text, name=schedule.name).orders == schedule.orders


def test_export_refuses_a_schedule_of_another_problem() -> None:
    # It used to write a file of 2 rows with W actions for a 3-rank problem without W, which the import refuses.
    other = generate("zb-h1", Problem.build(2, 2, backward_weight=1.0))
    with pytest.raises(ScheduleError, match="has 2 device orders, expected 3"):
        to_torch_csv(Problem.build(3, 2), other)
    with pytest.raises(ScheduleError, match="has op W0@s0, but this problem has no W ops"):
        to_torch_csv(Problem.build(2, 2), other)
    with pytest.raises(ScheduleError, match="schedule must be a pipeplan Schedule, got NoneType"):
        to_torch_csv(Problem.build(2, 2), None)  # type: ignore[arg-type]


def test_cells_spell_stage_kind_microbatch() -> None:
    problem = Problem.build(2, 2, backward_weight=1.0)
    assert to_torch_csv(problem, generate("zb-h1", problem)) == "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n"
    unsplit = Problem.build(2, 2)
    assert to_torch_csv(unsplit, generate("1f1b", unsplit)) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


# Bad files, each matched to its message. The config: 2 ranks, 2 microbatches, one chunk, split backward.
GOOD = "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0,1F1,1I1,1W1\n"
BAD_FILES = [
    ("unknown-action", GOOD.replace("0W1", "0X1"), "row 1 (rank 0), column 6: '0X1' is not a compute action"),
    ("trailing-junk", GOOD.replace("1I1", "1BW1"), "row 2 (rank 1), column 5: '1BW1' is not a compute action"),
    ("no-microbatch", GOOD.replace("0F1", "0F"), "column 2: '0F' is not a compute action"),
    ("communication", GOOD.replace("0F1", "0SEND_F1"), "'0SEND_F1' is a communication action"),
    ("stage-on-two-ranks", GOOD + "", None),  # filled below
    ("too-few-rows", "0F0,0F1,0I0,0W0,0I1,0W1\n", "has 1 row (one per rank), but the config has "
     "pipeline.num_stages: 2"),
    ("empty", "", "has no rows (one per rank), but the config has pipeline.num_stages: 2"),
    ("stage-out-of-range", GOOD.replace("1W1", "2W1"), "'2W1' names stage 2, but the config has 2 model stages"),
    ("microbatch-out-of-range", GOOD.replace("1W1", "1W2"), "'1W2' names microbatch 2, but the config has "
     "pipeline.num_microbatches: 2"),
    ("repeated", GOOD.replace("0W1", "0W0"), "column 6: '0W0' runs W of stage 0, microbatch 0 again (already at "
     "row 1, column 4"),
    # Ops named as the file writes them (1W1, 0I0), not as pipeplan does (W1@s1, B0@s0).
    ("missing", GOOD.replace(",1W1", ""), "is missing 1 op: 1W1"),
    ("deadlock", "0F0,0F1,0I0,0W0,0I1,0W1\n1I0,1F0,1W0,1F1,1I1,1W1\n", "deadlocks: rank 0 (row 1), column 3: 0I0 "
     "waits for 1I0; rank 1 (row 2), column 1: 1I0 waits for 1F0"),
    ("fewer-microbatches", "0F0,0I0,0W0\n1F0,1I0,1W0\n", "(the file runs only microbatch 0; the config has "
     "pipeline.num_microbatches: 2): schedule 'torch-csv' is missing 6 ops: 0F1, 0I1"),
]
# The cell on the wrong rank is named (1I1 on rank 0), not the first cell of the rank the config gives the stage.
BAD_FILES[4] = ("stage-on-two-ranks", "0F0,0F1,0I0,0W0,1I1,0W1\n1F0,1I0,1W0,1F1,0I1,1W1\n",
                "row 1 (rank 0), column 5: '1I1' puts stage 1 on rank 0, but the config places it on rank 1, where "
                "the file runs it too (row 2, column 1: '1F0'); a stage lives on one rank: move this action to row 2")
BAD_FILES += [
    # torch reads every line as a rank: a blank line, or a row of empty cells, is a rank with nothing to run.
    ("trailing-blank-line", GOOD + "\n", "row 3 (rank 2) holds no action (a blank line at the end of the file?); "
     "torch reads every line as a rank"),
    ("trailing-empty-cells", GOOD + ",,,\n", "row 3 (rank 2) holds no action (a blank line at the end"),
    ("blank-line-between", GOOD.replace("\n", "\n\n", 1), "row 2 (rank 1) holds no action; torch reads every line"),
    ("byte-order-mark", "\ufeff" + GOOD, "starts with a byte-order mark (Excel's 'CSV UTF-8' saves one), which "
     "torch's reader takes as part of the first action and refuses"),
    # With more rows than ranks there is no placement to check against: the file's own two rows are named.
    ("stage-on-two-ranks-of-three", "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1W0\n1F1,1I1,1W1\n",
     "row 3 (rank 2), column 1: '1F1' puts stage 1 on rank 2, but row 2 (rank 1) already runs it ('1F0')"),
]


def test_order_errors_name_the_files_own_cells_and_leave_its_name_alone() -> None:
    """Op labels in the message become the file's cells: a full backward written B in a split config stays 0B0
    (not the 0I0 the file never wrote), a file named like an op keeps its name, and counts of 11 keep their s."""
    problem = Problem.build(2, 2, backward_weight=1.0)
    deadlock = "0F0,0F1,0B0,0B1\n1B0,1F0,1F1,1B1\n"  # full backwards: B and W in one cell
    with pytest.raises(ConfigError) as info:
        from_torch_csv(problem, deadlock, name="F1@s1", source="F1@s1.csv")
    assert str(info.value).startswith("F1@s1.csv does not give a runnable schedule of the config: schedule 'F1@s1' "
                                      "deadlocks: rank 0 (row 1), column 3: 0B0 waits for "
                                      "1B0; rank 1 (row 2), column 1: 1B0 waits for 1F0"), info.value
    big = Problem.build(2, 6, backward_weight=1.0)
    with pytest.raises(ConfigError, match=r"is missing 18 ops: 0F3, 0I3, 0W3, 0F4, 0I4, 0W4, 0F5, 0I5, 0W5, 1F3, "
                                          r"\.\.\."):
        from_torch_csv(big, "0F0,0F1,0F2,0I0,0W0,0I1,0W1,0I2,0W2\n1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2\n")


@pytest.mark.parametrize(("label", "text", "message"), BAD_FILES, ids=[row[0] for row in BAD_FILES])
def test_bad_file_names_the_first_offending_cell(label: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        from_torch_csv(Problem.build(2, 2, backward_weight=1.0), text, source="f.csv")
    assert message in str(info.value)
    assert str(info.value).startswith("f.csv")


@pytest.mark.parametrize(
    ("problem", "text", "message"),
    [
        (Problem.build(2, 2), GOOD, "'0I0' is a split-backward action, but the config's backward is not split"),
        (Problem.build(2, 2, num_chunks=2, placement="v"), "0F0,2F0\n1F0,3F0\n",
         "row 1 (rank 0), column 2: '2F0' puts stage 2 on rank 0, but the config places it on rank 1 "
         "(pipeline.num_chunks: 2, placement: v)"),
        (Problem.build(2, 2, num_chunks=2), "0F0,3F0\n1F0,2F0\n",
         "row 1 (rank 0), column 2: '3F0' puts stage 3 on rank 0, but the config places it on rank 1 "
         "(pipeline.num_chunks: 2, placement: loop)"),
        (Problem.build(2, 2), "0F0,0F1,0B0,0B1\n\n1F0,1F1,1B0,1B1\n", "row 2 (rank 1) holds no action; torch reads "
         "every line as a rank and every rank runs its stages' ops: delete the line"),
        (Problem.build(2, 2), "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n2F0\n", "has 3 rows (one per rank), but the config "
         "has pipeline.num_stages: 2"),
        # Stage 1 on rows 1 and 3, neither its rank: no layout matches, so not "change the config's layout".
        (Problem.build(3, 1), "0F0,1F0,0B0\n2F0,2B0\n1B0\n", "row 1 (rank 0), column 2: '1F0' puts stage 1 on rank "
         "0, and row 3 (rank 2) runs it too ('1B0'); a stage lives on one rank, here rank 1 (row 2): move its actions "
         "there"),
    ],
    ids=["split-action-unsplit-config", "placement-v-given-loop", "placement-mismatch", "blank-row-is-a-rank",
         "a-row-too-many", "stage-on-two-wrong-ranks"],
)
def test_file_that_does_not_fit_the_config(problem: Problem, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_torch_csv(problem, text)
    assert message in str(info.value)


def test_full_backward_reads_as_b_then_w_in_a_split_config() -> None:
    problem = Problem.build(2, 2, backward_weight=1.0)
    schedule = from_torch_csv(problem, "0F0,0F1,0B0,0I1,0W1\n1F0,1B0,1F1,1I1,1W1\n")
    assert [op.label for op in schedule.orders[0]] == ["F0@s0", "F1@s0", "B0@s0", "W0@s0", "B1@s0", "W1@s0"]


# Torch's own schedules: the parser must read every cell back to the same action, the runtime must accept and
# lower the file (validation, stage placement, sends and receives), and torch's dumps must import.

def _torch() -> Any:
    return pytest.importorskip("torch.distributed.pipelining.schedules")


def _runtime(problem: Problem) -> Any:
    """A _PipelineScheduleRuntime over stand-in stages (as torch's schedule visualizer builds one)."""
    from unittest import mock

    schedules = _torch()
    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, problem.num_devices, None
    stage.num_stages = problem.num_model_stages
    return schedules._PipelineScheduleRuntime([stage, stage], problem.num_microbatches)


@pytest.mark.parametrize(("label", "problem", "schedule"), SCHEDULES, ids=IDS)
def test_round_trip_through_torch(label: str, problem: Problem, schedule: Schedule, tmp_path: Path) -> None:
    schedules = _torch()
    text = to_torch_csv(problem, schedule)
    for row in text.splitlines():
        for cell in row.split(","):
            assert str(schedules._Action.from_str(cell)) == cell
    path = tmp_path / "plan.csv"
    path.write_text(text, encoding="utf-8")
    runtime = _runtime(problem)
    runtime._load_csv(str(path), format="compute_only")
    assert runtime.stage_index_to_group_rank == {s: problem.device_of(s) for s in range(problem.num_model_stages)}
    written = [",".join(str(a) for a in runtime.pipeline_order[r]) for r in range(problem.num_devices)]
    assert written == text.splitlines()
    dumped = tmp_path / "dump.csv"
    runtime._dump_csv(str(dumped), format="compute_only")
    assert read_torch_csv(problem, dumped).orders == schedule.orders


@pytest.mark.parametrize(("torch_name", "name", "v", "placement"),
                         [("DualPipeV", "dualpipe-v", 2, "v"), ("InterleavedZeroBubble", "interleaved-zb", 2, "loop"),
                          ("ZBVZeroBubble", "zb-v", 2, "v"), ("Interleaved1F1B", "interleaved-1f1b", 2, "loop")])
def test_torch_dump_imports_as_the_same_family(torch_name: str, name: str, v: int, placement: str,
                                               tmp_path: Path) -> None:
    """Torch's own compute-only dump (idle cells, overlapped pairs, full backwards) reads as pipeplan's order."""
    _torch()
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    p, n = 4, 8
    split = torch_name != "Interleaved1F1B"
    problem = Problem.build(p, n, backward=1.0, backward_weight=1.0 if split else 0.0, num_chunks=v,
                            placement=placement)
    rows = get_schedule_ops(torch_name, p, n, v)
    path = tmp_path / "torch.csv"
    path.write_text("".join(",".join("" if a is None else str(a) for a in row) + "\n" for row in rows),
                    encoding="utf-8")
    assert read_torch_csv(problem, path).orders == generate(name, problem).orders


# The command line.

def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def result_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("solve") / "tiny"
    assert main(["solve", TINY, "--time-limit", "2", "--workers", "1", "--quiet", "--out", str(out)]) == 0
    return out


def test_export_writes_the_chosen_schedule_and_simulate_replays_it(result_folder: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    capsys.readouterr()
    target = tmp_path / "plan.csv"
    code, out, err = run(capsys, "export", str(result_folder), "--out", str(target))
    assert code == 0 and err == "" and out.startswith(f"wrote {target}: schedule ")
    chosen = json.loads((result_folder / "summary.json").read_text())["chosen"]
    code, out, _ = run(capsys, "simulate", TINY, "--from-torch-csv", str(target), "--format", "json")
    assert code == 0
    replayed = json.loads(out)
    recorded = next(r for r in json.loads((result_folder / "summary.json").read_text())["schedules"]
                    if r["schedule"] == chosen)
    assert replayed["makespan"] == pytest.approx(recorded["makespan"])
    assert replayed["peak_memory"] == pytest.approx(recorded["peak_memory"])


def test_export_names_why_a_schedule_is_missing_and_warns_over_the_budget(
        result_folder: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A schedule the solve skipped is named with the solve's reason (the message listed the folder's schedules
    only); one over the budget is written, with a note on stderr (it was written silently)."""
    code, out, err = run(capsys, "export", str(result_folder), "--schedule", "zb-v")
    assert code == USER_ERROR and out == ""
    assert "has no schedule 'zb-v': the solve skipped it (zb-v needs num_chunks 2 in V placement" in err, err
    summary = json.loads((result_folder / "summary.json").read_text())
    over = next(row for row in summary["schedules"] if not row["feasible"])
    code, out, err = run(capsys, "export", str(result_folder), "--schedule", over["schedule"], "--out",
                         str(tmp_path / "over.csv"))
    assert code == 0 and (tmp_path / "over.csv").exists()
    assert out.startswith(f"wrote {tmp_path / 'over.csv'}: schedule {over['schedule']}, 4 ranks, 4 stages, 12 "
                          "microbatches")
    # the config's budget is per device: the devices over it are named
    assert err.startswith(f"note: {over['schedule']} is over the budget on device") and "torch holds that" in err
    code, _, err = run(capsys, "export", str(result_folder), "--out", str(tmp_path / "chosen.csv"))
    assert code == 0 and err == ""  # the chosen schedule fits


def test_export_says_when_1f1b_or_gpipe_is_fitted_to_the_budget(result_folder: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    """Under a budget pipeplan fits 1F1B (a shorter warm-up) and GPipe (more flushes), and the file is then not
    torch's Schedule1F1B or ScheduleGPipe: export says so (the terminal said nothing; only the HTML report's
    headline named it). A 1F1B the budget leaves as it is gets no note."""
    code, _, err = run(capsys, "export", str(result_folder), "--schedule", "gpipe", "--out", str(tmp_path / "g.csv"))
    assert code == 0 and err.startswith("note: gpipe is fitted to the budget here (6 flushes instead of one), so "
                                        "this file is not torch's ScheduleGPipe"), err
    code, _, err = run(capsys, "export", str(result_folder), "--schedule", "1f1b", "--out", str(tmp_path / "f.csv"))
    assert code == 0 and err == ""  # 1F1B's own warm-up fits this budget
    config = tmp_path / "tight.yaml"
    config.write_text("pipeline: {num_stages: 4, num_microbatches: 8}\nmemory: {budget: 2}\n", encoding="utf-8")
    assert main(["solve", str(config), "--time-limit", "1", "--workers", "1", "--quiet", "--out",
                 str(tmp_path / "tight")]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, "export", str(tmp_path / "tight"), "--schedule", "1f1b", "--out", "-")
    assert code == 0 and err.startswith("note: 1f1b is fitted to the budget here (a shorter warm-up), so this "
                                        "file is not torch's Schedule1F1B; torch runs the file's order as written")


def test_why_not_solved_names_another_layout() -> None:
    summary = {"skipped": {}, "other_layouts": [{"schedule": "zb-v", "num_chunks": 2, "placement": "v"}]}
    assert pipeplan.cli._why_not_solved(summary, "zb-v") == (
        ": it runs on another layout (num_chunks: 2, placement: v), which the solve only compared; set them under "
        "pipeline: and solve again to export it")
    assert pipeplan.cli._why_not_solved(summary, "nope") == ""
    assert counted(1, "rank") == "1 rank" and counted(2, "microbatch", "microbatches") == "2 microbatches"


def test_simulate_reads_a_torch_csv_from_stdin(result_folder: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--from-torch-csv -`, as `export --out -` writes: the file from a pipe (it was looked for as a file '-')."""
    code, text, _ = run(capsys, "export", str(result_folder), "--schedule", "1f1b", "--out", "-")
    assert code == 0

    class Stdin:
        buffer = io.BytesIO(text.encode())

    monkeypatch.setattr(sys, "stdin", Stdin())
    code, out, err = run(capsys, "simulate", TINY, "--from-torch-csv", "-", "--format", "json")
    assert code == 0, err
    named = json.loads(run(capsys, "simulate", TINY, "--schedule", "1f1b", "--format", "json")[1])
    assert json.loads(out)["makespan"] == named["makespan"] and json.loads(out)["schedule"] == "stdin"


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "gpipe"])
def test_simulate_from_exported_csv_equals_named(name: str, result_folder: Path, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    target = tmp_path / f"{name}.csv"
    assert run(capsys, "export", str(result_folder), "--schedule", name, "--out", str(target))[0] == 0
    named = json.loads(run(capsys, "simulate", TINY, "--schedule", name, "--format", "json")[1])
    imported = json.loads(run(capsys, "simulate", TINY, "--from-torch-csv", str(target), "--format", "json")[1])
    # The file holds orders only: GPipe's flush count is not in it (the times are).
    assert {k: v for k, v in imported.items() if k not in ("schedule", "flushes")} == {
        k: v for k, v in named.items() if k not in ("schedule", "flushes")}
    assert imported["schedule"] == name


def test_export_default_path_and_force(result_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "export", str(result_folder), "--schedule", "1f1b")
    assert code == 0 and (result_folder / "1f1b.torch.csv").exists()
    code, _, err = run(capsys, "export", str(result_folder), "--schedule", "1f1b")
    assert code == USER_ERROR and "already exists; pass --force" in err
    assert run(capsys, "export", str(result_folder), "--schedule", "1f1b", "--force")[0] == 0
    (result_folder / "1f1b.torch.csv").unlink()


def test_export_creates_missing_folders_and_writes_to_stdout(result_folder: Path, capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "plan.csv"
    code, out, _ = run(capsys, "export", str(result_folder), "--out", str(target))
    assert code == 0 and out.startswith(f"wrote {target}: ")
    written = target.read_text(encoding="utf-8")
    assert [p.name for p in target.parent.iterdir()] == ["plan.csv"]  # no temporary file left beside it
    code, out, err = run(capsys, "export", str(result_folder), "--out", "-")
    assert code == 0 and err == ""
    assert out == written  # the CSV and nothing else, so it can be piped


def test_bad_export_and_import_exit_2_with_one_line(result_folder: Path, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("0F0,0X1\n", encoding="utf-8")
    # --force replaces a file whole: a pipe (or a device) or a link would become a regular file, so they are refused.
    fifo, link, target = tmp_path / "fifo", tmp_path / "link.html", tmp_path / "target.html"
    os.mkfifo(fifo)
    target.write_text("keep me", encoding="utf-8")
    link.symlink_to(target)
    dangling = tmp_path / "dangling.html"  # a link to nothing: said as such, not as "not a regular file"
    dangling.symlink_to(tmp_path / "nowhere.html")
    cases = [
        (["export", str(result_folder), "--schedule", "zb-v"], "has no schedule 'zb-v': the solve skipped it ("),
        (["export", str(result_folder), "--schedule", "1F1B"], "has no schedule '1F1B' (did you mean '1f1b'?)"),
        (["export", str(tmp_path / "nowhere")], "does not exist"),
        (["export", str(tmp_path)], "has no summary.json"),
        (["export", str(result_folder), "--format", "json"], "Invalid value for '--format'"),
        (["simulate", TINY, "--from-torch-csv", str(bad)], "column 2: '0X1' is not a compute action"),
        (["simulate", TINY, "--from-torch-csv", str(tmp_path / "none.csv")], "does not exist; check the path"),
        (["simulate", TINY, "--schedule", "1f1b", "--from-torch-csv", str(bad)], "not both"),
        (["simulate", TINY], "one of the two"),
        (["export", str(result_folder), "--out", str(tmp_path)], "is a folder; give the name of a file to write"),
        (["export", str(result_folder), "--out", ""], "Invalid value for '--out': is empty; give a file name"),
        (["export", str(result_folder), "--out", str(fifo), "--force"], "is not a regular file (a device or a pipe"),
        (["report", str(result_folder), "--out", str(link), "--force"], "is a symbolic link; give the file it points"),
        (["report", str(result_folder), "--out", str(dangling)],
         f"is a symbolic link to {str(tmp_path / 'nowhere.html')!r}, which does not exist; remove the link or give"),
        (["export", str(result_folder), "--out", str(bad / "plan.csv")], f"cannot write {str(bad / 'plan.csv')!r}"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == USER_ERROR, argv
        assert message in err.strip().splitlines()[-1] and "Traceback" not in err, (argv, err)
    assert fifo.is_fifo() and link.is_symlink() and target.read_text(encoding="utf-8") == "keep me"


def test_imported_schedule_metrics_match_the_named_schedule() -> None:
    problem = Problem.build(4, 8, forward=[1, 1.2, 1, 1.5], backward=1.1, backward_weight=0.7, comm=0.05,
                            weight_activation=0.3)
    for name in ("zb-h2", "1f1b"):
        schedule = generate(name, problem)
        imported = from_torch_csv(problem, to_torch_csv(problem, schedule), name=name)
        assert compute_metrics(simulate(problem, imported)) == compute_metrics(simulate(problem, schedule))
