"""scripts/measure_torch.py: runs 1F1B and the optimizer's schedule in torch with timed ops and writes the
measured-against-simulated figures; without torch it exits 2 and says what to install."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_script(env_path: list[Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in [*env_path, ROOT])}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_torch.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_measured_against_simulated(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = run_script([], "--ranks", "2", "--microbatches", "4", "--unit-ms", "5", "--repeats", "1",
                      "--time-limit", "1", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "measure_torch.csv").open(encoding="utf-8")))
    assert [r["schedule"] for r in rows] == ["1f1b", "optimal"]
    for row in rows:
        # Each op sleeps out its cost, so a step never beats the simulator; on a busy machine it may run long.
        assert float(row["measured_step_ms"]) >= float(row["simulated_step_ms"]) * 0.99
    ops = list(csv.DictReader((tmp_path / "measure_torch_ops.csv").open(encoding="utf-8")))
    assert len(ops) == 2 * 2 * 4 * 3
    profile = list(csv.DictReader((tmp_path / "measure_torch_profile.csv").open(encoding="utf-8")))
    assert [int(r["stage"]) for r in profile] == [0, 1]
    assert float(profile[1]["forward"]) >= 1.4 * 0.99
    assert "step error" in proc.stdout


def test_without_torch_exits_2_saying_what_to_install(tmp_path: Path) -> None:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\", name='torch')\n")
    proc = run_script([tmp_path], "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "pip install 'pipeplan[torch]'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--ranks", "0"], "argument --ranks: must be finite and above 0, got '0'"),
    (["--repeats", "0"], "argument --repeats: must be finite and above 0, got '0'"),
    (["--unit-ms", "-5"], "argument --unit-ms: must be finite and above 0, got '-5'"),
    (["--time-limit", "inf"], "argument --time-limit: must be finite and above 0, got 'inf'"),
    (["--microbatches", "x"], "argument --microbatches: expected a whole number, got 'x'"),
    (["--out", "/proc/pipeplan/out"], "cannot create output folder '/proc/pipeplan/out'"),
])
def test_bad_arguments_exit_2_before_any_work(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run_script([], *args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
