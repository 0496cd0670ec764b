"""The command line, run in-process through ``pipeplan.cli.main`` (and once as the installed console script).

Every bad input goes through every command that reads a config (``simulate``, ``solve``, ``frontier``); result
folders are checked to be written atomically and never clobbered without ``--force``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_configs import BAD_CONFIGS, CONFIGS, GOOD_CONFIGS, UNSOLVABLE_CONFIGS

import pipeplan.cli
import pipeplan.report.html
from pipeplan import ConfigError, __version__, compute_metrics, formulas, generate, load_config, schedule_names
from pipeplan import simulate as replay
from pipeplan.cli import INTERNAL_ERROR, USER_ERROR, cli, format_progress, format_sweep, main, parse_budgets
from pipeplan.frontier import SweepProgress
from pipeplan.solver import Progress

ROOT = CONFIGS.parent.parent
SEED = str(ROOT / "models" / "seed-8x64.yaml")
JSON_KEYS = {"schedule", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory",
             "peak_memory_per_device", "busy_per_device", "flushes"}
OPTIONAL_JSON_KEYS = {"stage_span_per_device"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# Each command that reads a config, with the flags it needs besides CONFIG.
CONFIG_COMMANDS: dict[str, list[str]] = {
    "simulate": ["--schedule", "1f1b"],
    "solve": ["--time-limit", "2", "--quiet"],
    "frontier": ["--budgets", "2:4:1", "--time-limit", "2", "--quiet"],
}
# A tiny split-backward config that every solve proves optimal at once (the warm start meets the bound).
TINY = str(CONFIGS / "good-per-stage-split.yaml")


# Fixtures a command legitimately accepts: frontier replaces the config's budget with its own sweep.
ACCEPTED: set[tuple[str, str]] = {("frontier", "bad-budget-below-activation.yaml"),
                                  ("frontier", "bad-negative-budget.yaml")}


@pytest.mark.parametrize("command", list(CONFIG_COMMANDS))
@pytest.mark.parametrize(("fixture", "message"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_bad_config_exits_2_with_message_and_no_traceback(
    capsys: pytest.CaptureFixture[str], fixture: str, message: str, command: str
) -> None:
    if (command, fixture) in ACCEPTED:
        code, out, err = run(capsys, command, str(CONFIGS / fixture), *CONFIG_COMMANDS[command])
        assert code == 0 and "Traceback" not in err
        return
    code, out, err = run(capsys, command, str(CONFIGS / fixture), *CONFIG_COMMANDS[command])
    assert code == USER_ERROR == 2
    assert message in err
    assert err.startswith("pipeplan: error: ") and err.count("\n") == 1  # one short line
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(("fixture", "message"), UNSOLVABLE_CONFIGS, ids=[row[0] for row in UNSOLVABLE_CONFIGS])
def test_unsolvable_budget_names_the_smallest_budget_that_works(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fixture: str, message: str
) -> None:
    code, _, err = run(capsys, "simulate", str(CONFIGS / fixture), "--schedule", "gpipe")
    assert code == 0, err  # the config itself is valid
    out = tmp_path / "out"
    code, stdout, err = run(capsys, "solve", str(CONFIGS / fixture), "--quiet", "--out", str(out))
    assert code == USER_ERROR
    assert message in err and "Traceback" not in err
    assert stdout == "" and not out.exists()
    # The same budget in a sweep: alone it is an error naming the smallest budget; beside a workable one, a note.
    code, _, err = run(capsys, "frontier", str(CONFIGS / fixture), "--budgets", "0.75:0.75:1", "--quiet")
    assert code == USER_ERROR
    assert "the smallest that does is 1" in err
    code, stdout, err = run(capsys, "frontier", str(CONFIGS / fixture), "--budgets", "0.75:1:0.25", "--quiet",
                            "--time-limit", "2")
    assert code == 0, err
    # the sweep sets the budget, so its note says "the budget", not the config's key
    assert "INFEASIBLE" in stdout and message.replace("memory.budget", "the budget") in stdout.replace("\n", "")


@pytest.mark.parametrize("columns", [160, 80, 60])
def test_a_narrow_terminal_gets_the_frontier_in_tables_that_cut_no_cell(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """Five named schedules beside the optimizer's four columns need about 100 columns. At 160 they are one table;
    narrower, the optimizer's columns come first in a table of their own and the named schedules follow in as many
    tables as fit, so that every name, value and status is printed whole (no "…") within the terminal's width."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, stdout, err = run(capsys, "frontier", str(CONFIGS / "unsolvable-budget-below-chunks.yaml"),
                            "--budgets", "0.75:1:0.25", "--quiet", "--time-limit", "2")
    assert code == 0, err
    assert "…" not in stdout
    tables = stdout[:stdout.index("budget 0.75: ")]  # the note after them is one long line the terminal wraps
    assert max(len(line) for line in tables.splitlines()) <= columns
    assert ("(1 of " in tables) == (columns < 160)
    for word in ["gpipe", "zb-v", "dualpipe-v", "v-half", "v-min", "INFEASIBLE", "OPTIMAL", "(10.75)", "14.75"]:
        assert word in stdout, word


@pytest.mark.parametrize("columns", [80, 50])
def test_a_narrow_terminal_gets_the_solve_table_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    """The comparison table of ``solve`` fits 80 columns as one table; at 50 it comes in parts, each with the
    schedule column, and still no cell is cut short."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code, stdout, err = run(capsys, "solve", TINY, "--time-limit", "2", "--quiet")
    assert code == 0, err
    table = stdout[:stdout.index("optimizer: ")]  # the lines after it are long sentences the terminal wraps
    assert "…" not in table
    assert max(len(line) for line in table.splitlines()) <= columns
    assert ("(1 of " in table) == (columns < 80)
    for word in ["makespan", "bubble", "peak", "fits", "proof", "1f1b", "gpipe"]:
        assert word in table, word
    assert table.count("* optimal") == table.count("┏")  # the schedule column in every part


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", SEED, "--schedule", "zb-h9"], "unknown schedule 'zb-h9' (did you mean 'zb-h2'?); valid "
                                                    "names: "),
        (["simulate", SEED, "--schedule", "1F1B"], "unknown schedule '1F1B' (did you mean '1f1b'?); valid names: "),
        (["simulate", SEED], "Missing option '--schedule'"),
        (["simulate", SEED, "--schedule", "1f1b", "--format", "xml"], "Invalid value for '--format'"),
        (["simulate", "--schedule", "1f1b"], "Missing argument 'CONFIG'"),
        (["simulate", SEED, "--schedule", "1f1b", "--budget", "3"], "No such option"),
        (["simulate-all", SEED], "No such command 'simulate-all'"),
        (["solve", str(ROOT / "models")], "Invalid value for 'CONFIG': File '"),
        (["simulate", SEED, "--schedule", "optimal"], f"'optimal' is the optimizer's schedule, not a named one: "
                                                      f"`pipeplan solve {SEED}` finds it"),
        (["presets", "llama3.1-8b"], "'llama3.1-8b' is a preset, not a study file: `pipeplan presets` lists"),
        (["solve", SEED, "--workers", "1.5"], "Invalid value for '--workers': '1.5' is not a valid whole number"),
        (["solve", SEED, "--seed", "x"], "Invalid value for '--seed': 'x' is not a valid whole number"),
    ],
    ids=["unknown-schedule", "schedule-in-capitals", "missing-schedule", "bad-format", "missing-config", "unknown-flag",
         "unknown-command", "folder-as-config", "optimal-simulated", "preset-as-study", "fractional-workers",
         "text-seed"],
)
def test_bad_flags_exit_2_with_message(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert err.startswith("pipeplan: error: ") and err.count("\n") == 1  # one line, as every user error
    flags = [arg for arg in argv if arg.startswith("--")]
    if message.startswith("No such option"):
        assert flags[-1] in err  # the offending flag is named


def test_unknown_schedule_lists_every_valid_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", SEED, "--schedule", "pipedream")
    assert code == 2
    assert f"valid names: {', '.join(schedule_names())}" in err
    for name in schedule_names():
        assert name in err


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", str(CONFIGS / "bad-negative-cost.yaml"), "--schedule", "1f1b", "--debug")
    assert code == 2
    assert "Traceback (most recent call last)" in err
    assert "costs.comm must be >= 0" in err


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("an internal invariant broke"),
                                   KeyError("op"), ZeroDivisionError("division by zero")])
@pytest.mark.parametrize("debug", [False, True])
def test_a_bug_is_an_internal_error_with_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, error: Exception, debug: bool
) -> None:
    """An exception that is not a user error (not a PipeplanError or OSError), even a ValueError, is a bug:
    exit 1 with one line that says so; the traceback only with --debug."""

    def broken(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(pipeplan.cli, "compute_metrics", broken)
    code, _, err = run(capsys, "simulate", SEED, "--schedule", "1f1b", *(["--debug"] if debug else []))
    assert code == INTERNAL_ERROR == 1
    assert f"internal error ({type(error).__name__}" in err and "please report" in err
    assert ("Traceback (most recent call last)" in err) == debug


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_json_has_exactly_the_contract_keys(capsys: pytest.CaptureFixture[str], schedule: str) -> None:
    code, out, err = run(capsys, "simulate", SEED, "--schedule", schedule, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert JSON_KEYS <= set(data) <= JSON_KEYS | OPTIONAL_JSON_KEYS
    assert data["schedule"] == schedule
    assert isinstance(data["feasible"], bool)
    assert len(data["peak_memory_per_device"]) == len(data["busy_per_device"]) == 8


def test_json_seed_values_follow_the_closed_forms(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "simulate", SEED, "--schedule", "1f1b", "--format", "json")
    data = json.loads(out)
    assert data["makespan"] == formulas.one_f_one_b_makespan(8, 64, 1.0, 2.0)
    assert data["peak_memory"] == formulas.one_f_one_b_peak(8, 64)
    assert data["peak_memory_per_device"] == [formulas.one_f_one_b_peak(8, 64, r) for r in range(8)]
    assert data["busy_per_device"] == [64 * 3.0] * 8
    assert data["flushes"] == 1 and data["feasible"]
    _, out, _ = run(capsys, "simulate", SEED, "--schedule", "gpipe", "--format", "json")
    data = json.loads(out)
    assert data["flushes"] == formulas.gpipe_flushes(64, 8)
    assert data["makespan"] == formulas.gpipe_makespan(8, 64, 8, 1.0, 2.0)
    assert data["peak_memory"] == 8 and data["feasible"]


def test_json_floats_are_rounded_as_the_csvs_are(capsys: pytest.CaptureFixture[str]) -> None:
    """Sums of binary floats print at twelve significant digits (6.7, not 6.699999999999999), as in the CSVs."""
    split = str(ROOT / "models" / "split-8x32.yaml")
    code, out, err = run(capsys, "simulate", split, "--schedule", "zb-h1", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    problem = load_config(split).problem
    exact = compute_metrics(replay(problem, generate("zb-h1", problem)))
    assert exact.peak_memory_per_device[2] != 6.7  # the unrounded sum this test is about
    assert data["peak_memory_per_device"] == [float(f"{v:.12g}") for v in exact.peak_memory_per_device]
    assert data["peak_memory_per_device"][2] == 6.7
    assert data["utilization"] == pytest.approx(exact.utilization, rel=1e-11)


def test_table_names_the_config_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", str(CONFIGS / "good-per-stage-split.yaml"), "--schedule", "gpipe")
    assert code == 0
    assert "uneven-4x12: gpipe" in out
    assert "ms" in out and "GiB" in out
    for label in ("makespan", "utilization", "bubble", "peak memory", "flushes"):
        assert label in out


def test_infeasible_schedule_is_reported_not_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "tight.yaml"
    config.write_text("pipeline: {num_stages: 4, num_microbatches: 8}\nmemory: {budget: 2}\n", encoding="utf-8")
    code, out, _ = run(capsys, "simulate", str(config), "--schedule", "gpipe", "--format", "json")
    assert code == 0
    assert json.loads(out)["feasible"] is True  # GPipe splits into flushes that fit
    code, out, _ = run(capsys, "simulate", str(config), "--schedule", "1f1b", "--format", "json")
    assert code == 0
    assert json.loads(out)["peak_memory"] <= 2


@pytest.mark.parametrize("path", GOOD_CONFIGS, ids=[p.name for p in GOOD_CONFIGS])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_good_configs_exit_0(capsys: pytest.CaptureFixture[str], path: Path, fmt: str) -> None:
    for schedule in ("gpipe", "1f1b"):
        code, out, err = run(capsys, "simulate", str(path), "--schedule", schedule, "--format", fmt)
        assert code == 0, err
        assert schedule in out


@pytest.mark.parametrize("command", [None, *sorted(cli.commands)])
def test_help_of_every_command_shows_a_runnable_example(
    capsys: pytest.CaptureFixture[str], command: str | None
) -> None:
    code, out, _ = run(capsys, *([] if command is None else [command]), "--help")
    assert code == 0
    assert out.startswith("Usage: pipeplan")
    assert "Example" in out
    examples = [line.strip() for line in out.splitlines() if line.strip().startswith("pipeplan ")]
    assert examples, out
    if command is not None:
        assert any(line.startswith(f"pipeplan {command} ") for line in examples)
    for line in examples:  # every example's file exists (or is a folder that solve writes); 'presets' needs none
        for config in line.split()[2:3]:
            assert (ROOT / config).exists() or config.startswith("out/"), line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out == f"pipeplan, version {__version__}\n"


def test_console_script() -> None:
    """The installed ``pipeplan`` entry point, as a user on a fresh machine runs it."""
    script = shutil.which("pipeplan") or str(Path(sys.executable).with_name("pipeplan"))
    proc = subprocess.run([script, "simulate", "models/seed-8x64.yaml", "--schedule", "1f1b"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "seed-8x64: 1f1b" in proc.stdout
    assert "213.0" in proc.stdout
    assert "90.1 %" in proc.stdout
    bad = subprocess.run([script, "simulate", "models/nope.yaml", "--schedule", "1f1b"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_python_dash_m_runs_the_command() -> None:
    """``python -m pipeplan``, where the console script is not on PATH: the same command and exit statuses."""
    proc = subprocess.run([sys.executable, "-m", "pipeplan", "simulate", "models/seed-8x64.yaml", "--schedule", "1f1b"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "seed-8x64: 1f1b" in proc.stdout and "213.0" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "pipeplan", "simulate", "models/nope.yaml", "--schedule", "1f1b"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_solve_table_marks_the_chosen_schedule_and_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "solve", TINY, "--time-limit", "2")
    assert code == 0, err
    assert err == ""  # no progress display when stderr is not a terminal
    assert "times in ms, memory in GiB" in out
    chosen = [line for line in out.splitlines() if "│ * " in line]
    assert len(chosen) == 1
    assert "* chosen:" in out and "OPTIMAL" in out


def test_progress_lines() -> None:
    assert format_progress(1.25, 91.34, 87.2, "ms") == "solving:    1.2 s elapsed, best 91.34 ms, bound 87.2 ms"
    assert format_progress(0.0, None, None, "ms") == "solving:    0.0 s elapsed, best -, bound -"
    report = SweepProgress(2, 7, 12.0, Progress(3.0, 87.21, 87.0))
    assert format_sweep(report, "activations") == "budget 3/7 (12 activations)"


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ("8:16", "--budgets '8:16' is not A:B:STEP"),
        ("8:16:2:1", "is not A:B:STEP"),
        ("8:x:2", "has a part that is not a number"),
        ("16:8:2", "needs 0 < A <= B and STEP > 0"),
        ("0:8:2", "needs 0 < A <= B and STEP > 0"),
        ("4:8:0", "needs 0 < A <= B and STEP > 0"),
        ("4:8:-1", "needs 0 < A <= B and STEP > 0"),
        ("1:inf:1", "needs 0 < A <= B and STEP > 0"),
        ("1:1000:0.01", "gives 99901 budgets; at most 500"),
        ("4,x,8", "has 'x', not a number"),
        ("4,,8", "has an empty entry"),
        ("4,0,8", "has 0; every budget must be a finite number > 0"),
        ("4,-2", "has -2; every budget must be a finite number > 0"),
        ("4,nan", "has nan; every budget must be a finite number > 0"),
        ("inf,2", "has inf; every budget must be a finite number > 0"),
        ("x", "has 'x', not a number"),
    ],
)
def test_bad_budgets_exit_2_before_any_solve(capsys: pytest.CaptureFixture[str], budgets: str, message: str) -> None:
    code, out, err = run(capsys, "frontier", SEED, "--budgets", budgets)
    assert code == USER_ERROR
    hinted = "A:B:STEP, e.g. 4:16:2" in err or "at most" in err or "must be a finite number > 0" in err
    assert message in err and hinted
    assert out == "" and "Traceback" not in err


def test_budget_ranges_include_both_ends() -> None:
    assert parse_budgets("4:16:4") == [4.0, 8.0, 12.0, 16.0]
    assert parse_budgets("1:2:0.1")[-1] == 2.0 and len(parse_budgets("1:2:0.1")) == 11
    assert parse_budgets("3:4:2") == [3.0]
    # At any scale, as written: rounding to 9 decimals ran 1e-9 and 2e-9 for the first, and made the second's first
    # budget 0.
    assert parse_budgets("1.2e-9:2e-9:4e-10") == [1.2e-9, 1.6e-9, 2e-9]
    assert parse_budgets("4e-10:1.6e-9:4e-10") == [4e-10, 8e-10, 1.2e-9, 1.6e-9]
    assert parse_budgets("0.1:0.7:0.1") == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    assert parse_budgets("1000000000001:1000000000004:1") == [1000000000001.0, 1000000000002.0, 1000000000003.0,
                                                               1000000000004.0]  # 13 digits kept
    with pytest.raises(ConfigError, match="gives about 1.00e[+]600 budgets; at most 500"):
        parse_budgets("1:1e300:1e-300")


def test_budgets_may_be_listed_in_any_order_each_run_once() -> None:
    assert parse_budgets("8,3,4.5,8") == [3.0, 4.5, 8.0]
    assert parse_budgets(" 6 , 2") == [2.0, 6.0]
    with pytest.raises(ConfigError, match="has an empty entry"):
        parse_budgets("5,")
    assert parse_budgets("5") == [5.0] and parse_budgets(" 2.5 ") == [2.5]  # one budget (it needed 5:5:1)
    with pytest.raises(ConfigError, match=r"--budgets '1,2,3,[^']*\.\.\.[^']*,501' gives 501 budgets") as caught:
        parse_budgets(",".join(str(i) for i in range(1, 502)))
    assert len(str(caught.value)) < 200  # the flag's value is cut, not printed whole


def test_solve_out_writes_the_contract_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stdout, err = run(capsys, "solve", TINY, "--time-limit", "2", "--format", "json", "--out", str(out))
    assert code == 0, err
    assert err == f"wrote {out}/summary.json, metrics.csv, schedules/, report.html\n"  # stdout is the JSON alone
    summary = json.loads(stdout)
    assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == summary
    assert sorted(p.name for p in out.iterdir()) == ["metrics.csv", "report.html", "schedules", "summary.json"]
    assert sorted(p.stem for p in (out / "schedules").iterdir()) == sorted(r["schedule"] for r in summary["schedules"])
    assert summary["config"]["units"] == {"time": "ms", "memory": "GiB"}
    assert summary["config"]["solver"]["time_limit_s"] == 2  # the flag, not the config's value


def test_existing_out_is_not_clobbered_without_force(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "mine.txt").write_text("keep me", encoding="utf-8")
    for command in ("solve", "frontier"):
        argv = [command, TINY, "--out", str(out), "--time-limit", "2", "--quiet"]
        if command == "frontier":
            argv += ["--budgets", "2:3:1", "--no-png"]
        code, stdout, err = run(capsys, *argv)
        assert code == USER_ERROR
        assert f"output folder '{out}' already exists; pass --force" in err
        assert stdout == ""
        assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    # --force does not delete a folder pipeplan did not write, nor the current folder (even a result folder).
    code, _, err = run(capsys, "solve", TINY, "--out", str(out), "--time-limit", "2", "--quiet", "--force")
    assert code == USER_ERROR and "not a pipeplan result folder" in err
    code, _, err = run(capsys, "solve", TINY, "--out", "", "--time-limit", "2", "--quiet")
    assert code == USER_ERROR and "Invalid value for '--out': is empty; give a folder name" in err
    code, _, err = run(capsys, "solve", TINY, "--out", str(out / "mine.txt"), "--time-limit", "2", "--quiet")
    assert code == USER_ERROR and f"'{out / 'mine.txt'}' is a file, not a folder; give a new folder name" in err
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    # It replaces an earlier result folder, leaving no staging or trash folder beside it.
    (out / "mine.txt").unlink()
    (out / "summary.json").write_text("{}", encoding="utf-8")
    code, _, err = run(capsys, "solve", TINY, "--out", str(out), "--time-limit", "2", "--quiet", "--force")
    assert code == 0, err
    assert (out / "report.html").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    # A link to a result folder is refused before the solve (it was refused only when the result was moved in).
    (tmp_path / "link").symlink_to(out)
    code, _, err = run(capsys, "solve", TINY, "--out", str(tmp_path / "link"), "--time-limit", "2", "--quiet",
                       "--force")
    assert code == USER_ERROR and "is a symbolic link; give the folder it points to" in err
    (tmp_path / "link").unlink()
    (out / "schedules").mkdir(exist_ok=True)
    monkeypatch.chdir(out / "schedules")  # the folder holding the current one is never replaced either
    for target in (str(out), ".."):
        code, _, err = run(capsys, "solve", TINY, "--out", target, "--time-limit", "2", "--quiet", "--force")
        assert code == USER_ERROR and f"output folder '{target}' holds the current folder, which is never " \
            "replaced" in err
    assert (out / "report.html").exists()


@pytest.mark.parametrize(("error", "status"), [(OSError("No space left on device"), USER_ERROR),
                                              (KeyboardInterrupt(), 130)], ids=["disk-full", "interrupted"])
def test_a_failed_write_leaves_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException,
    status: int,
) -> None:
    """The report is the last file written into the staging folder: failing there must leave no trace."""
    calls = []

    def failing_render(folder: Path | str) -> str:
        calls.append(Path(folder))
        assert (Path(folder) / "summary.json").exists()  # the write was well under way
        raise error

    monkeypatch.setattr(pipeplan.report.html, "render_folder", failing_render)
    out = tmp_path / "run"
    code, _, err = run(capsys, "solve", TINY, "--out", str(out), "--time-limit", "2", "--quiet")
    assert code == status
    assert calls and not calls[0].exists()
    assert list(tmp_path.iterdir()) == []
    if status == USER_ERROR:
        assert "No space left on device" in err and "Traceback" not in err
    # An existing folder survives a failed --force run untouched.
    out.mkdir()
    (out / "summary.json").write_text("{}", encoding="utf-8")  # an earlier result folder
    code, _, _ = run(capsys, "solve", TINY, "--out", str(out), "--time-limit", "2", "--quiet", "--force")
    assert code == status
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert [p.name for p in out.iterdir()] == ["summary.json"]
    assert (out / "summary.json").read_text(encoding="utf-8") == "{}"


@pytest.fixture(scope="module")
def ten_million_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("huge") / "huge.yaml"
    path.write_bytes(b"pipeline: {num_stages: 4, num_microbatches: 8}\ncosts:\n  forward: ["
                     + b"1," * 10_000_000 + b"1]\n")
    return path


@pytest.mark.parametrize("command", list(CONFIG_COMMANDS))
def test_a_huge_config_is_refused_at_once(
    capsys: pytest.CaptureFixture[str], ten_million_values: Path, command: str
) -> None:
    """A 20 MB list took minutes to parse; a file over the size limit is refused before parsing."""
    started = time.monotonic()
    code, out, err = run(capsys, command, str(ten_million_values), *CONFIG_COMMANDS[command])
    assert time.monotonic() - started < 5
    assert code == USER_ERROR and out == ""
    assert "is larger than 1000000 bytes, the limit" in err and err.count("\n") == 1 and "Traceback" not in err


# Solver flags outside CP-SAT's own ranges: each is refused by the flag's own name before anything runs (CP-SAT
# would answer MODEL_INVALID for 100000 workers and fail to convert a seed above 2**31 - 1).
BAD_SOLVER_FLAGS = [
    (["--workers", "100000"], "Invalid value for '--workers': 100000 is not in the range 1<=x<=10000"),
    (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range 1<=x<=10000"),
    (["--seed", "2147483648"], "Invalid value for '--seed': 2147483648 is not in the range 0<=x<=2147483647"),
    (["--time-limit", "nan"], "Invalid value for '--time-limit': 'nan' is not a positive, finite number"),
    (["--time-limit", "inf"], "Invalid value for '--time-limit': 'inf' is not a positive, finite number"),
    (["--time-limit", "0"], "Invalid value for '--time-limit': '0' is not a positive, finite number"),
    (["--time-limit", "soon"], "Invalid value for '--time-limit': 'soon' is not a number of seconds"),
]


@pytest.mark.parametrize("command", ["solve", "frontier"])
@pytest.mark.parametrize(("flags", "message"), BAD_SOLVER_FLAGS, ids=[" ".join(f) for f, _ in BAD_SOLVER_FLAGS])
def test_solver_flags_outside_cp_sat_ranges_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], command: str, flags: list[str], message: str
) -> None:
    extra = ["--budgets", "2:4:1"] if command == "frontier" else []
    code, _, err = run(capsys, command, TINY, *extra, *flags)
    assert code == USER_ERROR
    assert message in err and "Traceback" not in err


def test_huge_budgets_in_a_frontier_are_unlimited_not_an_overflow(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "frontier", TINY, "--budgets", "1e308:1e308:1", "--time-limit", "2", "--quiet")
    assert code == 0, err
    assert "1e+308" in out and "Traceback" not in err


def test_costs_below_the_solver_resolution_simulate_but_solve_names_the_unit_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """1e-12 on one stage next to 2 on the others replays fine, but CP-SAT's integer ticks (down to about a
    millionth of the largest cost) cannot hold it."""
    config = str(CONFIGS / "unsolvable-below-resolution.yaml")
    code, _, err = run(capsys, "simulate", config, "--schedule", "1f1b")
    assert code == 0, err
    code, stdout, err = run(capsys, "solve", config, "--quiet", "--out", str(tmp_path / "out"))
    assert code == USER_ERROR and stdout == "" and not (tmp_path / "out").exists()
    assert "the costs of stage 1 (forward 1e-12, backward 1e-12) are below the solver's resolution" in err
    assert "raise them to at least 2e-05" in err


def test_a_solve_refused_below_the_resolution_says_only_why(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    """backward_weight 1e-07 beside costs of 1 first warned "costs or memory are not whole ticks ... CP-SAT works on
    a rounded relaxation", then refused the solve: the warning was about a solve that never ran."""
    path = tmp_path / "tiny-w.yaml"
    path.write_text("pipeline: {num_stages: 4, num_microbatches: 8}\n"
                    "costs: {forward: 1.0, backward: 1.0, backward_weight: 1e-07}\n", encoding="utf-8")
    code, _, err = run(capsys, "solve", str(path), "--time-limit", "1", "--workers", "1", "--quiet")
    assert code == USER_ERROR
    assert err.startswith("pipeplan: error: costs.backward_weight 1e-07 is below the solver's resolution"), err
    assert "warning" not in err and len(err.splitlines()) == 1


def test_optimizer_notes_say_where_the_answer_came_from_when_the_whole_model_search_found_nothing() -> None:
    """On large models the whole-model search often ends before it has a schedule (UNKNOWN) and the neighbourhood
    search after it improves the best warm start: the note must not call that answer a warm start."""
    import dataclasses

    from pipeplan import load_config, solve
    from pipeplan.cli import optimizer_notes
    from pipeplan.solver import stalled_search

    result = solve(load_config(SEED).problem, time_limit_s=5, num_workers=2)
    improved = dataclasses.replace(result, search="UNKNOWN", source="lns")
    assert [note for note in optimizer_notes(improved) if note.startswith("search:")] == [
        "search: the whole-model search found no schedule in time; the answer is the neighbourhood search's, which "
        "improved on the warm starts"]
    warm = dataclasses.replace(result, search="UNKNOWN", source="zb-h1")
    assert [note for note in optimizer_notes(warm) if note.startswith("search:")] == [
        "search: the whole-model search found no schedule in time; the answer is the best warm start (zb-h1)"]
    stopped = dataclasses.replace(result, search="UNKNOWN", source="zb-h1", interrupted=True)
    assert [note for note in optimizer_notes(stopped) if note.startswith("search:")] == [
        "search: the whole-model search was stopped before it found a schedule; the answer is the best warm start "
        "(zb-h1)"]
    assert not [note for note in optimizer_notes(result) if note.startswith("search:")]  # "not needed: ..."
    for source, found in [("lns", "the answer is the neighbourhood search's"), ("cp-sat", "the answer is CP-SAT's"),
                          ("zb-h1", "the answer is the best warm start (zb-h1)")]:
        stalled = dataclasses.replace(result, search=stalled_search("FEASIBLE", 14.25), source=source)
        assert [note for note in optimizer_notes(stalled) if note.startswith("search:")] == [
            "search: the whole-model search (FEASIBLE) ended after 14.2 s without a better order or bound for as "
            f"long as it had run; its time went to the bounds and the neighbourhood search; {found}"]


def test_report_and_export_name_the_command_that_wrote_a_folder(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A frontier or size folder given to report or export is refused for what it is, before its own page is in
    the way (report used to say "report.html already exists; pass --force", and with --force then refused it)."""
    for marker, command, page in (("frontier.csv", "frontier", "frontier.html"), ("sweep.csv", "size", "report.html")):
        folder = tmp_path / command
        folder.mkdir()
        (folder / marker).write_text("x\n", encoding="utf-8")
        (folder / "report.html").write_text("<html></html>\n", encoding="utf-8")
        for argv in (["report", str(folder)], ["report", str(folder), "--force"], ["export", str(folder)]):
            code, _, err = run(capsys, *argv)
            assert code == USER_ERROR
            assert f"was written by 'pipeplan {command} --out' (its page: {page}); give a folder written by " \
                   "'pipeplan solve --out'" in err, argv
        assert (folder / "report.html").read_text(encoding="utf-8") == "<html></html>\n"
    # A size folder's best plan is a config that solve takes: the message says how.
    (tmp_path / "size" / "best.yaml").write_text("pipeline: {num_stages: 2, num_microbatches: 4}\n", encoding="utf-8")
    code, _, err = run(capsys, "export", str(tmp_path / "size"))
    assert code == USER_ERROR and err.count("\n") == 1
    assert f"(its best plan as a config: 'pipeplan solve {tmp_path / 'size' / 'best.yaml'} --out DIR' writes one)" \
        in err


def test_import_pipeplan_loads_nothing_heavy() -> None:
    """Every name but the replay's loads on first use, so the command's entry point can hold Ctrl-C back before
    the heavy imports start (numpy and PyYAML, through the generators and the configs, took a tenth of a second
    in which a Ctrl-C ended in a traceback; a script that only simulates does not pay for OR-Tools); simulate
    stays the function when its submodule is imported."""
    code = ("import sys, pipeplan, pipeplan.entry, pipeplan.simulate; heavy = [m for m in ('ortools', 'pandas', "
            "'click', 'rich', 'numpy', 'yaml') if m in sys.modules]; assert not heavy, heavy; "
            "assert callable(pipeplan.simulate); assert pipeplan.generate.__module__ == 'pipeplan.schedules'; "
            "assert pipeplan.schedule_names()[0] == 'gpipe' and pipeplan.load_config.__module__ == 'pipeplan.config'; "
            "assert pipeplan.solve.__module__ == 'pipeplan.solver' and 'ortools' in sys.modules; "
            "names = dir(pipeplan); assert len(names) == len(set(names)), names")  # loaded names were listed twice
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_the_library_never_prints_its_warnings_unless_the_application_asks() -> None:
    """Costs that are not whole ticks make the solver log a warning; a script that configured no logging used to
    get it on stderr (Python's last-resort handler). With logging configured it still comes through."""
    solve = ("import pipeplan; pipeplan.solve(pipeplan.Problem.build(3, 4, forward=[1 / 7, 1.0, 1.0], budget=2), "
             "time_limit_s=1, num_workers=1)")
    quiet = subprocess.run([sys.executable, "-c", solve], check=True, cwd=ROOT, timeout=120, capture_output=True,
                           text=True)
    assert quiet.stderr == ""
    loud = subprocess.run([sys.executable, "-c", f"import logging; logging.basicConfig(); {solve}"], check=True,
                          cwd=ROOT, timeout=120, capture_output=True, text=True)
    assert "not whole ticks" in loud.stderr


def test_the_command_line_prints_each_warning_once_however_many_budgets_log_it(tmp_path: Path) -> None:
    """A frontier over costs that are not whole ticks: the solver warns about them at every budget, and the command
    printed the same line once per budget; now once. A fresh process, as the command is (under pytest the harness
    owns logging, and the command then leaves it alone); the solver's default workers, so that the budgets are
    solved in this process, one after another."""
    config = tmp_path / "sevenths.yaml"
    config.write_text("pipeline: {num_stages: 4, num_microbatches: 8, num_chunks: 2, placement: v}\n"
                      "costs: {forward: 0.1428571428571, backward: 1.0, backward_weight: 0.5, comm: 0.03}\n"
                      "memory: {weight_activation: 0.35, budget: 5}\nsolver: {time_limit_s: 0.5}\n")
    done = subprocess.run([sys.executable, "-c", "import sys; from pipeplan.entry import main; sys.exit(main())",
                           "frontier", str(config), "--budgets", "2:3:1", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("pipeplan: warning: costs or memory are not whole ticks") == 1, done.stderr


def test_warnings_logged_in_worker_processes_are_printed_once_too(tmp_path: Path) -> None:
    """The same frontier with its budgets solved in two worker processes (--jobs 2): each worker's warning was
    lost (nothing shows a worker's logging), so the command printed it no times; the workers now send their
    warnings back with their results, and the command prints each text once."""
    config = tmp_path / "sevenths.yaml"
    config.write_text("pipeline: {num_stages: 4, num_microbatches: 8, num_chunks: 2, placement: v}\n"
                      "costs: {forward: 0.1428571428571, backward: 1.0, backward_weight: 0.5, comm: 0.03}\n"
                      "memory: {weight_activation: 0.35, budget: 5}\nsolver: {time_limit_s: 0.5, num_workers: 1}\n")
    done = subprocess.run([sys.executable, "-c", "import sys; from pipeplan.entry import main; sys.exit(main())",
                           "frontier", str(config), "--budgets", "2:3:1", "--jobs", "2",
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("pipeplan: warning: costs or memory are not whole ticks") == 1, done.stderr


def test_each_warning_text_passes_once_and_debug_records_always() -> None:
    once = pipeplan.cli._OnceEach()

    def record(level: int, text: str) -> logging.LogRecord:
        return logging.LogRecord("pipeplan.solver", level, __file__, 1, text, None, None)

    assert [once.filter(record(logging.WARNING, text)) for text in ("a", "a", "b", "a")] == [True, False, True, False]
    assert once.filter(record(logging.DEBUG, "x")) and once.filter(record(logging.DEBUG, "x"))


def test_a_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback() -> None:
    """SIGINT raised while pipeplan.cli is being imported (the first second of every command): one line, 130.
    Without the entry point holding it back, the KeyboardInterrupt escaped from the import as a traceback (or
    was swallowed by the library whose import it hit, and the command ran on)."""
    code = (
        "import importlib.abc, os, signal, sys\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'pipeplan.cli':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from pipeplan.entry import main\n"
        "sys.exit(main(['--version']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 130
    assert done.stderr == "pipeplan: interrupted\n" and done.stdout == ""
    done = subprocess.run([sys.executable, "-c", code.replace("os.kill(os.getpid(), signal.SIGINT)", "pass")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and __version__ in done.stdout  # the same script without the Ctrl-C runs the command


def test_a_ctrl_c_once_the_command_has_finished_is_ignored() -> None:
    """After the command has run and said what it did, the interpreter's shutdown ignores Ctrl-C: it used to end
    the process by the signal, status 130 and not a word, after a complete run. main() itself, which a script
    may call, leaves Ctrl-C as it found it."""
    code = ("import atexit, signal, sys\nfrom pipeplan.entry import console, main\n"
            "assert main(['--version']) == 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "atexit.register(lambda: print('at exit, Ctrl-C ignored:', signal.getsignal(signal.SIGINT) == "
            "signal.SIG_IGN))\nsys.argv = ['pipeplan', '--version']\nconsole()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and __version__ in done.stdout, done.stderr
    assert done.stdout.endswith("at exit, Ctrl-C ignored: True\n")


def test_text_from_a_config_is_printed_as_written_not_read_as_markup(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    """A name or unit with square brackets used to be read as rich markup: '[/]' crashed every table (exit 1, an
    internal error), '[v2]' and '[bold]' vanished. The simulate table's budget row lists per-device budgets in
    device order, as the peaks beside it (it showed the distinct values sorted as text: '1.5, 2, 3, 4')."""
    config = tmp_path / "brackets.yaml"
    config.write_text('name: "run [v2] [/] [bold]x"\nunits: {time: "[/]", memory: "[red]GB"}\n'
                      "pipeline: {num_stages: 4, num_microbatches: 8}\n"
                      "costs: {forward: 1, backward: 1, backward_weight: 0.5}\n"
                      "memory: {activation: 1, budget: [4, 3, 2, 1.5]}\n", encoding="utf-8")
    for argv in (["solve", str(config), "--time-limit", "2", "--quiet"],
                 ["simulate", str(config), "--schedule", "1f1b"],
                 ["frontier", str(config), "--budgets", "3:4:1", "--time-limit", "2", "--quiet"]):
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        assert "run [v2] [/] [bold]x" in out and "[red]GB" in out, argv
    code, out, _ = run(capsys, "simulate", str(config), "--schedule", "1f1b")
    assert re.search(r"│ budget +│ +4 3 2 1\.5 │ \[red\]GB", out), out


def test_a_closed_stderr_does_not_stop_the_run(tmp_path: Path) -> None:
    """The progress lines go to stderr; when its reader is gone the sweep runs on and prints its table (rich
    used to end the process with status 1 and point stdout at /dev/null)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from pipeplan.entry import main; "
                               "sys.exit(main(sys.argv[1:]))", "frontier", TINY, "--budgets", "2:3:1", "--jobs", "1",
                               "--store", str(tmp_path / "s.sqlite"), "--progress", "--time-limit", "1"],
                              stdout=subprocess.PIPE, stderr=write, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert done.returncode == 0 and "lower bound" in done.stdout


@pytest.mark.parametrize("argv", [["presets"], ["solve", TINY, "--time-limit", "2", "--quiet"], ["--help"]],
                         ids=["rich-less", "table", "help"])
def test_output_closed_by_its_reader_exits_141_quietly(argv: list[str], tmp_path: Path) -> None:
    """`pipeplan solve ... | head -1`: rich (and click, for any broken pipe) ended the process with status 1, the
    status of a bug, and no message. Now 141, as a shell reports a process ended by SIGPIPE, with nothing on
    stderr; a result folder is written before the output, so it is complete."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        done = subprocess.run([sys.executable, "-c", "import sys; from pipeplan.entry import main; "
                               "sys.exit(main(sys.argv[1:]))", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_force_or_refresh_without_a_place_to_act_on_is_said(capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Both were accepted silently: a user who meant to pass --out or --store was not told it was missing.
    with caplog.at_level(logging.WARNING, logger="pipeplan.cli"):
        code, _, err = run(capsys, "solve", TINY, "--time-limit", "1", "--quiet", "--force")
        assert code == 0, err
        code, _, err = run(capsys, "frontier", TINY, "--budgets", "4:5:1", "--time-limit", "1", "--quiet",
                           "--refresh")
        assert code == 0, err
    assert [r.getMessage() for r in caplog.records if r.name == "pipeplan.cli"] == [
        "--force does nothing without --out DIR (it lets pipeplan replace that folder)",
        "--refresh does nothing without a store (--out DIR or --store FILE): every task runs anyway"]


def test_schedules_skipped_for_one_reason_share_a_line() -> None:
    """Eight "skipped" lines under a three-row table said the same of the four V schedules four times."""
    from pipeplan.cli import skipped_lines

    skipped = {"zb-h1": "zb-h1 needs a split backward (B and W); set costs.backward_weight > 0",
               "zb-v": "zb-v needs num_chunks 2 in V placement; set pipeline.num_chunks: 2",
               "v-min": "v-min needs num_chunks 2 in V placement; set pipeline.num_chunks: 2",
               "1f1b": "1f1b runs one chunk per device (got num_chunks 2)"}
    assert skipped_lines(skipped) == [
        "skipped zb-h1: needs a split backward (B and W); set costs.backward_weight > 0",
        "skipped zb-v, v-min: need num_chunks 2 in V placement; set pipeline.num_chunks: 2",
        "skipped 1f1b: runs one chunk per device (got num_chunks 2)"]


def test_result_csvs_write_floats_without_binary_noise(tmp_path: Path) -> None:
    """GPipe's makespan on split-8x32 is 123.26000000000005 as a float sum of its costs; metrics.csv and
    summary.json write it as 123.26."""
    out = tmp_path / "run"
    assert main(["solve", str(ROOT / "models" / "split-8x32.yaml"), "--time-limit", "1", "--workers", "1",
                 "--out", str(out), "--quiet"]) == 0
    gpipe = next(line for line in (out / "metrics.csv").read_text(encoding="utf-8").splitlines()
                 if line.startswith("gpipe,"))
    assert gpipe.startswith("gpipe,True,123.26,123.26,"), gpipe
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert next(r for r in summary["schedules"] if r["schedule"] == "gpipe")["makespan"] == 123.26


def test_log_lines_name_pipeplan_or_the_library_they_come_from() -> None:
    """Warnings read like errors (`pipeplan: warning: text`; they were `WARNING text`); another library's records
    under its own logger's name, not as pipeplan's."""
    lines = pipeplan.cli._Lines()

    def line(name: str, level: int) -> str:
        return lines.format(logging.LogRecord(name, level, __file__, 1, "text %d", (7,), None))

    assert line("pipeplan.solver", logging.WARNING) == "pipeplan: warning: text 7"
    assert line("pipeplan", logging.DEBUG) == "pipeplan: debug: text 7"
    assert line("ray.worker", logging.WARNING) == "ray.worker: warning: text 7"


@pytest.mark.skipif(sys.platform != "linux", reason="a file name that is not UTF-8 needs a POSIX file system")
def test_a_config_file_name_that_is_not_utf8_names_the_problem_with_a_replacement_character(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A config without `name` is named after its file. A file name with a byte that is not UTF-8 (Python holds
    it as a lone surrogate) made solve --out and frontier --out fail as an internal error (exit 1) when they wrote
    it; the byte now shows as U+FFFD, as a terminal shows it."""
    config = tmp_path / os.fsdecode(b"bad\xffname.yaml")
    config.write_text("pipeline: {num_stages: 2, num_microbatches: 4}\n"
                      "costs: {forward: 1.0, backward: 2.0, comm: 0.1}\nmemory: {activation: 1, budget: 2}\n",
                      encoding="utf-8")
    out = tmp_path / "run"
    assert main(["solve", str(config), "--time-limit", "1", "--workers", "1", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["config"]["name"] == "bad\ufffdname"
    assert main(["report", str(out), "--force"]) == 0
    assert main(["frontier", str(config), "--budgets", "2", "--time-limit", "1", "--quiet",
                 "--out", str(tmp_path / "sweep")]) == 0
    page = (tmp_path / "sweep" / "frontier.html").read_text(encoding="utf-8")
    # in the figure's title, as the character itself or JSON-escaped, as plotly writes it with or without orjson
    assert "bad\ufffdname" in page or "bad\\ufffdname" in page
    capsys.readouterr()
