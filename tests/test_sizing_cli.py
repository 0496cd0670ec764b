"""``pipeplan size`` and ``pipeplan presets``, run in-process through ``pipeplan.cli.main``: a small study end to
end (table, gain line, result folder, best.yaml that ``pipeplan solve`` accepts) and every bad study, each
matched to its message, with exit status 2, no traceback and nothing written."""

from __future__ import annotations

import importlib
import json
import logging
import math
import re
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from test_sweeps import _StoppedAtOnce

from pipeplan import ConfigError, load_config
from pipeplan.cli import USER_ERROR, main
from pipeplan.sizing import study as study_module
from pipeplan.sizing.study import load_study
from pipeplan.store import Store, stored_kinds

ROOT = Path(__file__).resolve().parent.parent
# The module, not the function pipeplan.sizing exports under the same name.
estimate_module = importlib.import_module("pipeplan.sizing.estimate")

TINY_MODEL = {"num_layers": 8, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
              "num_kv_heads": 4, "vocab_size": 1000, "gated_mlp": True}
GOOD: dict[str, Any] = {
    "name": "tiny on H100",
    "model": TINY_MODEL,
    "hardware": "h100-80gb",
    "num_gpus": [8, 16],
    "global_batch_size": 16,
    "seq_len": 128,
    "search": {"tensor_parallel": [1, 2], "pipeline_parallel": [2, 4], "num_chunks": [1, 2],
               "schedules": ["1f1b", "zb-h1", "zb-v", "optimal"]},
    "optimizer": {"time_limit_s": 1, "top": 1, "num_workers": 1},
}


def write_study(tmp_path: Path, data: Any, name: str = "study.yaml") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_size_prints_the_top_table_and_the_gain_and_writes_the_folder(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    study = write_study(tmp_path, {**GOOD, "optimizer": {**GOOD["optimizer"], "num_workers": 3, "random_seed": 7}})
    out = tmp_path / "sized"
    code, stdout, stderr = run(capsys, "size", study, "--out", str(out), "--top", "3", "--quiet")
    assert code == 0, stderr
    assert "tiny on H100: top 3 configurations that fit" in stdout
    assert "optimal schedule on " in stdout and "against 1F1B's" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["best.yaml", "report.html", "store.sqlite", "sweep.csv"]
    frame = pd.read_csv(out / "sweep.csv")
    assert {"tokens_per_s", "mfu", "memory_gib", "skipped", "status", "gap"} <= set(frame.columns)
    page = (out / "report.html").read_text(encoding="utf-8")
    for div in ("throughput", "memory-breakdown", "gantt-best", "memory-best"):
        assert f'id="{div}"' in page
    assert "<script src=" not in page  # plotly.js is embedded: the page works offline
    # The best plan's memory chart in GiB, as the tables and best.yaml (it was in bytes, with SI ticks: "40G").
    memory_chart = page[page.index('id="memory-best"'):]
    assert '"title":{"text":"GiB"}' in memory_chart and '"text":"bytes"' not in memory_chart
    config = load_config(out / "best.yaml")
    assert config.units.time == "s" and config.problem.budget is not None
    # The split backward's 1F1B replays faster than the fused one size counts: the file says so.
    assert config.problem.split_backward
    text = (out / "best.yaml").read_text(encoding="utf-8")
    assert "can drain faster than the fused backward pipeplan size counts" in text
    # Memory in GiB (tables of bytes read 6.56519e+10): the budget is what an 80 GiB GPU leaves for activations.
    assert config.units.memory == "GiB" and 0 < config.problem.budget[0] < 80
    # The study's optimizer settings (best.yaml had the machine's worker count and seed 0).
    assert (config.solver.num_workers, config.solver.random_seed, config.solver.time_limit_s) == (3, 7, 1)
    assert "skipped (see sweep.csv)" in stdout
    code, stdout, stderr = run(capsys, "solve", str(out / "best.yaml"), "--time-limit", "1", "--quiet")
    assert code == 0, stderr


def test_best_yaml_carries_the_time_limit_the_run_used(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--time-limit overrides the study's optimizer.time_limit_s for the run, and so in best.yaml (it had the
    study's, or the default 10, whatever limit the optimizer ran with)."""
    small = {**GOOD, "num_gpus": 8, "search": {**GOOD["search"], "tensor_parallel": 1, "pipeline_parallel": 2,
                                               "num_chunks": 1, "schedules": ["1f1b"]}}
    for name, data in (("given", small), ("default", {**small, "optimizer": {"num_workers": 1}})):
        out = tmp_path / name
        code, _, stderr = run(capsys, "size", write_study(tmp_path, data, f"{name}.yaml"), "--out", str(out),
                              "--time-limit", "0.5", "--quiet")
        assert code == 0, stderr
        assert load_config(out / "best.yaml").solver.time_limit_s == 0.5


def test_size_json_is_every_row_and_the_best_plan_on_stdout_alone(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    """--format json: sweep.csv's rows (null where a cell is empty), the best plan and the 1F1B and optimizer runs
    on its sizes, as numbers (no problem or timeline objects); the other lines go to stderr (there was no
    machine-readable output without --out: a new user's trial)."""
    out = tmp_path / "sized"
    code, stdout, stderr = run(capsys, "size", write_study(tmp_path, GOOD), "--out", str(out), "--format", "json",
                               "--quiet")
    assert code == 0, stderr
    data = json.loads(stdout)
    assert (data["name"], data["finished"]) == ("tiny on H100", True)
    frame = pd.read_csv(out / "sweep.csv")
    assert len(data["rows"]) == len(frame) and set(data["rows"][0]) == set(frame.columns)
    assert [math.nan if row["tokens_per_s"] is None else row["tokens_per_s"] for row in data["rows"]] == \
        pytest.approx(frame["tokens_per_s"].tolist(), nan_ok=True)
    assert any(row["skipped"] is not None for row in data["rows"]) and all(
        row["tokens_per_s"] is None for row in data["rows"] if row["skipped"] is not None)
    best = data["best"]
    assert best["fits"] and best["tokens_per_s"] == max(row["tokens_per_s"] for row in data["rows"] if row["fits"])
    assert {"problem", "timeline", "sized"}.isdisjoint(best) and data["optimal"]["status"] in ("OPTIMAL", "FEASIBLE")
    assert data["baseline"]["schedule"] == "1f1b"
    assert "rows: " in stderr and f"wrote {out}/sweep.csv" in stderr


def test_size_refuses_an_existing_folder_without_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    study = write_study(tmp_path, {**GOOD, "search": {**GOOD["search"], "schedules": ["1f1b", "optimal"]}})
    out = tmp_path / "sized"
    assert run(capsys, "size", study, "--out", str(out), "--quiet")[0] == 0
    code, _, stderr = run(capsys, "size", study, "--out", str(out), "--quiet")
    assert code == USER_ERROR and "already exists; pass --force" in stderr
    assert run(capsys, "size", study, "--out", str(out), "--quiet", "--force")[0] == 0
    # Without --out there is no sweep.csv to point to; a time limit that is not a number of seconds is the flag's.
    code, stdout, _ = run(capsys, "size", study, "--quiet")
    assert code == 0 and "skipped (--out DIR writes every row, and why, to DIR/sweep.csv)" in stdout
    code, _, stderr = run(capsys, "size", study, "--time-limit", "nan")
    assert code == USER_ERROR and "Invalid value for '--time-limit': 'nan' is not a positive, finite number" in stderr


# Bad studies: (fixture name, study content, a substring of the message).
BAD_STUDIES: list[tuple[str, Any, str]] = [
    ("unknown-model-preset", {**GOOD, "model": "llama-9000"},
     "unknown model preset 'llama-9000'; valid presets: gpt3-175b, llama2-7b, llama2-13b, llama2-70b"),
    ("unknown-hardware-preset", {**GOOD, "hardware": "v100"},
     "unknown hardware preset 'v100'; valid presets: a100-40gb, a100-80gb, h100-80gb, h200, b200, mi300x"),
    ("missing-shape-field", {**GOOD, "model": {k: v for k, v in TINY_MODEL.items() if k != "vocab_size"}},
     "model.vocab_size is missing"),
    ("negative-shape-field", {**GOOD, "model": {**TINY_MODEL, "num_layers": -8}},
     "model.num_layers must be > 0, got -8"),
    ("negative-hardware-field", {**GOOD, "hardware": {"preset": "h100-80gb", "memory_gib": -80}},
     "hardware.memory_gib must be > 0, got -80"),
    ("missing-seq-len", {k: v for k, v in GOOD.items() if k != "seq_len"}, "seq_len is missing"),
    ("unknown-top-key", {**GOOD, "gpus": 8}, "unknown top-level key 'gpus'; valid keys: name, model, hardware"),
    ("unknown-search-key", {**GOOD, "search": {"tp": [1]}}, "unknown key search.tp; valid keys in search"),
    ("pipeline-config", {"pipeline": {"num_stages": 4, "num_microbatches": 8}},
     "unknown top-level key 'pipeline'; valid keys: name, model, hardware, num_gpus, global_batch_size, seq_len, "
     "search, options, optimizer, processes (this looks like a pipeline config: run it with 'pipeplan solve FILE', "
     "'simulate' or 'frontier')"),
    ("bad-gpu-count", {**GOOD, "num_gpus": [8, 0]}, "num_gpus must be a whole number >= 1 or a list of them, got 0"),
    ("unknown-schedule", {**GOOD, "search": {**GOOD["search"], "schedules": ["1f1b", "zb-x"]}},
     "unknown schedule 'zb-x' (did you mean 'zb-v'?); valid names: gpipe, 1f1b"),
    ("bad-recompute", {**GOOD, "search": {**GOOD["search"], "recompute": ["most"]}},
     "search.recompute must be one of none, selective, full or a list of them, got 'most'"),
    ("bad-option", {**GOOD, "options": {"sequence_parallel": "yes"}},
     "options.sequence_parallel must be true or false, got 'yes'"),
    ("no-valid-combination", {**GOOD, "num_gpus": 6, "search": {"tensor_parallel": [3, 16], "pipeline_parallel": [2]}},
     "no configuration of the search space can run (2 candidates). Per candidate: 6 GPUs tp3 pp2 mbs1 v1 "
     "selective: 8 attention heads / 4 KV heads not divisible by tensor parallel 3; 6 GPUs tp16 pp2 mbs1 v1 "
     "selective: 6 GPUs not divisible by tensor parallel 16 x pipeline parallel 2"),
    ("nothing-fits", {**GOOD, "model": "llama3.1-405b", "num_gpus": 8, "search": {"tensor_parallel": 8,
                                                                                "pipeline_parallel": 1}},
     "8 GPUs tp8 pp1 dp1 mbs1 v1 selective: out of memory on pipeline device 0"),
    ("empty", "", "the study file is empty"),
    ("yaml-syntax", "model: [llama\n", "YAML syntax error at line"),
    ("escape-in-name", 'name: "x\\e[2J"\n', "line 1: the text 'x\\x1b[2J' holds the control character U+001B"),
    ("raw-control", "name: a\x01b\n", "line 1: the file holds the character U+0001, which YAML does not allow"),
    ("top-level-list", "- 1\n- 2\n", "a study file must be a mapping"),
]


@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out-no-store"])
def test_a_ctrl_c_after_the_last_task_exits_130_and_never_claims_a_folder(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_out: bool) -> None:
    """A Ctrl-C that lands once every task has finished. With --out it keeps the folder from being written, as a
    Ctrl-C during the sweep does (the finished rows shown, status 130, DIR holding only the store; it used to
    print "wrote" for files it had not written and exit 0), and the same command then writes the folder from the
    store. With no folder and no store the results are complete: all of them are shown, then status 130."""
    study = write_study(tmp_path, {**GOOD, "search": {**GOOD["search"], "schedules": ["1f1b"]}})
    out = tmp_path / "sized"
    real = study_module.run_study

    def then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # taken by the command's own handler, as a first Ctrl-C
        return result

    monkeypatch.setattr(study_module, "run_study", then_ctrl_c)
    where = ["--out", str(out)] if with_out else []
    code, stdout, stderr = run(capsys, "size", study, *where, "--quiet")
    assert code == 130, stderr
    assert "wrote" not in stdout and "Traceback" not in stderr
    if not with_out:
        assert "configurations that fit" in stdout and "against 1F1B's" in stdout
        assert "interrupted after every task had finished: the results above are complete" in stderr
        assert [p.name for p in tmp_path.iterdir()] == ["study.yaml"]
        return
    finished = re.search(r"interrupted: (\d+) of (\d+) tasks finished \(kept in ", stderr)
    assert finished is not None and finished[1] == finished[2], stderr
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    monkeypatch.undo()
    code, stdout, stderr = run(capsys, "size", study, *where, "--quiet")
    assert code == 0, stderr
    assert f"{finished[2]} of {finished[2]} results came from the store" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["best.yaml", "report.html", "store.sqlite", "sweep.csv"]


def ctrl_c_in_the_first_solve(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Make the first optimizer run of this process send itself SIGINT (the command's own handler takes it, as a
    first Ctrl-C) at the solve's first progress report, which comes before its search starts; the list it returns
    collects each solve's result."""
    real = estimate_module.solve
    results: list[Any] = []

    def solve_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        def on_report(_progress: Any) -> None:
            if not results and not sent:
                sent.append(True)
                signal.raise_signal(signal.SIGINT)

        results.append(real(*args, **kwargs, progress=on_report))
        return results[-1]

    sent: list[bool] = []
    monkeypatch.setattr(estimate_module, "solve", solve_then_ctrl_c)
    return results


def test_a_ctrl_c_during_an_optimizer_task_in_process_stops_it_and_leaves_it_out_of_the_store(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one job the sweep's optimizer task runs in this process: a Ctrl-C during its solve ends that search at
    once (the sweep used to wait out the solve's time limit, then store its answer as finished). Its answer is
    not the time limit's, so it is neither stored nor shown, and the same command runs it again in full."""
    search = {**GOOD["search"], "schedules": ["1f1b", "optimal"]}
    study = write_study(tmp_path, {**GOOD, "search": search, "optimizer": {**GOOD["optimizer"], "time_limit_s": 30}})
    out = tmp_path / "sized"
    results = ctrl_c_in_the_first_solve(monkeypatch)
    code, stdout, stderr = run(capsys, "size", study, "--out", str(out), "--jobs", "1", "--quiet")
    assert code == 130, stderr
    assert len(results) == 1 and results[0].interrupted  # the search saw the stop; no other solve ran
    finished = re.search(r"interrupted: (\d+) of (\d+) tasks finished \(kept in ", stderr)
    assert finished is not None, stderr
    done, total = int(finished[1]), int(finished[2])
    assert done == total - 1 and f"{done} ran, 1 did not (stopped)" in stdout  # every 1F1B task, not the optimizer
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    monkeypatch.undo()
    code, stdout, stderr = run(capsys, "size", study, "--out", str(out), "--jobs", "1", "--quiet")
    assert code == 0, stderr
    assert f"{done} of {total} results came from the store" in stdout
    frame = pd.read_csv(out / "sweep.csv")
    assert frame.loc[frame["schedule"] == "optimal", "skipped"].isna().any()  # the optimizer's row ran this time


def test_a_ctrl_c_in_a_refresh_sweep_says_to_resume_without_refresh(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--refresh ignores the store, so the same command again would start over: the hint after a Ctrl-C says to
    run it without --refresh, which reuses every task the refresh run finished."""
    search = {**GOOD["search"], "schedules": ["1f1b", "optimal"]}
    study = write_study(tmp_path, {**GOOD, "search": search, "optimizer": {**GOOD["optimizer"], "time_limit_s": 30}})
    store = tmp_path / "s.sqlite"
    ctrl_c_in_the_first_solve(monkeypatch)
    code, stdout, stderr = run(capsys, "size", study, "--store", str(store), "--refresh", "--jobs", "1", "--quiet")
    assert code == 130, stderr
    finished = re.search(r"interrupted: (\d+) of (\d+) tasks finished \(kept in (.*)\); run the same command again "
                         r"without --refresh to resume", stderr)
    assert finished is not None and finished[3] == str(store), stderr
    monkeypatch.undo()
    code, stdout, stderr = run(capsys, "size", study, "--store", str(store), "--jobs", "1", "--quiet")
    assert code == 0, stderr
    assert f"{finished[1]} of {finished[2]} results came from the store" in stdout


@pytest.mark.parametrize("with_out", [True, False], ids=["out", "no-out-no-store"])
def test_a_ctrl_c_while_the_optimizer_runs_on_the_best_configuration_stops_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_out: bool) -> None:
    """After the sweep the optimizer runs on the best configuration (for the gain over 1F1B). A Ctrl-C then ends
    that search at once instead of waiting out its time limit; no gain is claimed, the finished rows are shown,
    the exit status is 130, and with --out only the store is left, from which the same command finishes."""
    study = write_study(tmp_path, {**GOOD, "search": {**GOOD["search"], "schedules": ["1f1b"]},
                                   "optimizer": {**GOOD["optimizer"], "time_limit_s": 30}})
    out = tmp_path / "sized"
    results = ctrl_c_in_the_first_solve(monkeypatch)
    where = ["--out", str(out)] if with_out else []
    code, stdout, stderr = run(capsys, "size", study, *where, "--quiet")
    assert code == 130, stderr
    assert len(results) == 1 and results[0].interrupted
    assert "against 1F1B's" not in stdout and "of the configurations finished" in stdout
    finished = re.search(r"interrupted while the optimizer ran on the best configuration: (\d+) of (\d+) tasks "
                         r"finished(.*)", stderr)
    assert finished is not None and finished[1] == finished[2], stderr
    if not with_out:
        assert finished[3].startswith("; none was stored")
        assert [p.name for p in tmp_path.iterdir()] == ["study.yaml"]
        return
    assert finished[3].startswith(" (kept in ") and [p.name for p in out.iterdir()] == ["store.sqlite"]
    monkeypatch.undo()
    code, stdout, stderr = run(capsys, "size", study, *where, "--quiet")
    assert code == 0, stderr
    assert "against 1F1B's" in stdout and f"{finished[2]} of {finished[2]} results came from the store" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["best.yaml", "report.html", "store.sqlite", "sweep.csv"]


@pytest.mark.parametrize(("fixture", "content", "message"), BAD_STUDIES, ids=[row[0] for row in BAD_STUDIES])
def test_bad_study_exits_2_with_message_and_writes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           fixture: str, content: Any, message: str) -> None:
    study = write_study(tmp_path, content, f"{fixture}.yaml")
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "size", study, "--out", str(out), "--quiet")
    assert code == USER_ERROR
    assert message in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [f"{fixture}.yaml"]


def test_missing_study_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, stderr = run(capsys, "size", str(tmp_path / "nope.yaml"))
    assert code == USER_ERROR and "study file" in stderr and "does not exist" in stderr


def test_presets_lists_every_model_and_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = run(capsys, "presets")
    assert code == 0
    for name in ("gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b",
                 "llama3.1-405b", "nemotron-4-15b", "nemotron-4-340b", "a100-40gb", "a100-80gb", "h100-80gb",
                 "h200", "b200", "mi300x"):
        assert f"  {name} " in stdout
    assert "405.8B params" in stdout and "989 TFLOP/s bf16" in stdout


def test_presets_with_a_study_prints_its_resolved_records(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    study = write_study(tmp_path, {**GOOD, "hardware": {"preset": "h100-80gb", "matmul_efficiency": 0.6}})
    code, stdout, _ = run(capsys, "presets", study)
    assert code == 0
    assert "  num_kv_heads: 4" in stdout and "  peak_tflops: 989\n" in stdout
    # What the study changed in a preset says so (it printed the preset's name and source as if nothing had).
    assert "  matmul_efficiency: 0.6  # the study's; the preset has 0.78\n" in stdout
    assert "source: NVIDIA H100" in stdout
    assert "  # the preset's numbers; the study changed matmul_efficiency\n" in stdout
    assert "the study" not in stdout.split("hardware:")[0]  # the model is a mapping of its own, not a preset
    # Renamed, even to another preset's name: compared with the preset it came from.
    study = write_study(tmp_path, {**GOOD, "hardware": {"preset": "a100-80gb", "name": "h100-80gb"}})
    code, stdout, _ = run(capsys, "presets", study)
    assert code == 0 and "  name: h100-80gb  # the study's, from the preset a100-80gb\n" in stdout
    assert "  peak_tflops: 312\n" in stdout and "the preset has" not in stdout
    # The same override in a hardware file the study names (a new user's trial: it printed unmarked).
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("preset: h100-80gb\nmemory_gib: 40\n", encoding="utf-8")
    study = write_study(tmp_path, {**GOOD, "hardware": str(gpu)})
    code, stdout, _ = run(capsys, "presets", study)
    assert code == 0 and "  memory_gib: 40  # the study's; the preset has 80\n" in stdout
    assert "  # the preset's numbers; the study changed memory_gib\n" in stdout


def test_the_shipped_study_example_loads() -> None:
    study = load_study(ROOT / "models" / "size-llama3.1-70b.yaml")
    assert study.name == "llama3.1-70b on H100"
    assert study.sweep_kwargs["num_gpus"] == [64, 128, 256, 512]


@pytest.mark.parametrize(("change", "message"), [
    ({"hardware": {"preset": "h100-80gb", "mem": 40}}, "unknown hardware field 'mem'"),
    ({"search": {"schedules": ["1f1b", "zzz"]}}, "unknown schedule 'zzz'"),
    ({"model": "gone.yaml"}, "model file"),
    ({"search": {"recompute": "partial"}}, "search.recompute must be one of none, selective, full or a list of them, "
                                           "got 'partial'"),
], ids=["hardware-field", "schedule", "model-file", "recompute"])
def test_load_study_checks_the_names_it_will_use(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    """A typo in the hardware, a schedule, a model file or a recompute mode used to load and fail only when the
    study ran (the recompute mode then named without its "search." prefix)."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_study(write_study(tmp_path, {**GOOD, **change}))


def test_a_stored_row_without_its_fields_runs_again(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A stored record that reads as JSON but lacks its fields (edited to {}) was taken as it was: the
    configurations it stood for looked as if nothing fitted. It now runs again, named in a warning."""
    study = write_study(tmp_path, {**GOOD, "num_gpus": [8], "search": {**GOOD["search"], "tensor_parallel": [1],
                                                                       "schedules": ["1f1b"]}})
    store = tmp_path / "s.sqlite"
    code, first, _ = run(capsys, "size", study, "--store", str(store), "--quiet")
    assert code == 0
    db = sqlite3.connect(store)
    with db:
        db.execute("UPDATE results SET record = '{}'")
    db.close()
    with caplog.at_level(logging.WARNING, logger="pipeplan.store"):
        code, again, _ = run(capsys, "size", study, "--store", str(store), "--quiet")
    assert code == 0
    assert "its record lacks " in caplog.text and "running it again" in caplog.text
    assert "0 of 4 results came from the store" in again, again
    table = [line for line in first.splitlines() if "1f1b" in line]
    assert table and table == [line for line in again.splitlines() if "1f1b" in line]


def _sweep_args(command: str, tmp_path: Path, out: Path) -> list[str]:
    if command == "size":
        return ["size", write_study(tmp_path, GOOD), "--out", str(out), "--quiet"]
    return ["frontier", str(ROOT / "tests" / "configs" / "good-minimal.yaml"), "--budgets", "2:3:1",
            "--time-limit", "0.5", "--workers", "1", "--jobs", "1", "--quiet", "--out", str(out)]


@pytest.mark.parametrize(("stored", "command"), [("size", "frontier"), ("frontier", "size")])
def test_an_unfinished_sweep_of_another_command_is_refused_not_taken_over(
        stored: str, command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A folder holding only a store is an unfinished sweep, which running the same command again resumes; the
    other command would have replaced it, and its results with it."""
    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "store.sqlite") as store:
        store.put("some task", stored, f"a {stored} task", error="stopped")
    before = (out / "store.sqlite").read_bytes()
    code, stdout, stderr = run(capsys, *_sweep_args(command, tmp_path, out))
    assert code == USER_ERROR
    assert f"holds an unfinished 'pipeplan {stored}' run" in stderr
    assert f"run 'pipeplan {stored}' with this --out again to resume it" in stderr
    assert "Traceback" not in stderr and not stdout
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]  # no journal files left beside it either
    assert (out / "store.sqlite").read_bytes() == before


@pytest.mark.parametrize("stored", ["size", "frontier"])
def test_solve_names_an_unfinished_sweep_in_its_out_folder(stored: str, capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    """solve --out on a folder holding only a sweep's store said only "already exists; pass --force", which would
    lose the sweep's finished results; it now says whose run it is and how to resume it."""
    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "store.sqlite") as store:
        store.put("some task", stored, f"a {stored} task", error="stopped")
    before = (out / "store.sqlite").read_bytes()
    config = str(ROOT / "tests" / "configs" / "good-minimal.yaml")
    code, stdout, stderr = run(capsys, "solve", config, "--time-limit", "0.5", "--quiet", "--out", str(out))
    assert code == USER_ERROR
    assert f"holds an unfinished 'pipeplan {stored}' run (its store only); run 'pipeplan {stored}' with this --out " \
           "again to resume it, or pick another --out for this solve (--force replaces it)" in stderr
    assert "Traceback" not in stderr and not stdout
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    assert (out / "store.sqlite").read_bytes() == before


def test_a_sweep_stopped_before_any_result_is_still_its_own(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An unfinished sweep whose store holds no result yet is known by the command that made it."""
    out = tmp_path / "out"
    monkeypatch.setattr("pipeplan.cli.StopRequest", _StoppedAtOnce)
    code, _, _ = run(capsys, *_sweep_args("frontier", tmp_path, out))
    assert code == 130
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    with Store(out / "store.sqlite") as store:
        assert store.rows() == []
    assert stored_kinds(out / "store.sqlite") == {"frontier"}
    monkeypatch.undo()
    code, _, stderr = run(capsys, *_sweep_args("size", tmp_path, out))
    assert code == USER_ERROR
    assert "holds an unfinished 'pipeplan frontier' run" in stderr
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]


def test_an_unfinished_frontier_of_its_own_is_resumed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "store.sqlite") as store:
        store.put("some task", "frontier", "a frontier task", error="stopped")
    assert stored_kinds(out / "store.sqlite") == {"frontier"}
    code, _, stderr = run(capsys, *_sweep_args("frontier", tmp_path, out))
    assert code == 0, stderr
    assert {"frontier.csv", "store.sqlite"} <= {p.name for p in out.iterdir()}


def test_stored_kinds_reads_a_store_and_nothing_else(tmp_path: Path) -> None:
    assert stored_kinds(tmp_path / "missing.sqlite") is None
    assert not (tmp_path / "missing.sqlite").exists()  # never created
    (tmp_path / "text.sqlite").write_text("not a database", encoding="utf-8")
    assert stored_kinds(tmp_path / "text.sqlite") is None
    with sqlite3.connect(tmp_path / "other.sqlite") as db:
        db.execute("CREATE TABLE things (name TEXT)")
    assert stored_kinds(tmp_path / "other.sqlite") is None
    with Store(tmp_path / "store.sqlite") as store:
        assert stored_kinds(tmp_path / "store.sqlite") == frozenset()
        store.put("a", "size", "a size task", error="stopped")
        store.put("b", "frontier", "a frontier task", error="stopped")
    assert stored_kinds(tmp_path / "store.sqlite") == {"size", "frontier"}
    with Store(tmp_path / "store.sqlite") as store:
        store.own("frontier")  # the folder's command, whatever the rows
    assert stored_kinds(tmp_path / "store.sqlite") == {"frontier"}
