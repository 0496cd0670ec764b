"""The command line, run in-process through ``pipeplan.cli.main`` (and once as the installed console script)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bad_configs import BAD_CONFIGS, CONFIGS, GOOD_CONFIGS

from pipeplan import formulas, schedule_names
from pipeplan.cli import USER_ERROR, main

ROOT = CONFIGS.parent.parent
SEED = str(ROOT / "models" / "seed-8x64.yaml")
JSON_KEYS = {"schedule", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory",
             "peak_memory_per_device", "busy_per_device", "flushes"}
OPTIONAL_JSON_KEYS = {"stage_span_per_device"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(("fixture", "message"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_bad_config_exits_2_with_message_and_no_traceback(
    capsys: pytest.CaptureFixture[str], fixture: str, message: str
) -> None:
    code, out, err = run(capsys, "simulate", str(CONFIGS / fixture), "--schedule", "1f1b")
    assert code == USER_ERROR == 2
    assert message in err
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", SEED, "--schedule", "zb-h9"], "unknown schedule 'zb-h9'; valid names: "),
        (["simulate", SEED], "Missing option '--schedule'"),
        (["simulate", SEED, "--schedule", "1f1b", "--format", "xml"], "Invalid value for '--format'"),
        (["simulate", "--schedule", "1f1b"], "Missing argument 'CONFIG'"),
        (["simulate", SEED, "--schedule", "1f1b", "--budget", "3"], "No such option"),
        (["simulate-all", SEED], "No such command 'simulate-all'"),
    ],
    ids=["unknown-schedule", "missing-schedule", "bad-format", "missing-config", "unknown-flag", "unknown-command"],
)
def test_bad_flags_exit_2_with_message(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
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


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["--version"]])
def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "pipeplan" in out or "Usage" in out


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
