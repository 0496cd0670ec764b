"""The scripts in scripts/ run from a clean state and print what the README shows (HTML only, into tmp)."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The seed benchmark's expected output, word for word as the README shows it.
SEED_LINES = [
    "GPipe 8 flushes, peak 8 slots, makespan 360.0, bubble 46.7 %, utilization 53.3 %",
    "1F1B 1 flush, peak 8 slots, makespan 213.0, bubble 9.9 %, utilization 90.1 %",
    "planner chose 1f1b",
    "utilization 53.3 % -> 90.1 %, bubble 46.7 % -> 9.9 %, wall-clock speedup 1.69x at equal memory budget",
]


def run_script(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_run_benchmark_prints_the_seed_result(tmp_path: Path) -> None:
    out = run_script("run_benchmark.py", "--out", str(tmp_path), "--no-png")
    assert out.splitlines()[:4] == SEED_LINES
    assert (tmp_path / "seed_before_after.html").exists()
    rows = list(csv.DictReader((tmp_path / "seed_benchmark.csv").open(encoding="utf-8")))
    assert [(r["role"], r["schedule"], float(r["makespan"])) for r in rows] == [
        ("simulated", "gpipe", 360.0), ("simulated", "1f1b", 213.0), ("planner choice", "1f1b", 213.0)]


def test_plot_gantt_shows_8_and_4_activations_on_the_first_stage(tmp_path: Path) -> None:
    out = run_script("plot_gantt.py", "--out", str(tmp_path), "--no-png")
    assert "GPipe: peak activations per device 8 8 8 8 (first stage 8)" in out
    assert "1F1B: peak activations per device 4 3 2 1 (first stage 4)" in out
    assert (tmp_path / "gantt_4x8.html").exists()


@pytest.mark.parametrize("only", ["pipeplan simulate models/seed-8x64.yaml --schedule 1f1b", "pipeplan presets"])
def test_readme_examples_print_what_the_readme_shows(only: str) -> None:
    """The README's pasted outputs are checked against a fresh run (here two fast examples that need no earlier
    example; the script runs them all). A change that alters what a command prints fails here until the README
    is updated."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_check.py"), "--only", only],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok " in result.stdout and ", 0 differ" in result.stdout


def test_bench_wall_runs_only_the_rows_asked_for(tmp_path: Path) -> None:
    out = run_script("bench_wall.py", "--time-limit", "1", "--rows", "4:8:v:2", "3:6:1:1", "--out", str(tmp_path))
    rows = list(csv.DictReader((tmp_path / "bench_wall.csv").open(encoding="utf-8")))
    assert [(r["P"], r["N"], r["layout"], r["budget"], r["time_limit_s"]) for r in rows] == [
        ("4", "8", "2 v", "2", "1"), ("3", "6", "1 chunk", "1", "1")]
    # The optimizer never returns worse than the best named schedule, and its bound is below its value.
    for r in rows:
        assert float(r["lower_bound"]) <= float(r["optimizer_value"]) <= float(r["best_named_value"])
    assert "never behind a named schedule: met (2 rows)" in out


@pytest.mark.parametrize("spec", ["8:16:x:3", "8:16:v", "0:16:v:3", "8:16:v:three", "8:99999:v:3"])
def test_bench_wall_rejects_a_malformed_or_unbuildable_row(spec: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # In this process (argparse exits as the script would), so that five specs cost no interpreter starts.
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    bench_wall = importlib.import_module("bench_wall")
    with pytest.raises(SystemExit) as exit_info:
        bench_wall.main(["--rows", spec, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"row '{spec}'" in capsys.readouterr().err
    assert not (tmp_path / "bench_wall.csv").exists()
