"""Sweeps on executors with a result store: the local pool and a real local Ray cluster give the same tables,
the frontier keeps its promises when budgets are solved at once, a store is reused and never corrupt (a sweep
killed with SIGINT, SIGTERM or ``kill -9`` is resumed without losing or repeating a row), failures are recorded,
and bad input (Ray address, store file) exits 2 naming the fix.

Ray starts once for the module (``ray.init(num_cpus=2)``); the subprocess tests run ``python -m pipeplan.cli``
with ``PYTHONPATH`` set to the folder of the ``pipeplan`` package this test imported.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from test_frontier import SETTINGS, SPLIT, check_frontier, optimizer_rows

import pipeplan
from pipeplan.cli import USER_ERROR, main
from pipeplan.executors import TaskResult
from pipeplan.executors.local import LocalExecutor
from pipeplan.frontier import frontier
from pipeplan.metrics import compute_metrics
from pipeplan.problem import ConfigError
from pipeplan.schedules import generate
from pipeplan.simulate import simulate
from pipeplan.sizing.sweep import sweep_with_stats
from pipeplan.store import FORMAT_VERSION, Store, StoreError, task_key
from pipeplan.torch_csv import to_torch_csv

# pipeplan.sizing exports the function sweep, which hides its module of the same name.
sweep_module = importlib.import_module("pipeplan.sizing.sweep")
ROOT = Path(pipeplan.__file__).resolve().parent.parent  # the checkout whose pipeplan this test imported
TINY = {"num_layers": 8, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 4,
        "vocab_size": 1000, "gated_mlp": True}
# 12 configurations (4 skipped by a constraint), 3 named schedules, the optimizer on all that run.
SWEEP: dict[str, Any] = {
    "model": TINY, "hardware": "h100-80gb", "num_gpus": [8, 16], "global_batch_size": 16, "seq_len": 128,
    "tensor_parallel": [1, 2], "pipeline_parallel": [2, 4], "num_chunks": [1, 2],
    "schedules": ["1f1b", "zb-h1", "zb-v", "optimal"], "time_limit_s": 1.0, "num_workers": 1, "random_seed": 0,
}
KEY = ["num_gpus", "tensor_parallel", "pipeline_parallel", "microbatch_size", "num_chunks", "recompute", "schedule"]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()
    for signum, handler in handlers.items():  # ray.init installs its own; later tests in this worker expect theirs
        signal.signal(signum, handler)


def by_key(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(KEY).reset_index(drop=True)


# ------------------------------------------------------------------------------------------- executors


def test_local_processes_are_at_most_four_a_core(caplog: pytest.LogCaptureFixture) -> None:
    # --jobs 100000 on 2 cores started one process per task (342 processes, 12.7 GB, climbing).
    limit = max(8, 4 * (os.cpu_count() or 1))
    assert LocalExecutor(limit).jobs == limit and not caplog.records
    executor = LocalExecutor(100_000)
    assert executor.jobs == limit
    # "at most": a pool starts a process only when a batch waits for one (it said "16 asked for, 8 started" of a
    # sweep of 2 tasks, which started 2)
    assert f"100000 local worker processes asked for, at most {limit} started: no more than 4 a core" in caplog.text
    with executor:
        assert sorted(r.value for r in executor.map(math.sqrt, [4.0, 9.0])) == [2.0, 3.0]


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_executor_yields_every_index_and_captures_failures(jobs: int) -> None:
    with LocalExecutor(jobs) as executor:
        results = sorted(executor.map(math.sqrt, [4.0, -1.0, 9.0]), key=lambda r: r.index)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.value for r in results if r.ok] == [2.0, 3.0]
    assert results[1].error is not None and results[1].error.startswith("ValueError: math domain error")


@pytest.mark.parametrize("stopped", [False, True], ids=["crash", "ctrl-c"])
def test_workers_killed_by_a_ctrl_c_leave_their_tasks_unfinished_not_failed(stopped: bool) -> None:
    """A Ctrl-C from the terminal reaches the workers too and kills those still starting; when the sweep is being
    stopped, their tasks are not reported as failed (a size then said no configuration could run, a frontier
    wrote a table of failed rows). Without a stop, a dead worker still fails its tasks."""
    with LocalExecutor(2) as executor:
        # The stop comes as the workers die (the executor drops its pool when it finds it broken).
        results = list(executor.map(os._exit, [1, 1, 1],  # each worker dies
                                    should_stop=lambda: stopped and executor._pool is None))
    if stopped:
        assert results == []
    else:
        assert sorted(r.index for r in results) == [0, 1, 2]
        assert all(r.error is not None and r.error.startswith("BrokenProcessPool") for r in results)


def test_a_ctrl_c_while_workers_import_neither_kills_them_nor_prints_a_traceback(tmp_path: Path) -> None:
    """The terminal's Ctrl-C reaches every process of the group, workers that are still importing included: they
    died there with a KeyboardInterrupt traceback, before they could ignore it. Here each worker sends itself
    SIGINT while it imports the script (as "__mp_main__"); the tasks still run, and nothing is printed."""
    script = tmp_path / "pool.py"
    script.write_text("import math, os, signal, time\n"
                      "from pipeplan.executors.local import LocalExecutor\n"
                      "if __name__ == '__mp_main__':  # a worker importing this script\n"
                      "    os.kill(os.getpid(), signal.SIGINT)\n"
                      "    time.sleep(0.2)\n"
                      "if __name__ == '__main__':\n"
                      "    with LocalExecutor(2) as executor:\n"
                      "        results = executor.map(math.sqrt, [4.0, 9.0])\n"
                      "        print(sorted((r.index, r.value, r.error) for r in results))\n",
                      encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], env=child_env(), capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[(0, 2.0, None), (1, 3.0, None)]", done.stdout + done.stderr
    assert done.stderr == ""


def test_a_worker_ignores_ctrl_c_and_no_longer_blocks_it() -> None:
    """After its set-up a worker ignores SIGINT (the parent decides) and has it unblocked again, so that what it
    starts itself does not inherit the block it was started with."""
    with LocalExecutor(2) as executor:
        handlers = [r.value for r in executor.map(signal.getsignal, [signal.SIGINT] * 2)]
        masks = [r.value for r in executor.map(functools.partial(signal.pthread_sigmask, signal.SIG_BLOCK), [[]] * 2)]
    assert handlers == [signal.SIG_IGN] * 2
    assert len(masks) == 2 and not any(signal.SIGINT in mask for mask in masks), masks
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # nor blocked here after the map


# A task that logs a warning on one of pipeplan's loggers and returns None (picklable: a logger pickles by name).
WARN = functools.partial(logging.Logger.warning, logging.getLogger("pipeplan.test"), "seen %s")


def test_a_worker_process_sends_its_warnings_back_with_the_result(caplog: pytest.LogCaptureFixture) -> None:
    """A task's warnings in a worker process come back with its result; in this process (one job) they are
    logged as they are, not kept."""
    with LocalExecutor(2) as executor:
        results = sorted(executor.map(WARN, [1, 2]), key=lambda r: r.index)
    assert [r.warnings for r in results] == [(("pipeplan.test", logging.WARNING, "seen 1"),),
                                             (("pipeplan.test", logging.WARNING, "seen 2"),)]
    with caplog.at_level(logging.WARNING, logger="pipeplan"), LocalExecutor(1) as executor:
        assert [r.warnings for r in executor.map(WARN, [3])] == [()]
    assert "seen 3" in caplog.text


def test_a_signal_wrapped_by_rays_compiled_code_is_found_and_nothing_else() -> None:
    """What a signal handler raised inside Ray's compiled calls reaches the executor as a SystemError caused by it
    (CPython's "returned a result with an exception set"): that signal is raised as itself; a SystemError of any
    other cause, or another exception caused by a signal, is not a signal."""
    from pipeplan.executors.ray import _signal_in

    def wrapped(cause: BaseException, kind: type[Exception] = SystemError) -> Exception:
        try:
            raise kind("<cyfunction CoreWorker.wait> returned a result with an exception set") from cause
        except Exception as exc:
            return exc

    interrupt, terminated = KeyboardInterrupt(), type("Terminated", (BaseException,), {})()
    assert _signal_in(wrapped(interrupt)) is interrupt
    assert _signal_in(wrapped(terminated)) is terminated
    assert _signal_in(wrapped(ValueError("a task's own error"))) is None
    assert _signal_in(wrapped(GeneratorExit())) is None
    assert _signal_in(wrapped(interrupt, RuntimeError)) is None
    assert _signal_in(SystemError("no cause")) is None


def test_a_ray_executor_used_outside_a_with_block_says_how_to_use_it() -> None:
    # It was a bare AssertionError (gone under python -O); the local executor needs no with block.
    from pipeplan.executors.ray import RayExecutor

    with pytest.raises(RuntimeError, match="a RayExecutor connects to Ray when entered: use it in a with block"):
        list(RayExecutor("local").map(math.sqrt, [4.0]))
    # Zero CPUs started a cluster on which every task waited forever; -3 was Ray's own ValueError.
    for jobs in (0, -3, 1.5):
        with pytest.raises(ConfigError, match=r"jobs \(the Ray cluster's CPUs\) must be a whole number >= 1"):
            RayExecutor("local", num_cpus=jobs)  # type: ignore[arg-type]


def test_ray_executor_yields_every_index_and_captures_failures(ray_cluster: Any) -> None:
    from pipeplan.executors.ray import RayExecutor

    with RayExecutor("auto") as executor:
        results: list[TaskResult] = sorted(executor.map(math.sqrt, [4.0, -1.0, 9.0], num_cpus=8),
                                           key=lambda r: r.index)  # asks for more CPUs than there are: capped
    assert [r.value for r in results] == [2.0, None, 3.0]
    assert results[1].error is not None and "math domain error" in results[1].error
    with RayExecutor("auto") as executor:
        # sent back from the Ray worker
        assert [r.warnings for r in executor.map(WARN, [5])] == [(("pipeplan.test", logging.WARNING, "seen 5"),)]


def test_a_script_without_the_main_guard_is_told_so(tmp_path: Path) -> None:
    """A script that sweeps with worker processes at import, without `if __name__ == "__main__":`: each worker
    ("spawn") imports it again and would start workers of its own. The workers' error and each row's say so (the
    rows used to blame memory: "killed, out of memory or crashed"), the workers' without a traceback."""
    script = tmp_path / "study.py"
    script.write_text(
        "from pipeplan.sizing import sweep\n"
        f"frame = sweep(model={TINY!r}, hardware='h100-80gb', num_gpus=8, global_batch_size=16, seq_len=128,\n"
        "              tensor_parallel=[1, 2], pipeline_parallel=[2, 4], schedules='1f1b', processes=2)\n"
        "print(sorted(set(frame['skipped'].dropna())))\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    guard = 'under `if __name__ == "__main__":`'
    assert done.returncode == 0, done.stderr
    assert "worker processes were started while a worker was importing the script" in done.stderr
    assert "Traceback" not in done.stderr  # the workers end with the message alone
    assert done.stderr.count(guard) >= 1 and "BrokenProcessPool" in done.stdout and guard in done.stdout, done.stdout


@pytest.mark.parametrize(("main_file", "guard"), [("/home/me/study.py", True), ("/usr/local/bin/pipeplan", False)],
                         ids=["script", "command"])
def test_a_dead_workers_error_mentions_the_guard_only_from_a_script(monkeypatch: pytest.MonkeyPatch, main_file: str,
                                                                   guard: bool) -> None:
    """The `pipeplan` command's workers cannot start more: its rows (and the store, and sweep.csv) are not told
    about a guard they do not need."""
    import types

    from pipeplan.executors.local import worker_died

    main = types.ModuleType("__main__")
    main.__file__ = main_file
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert worker_died().startswith("BrokenProcessPool: a worker process died before this task finished")
    assert ("__name__ == \"__main__\"" in worker_died()) == guard


# ------------------------------------------------------------------------------------ local against Ray


def test_a_sweep_on_local_and_on_ray_gives_the_same_table(ray_cluster: Any) -> None:
    from pipeplan.executors.ray import RayExecutor

    with LocalExecutor(2) as executor:
        local, local_stats = sweep_with_stats(**SWEEP, executor=executor)
    with RayExecutor("auto") as executor:
        remote, remote_stats = sweep_with_stats(**SWEEP, executor=executor)
    assert local_stats.failures == remote_stats.failures == {}
    assert local_stats.total == remote_stats.total > 0
    local, remote = by_key(local), by_key(remote)
    named = local["schedule"] != "optimal"
    # Named schedules are replays: identical rows.
    pd.testing.assert_frame_equal(local[named], remote[named])
    # The optimizer under a time limit: a row proven OPTIMAL on both sides has the same step time; otherwise
    # (FEASIBLE, with a gap) the two answers may differ, but each is at least the other's proven bound.
    optimal = local[~named].index
    for i in optimal:
        a, b = local.loc[i], remote.loc[i]
        assert a["fits"] == b["fits"] and a["skipped"] == b["skipped"] or (pd.isna(a["skipped"]) and pd.isna(
            b["skipped"]))
        if pd.isna(a["pipeline_time_s"]):
            continue
        if a["status"] == b["status"] == "OPTIMAL":
            assert a["pipeline_time_s"] == pytest.approx(b["pipeline_time_s"], rel=1e-9)
        else:
            for x, y in ((a, b), (b, a)):
                bound = x["pipeline_time_s"] * (1 - (x["gap"] or 0.0))
                assert y["pipeline_time_s"] >= bound * (1 - 1e-9)


def test_the_frontier_solved_at_once_never_rises_and_carries_bounds_down(ray_cluster: Any) -> None:
    from pipeplan.executors.ray import RayExecutor

    budgets = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0]
    settings = replace(SETTINGS, time_limit_s=0.3)  # short: some budgets stay unproven, and may come back worse
    with RayExecutor("auto") as executor:
        on_ray = frontier(SPLIT, budgets, settings, executor=executor)
    with LocalExecutor(2) as executor:
        local = frontier(SPLIT, budgets, settings, executor=executor)
    for rows in (on_ray, local):
        check_frontier(rows)  # never rises, bounds carried down, never loses to a named schedule
        assert [r.budget for r in optimizer_rows(rows)] == budgets
    for a, b in zip(optimizer_rows(on_ray), optimizer_rows(local)):
        if a.status == b.status == "OPTIMAL":
            assert a.objective == pytest.approx(b.objective, rel=1e-9)


def test_an_answer_worse_than_a_smaller_budgets_is_replaced_by_that_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # A solve at a larger budget that comes back worse (here: the warm starts only, no search) is replaced by
    # the smaller budget's schedule, replayed; the bound it proved there still holds.
    import pipeplan.frontier as frontier_module

    real = frontier_module.solve_checked

    def worse_at_large(problem: Any, settings: Any, **kwargs: Any) -> Any:
        result = real(problem, settings, **kwargs)
        if problem.budget[0] > 2.5:  # the same proven bound, but GPipe's schedule: worse than budget 2's answer
            return replace(result, schedule=generate("gpipe", problem), source="worse")
        return result

    monkeypatch.setattr(frontier_module, "solve_checked", worse_at_large)
    rows = frontier(SPLIT, [2.0, 3.0], SETTINGS, executor=LocalExecutor(1))
    small, large = optimizer_rows(rows)
    assert large.source == "budget 2" and large.objective == pytest.approx(small.objective)
    assert large.lower_bound is not None and large.lower_bound <= large.objective


# ------------------------------------------------------------------------------------------------ store


def test_task_keys_are_canonical() -> None:
    assert task_key("size", {"a": 2, "b": [1.0, 2]}) == task_key("size", {"b": (1, 2.0), "a": 2.0})
    assert task_key("size", {"a": 2}) != task_key("size", {"a": 3}) != task_key("frontier", {"a": 3})


def test_a_rerun_reuses_every_row_and_refresh_runs_them_again(tmp_path: Path) -> None:
    kwargs = {**SWEEP, "schedules": ["1f1b", "zb-v", "optimal"], "time_limit_s": 0.3}
    with Store(tmp_path / "s.sqlite") as store:
        first, stats = sweep_with_stats(**kwargs, store=store)
        assert stats.reused == 0 and stats.ran == stats.total > 0
        again, stats = sweep_with_stats(**kwargs, store=store)
        assert stats.reused == stats.total and stats.ran == 0
        pd.testing.assert_frame_equal(first, again)
        _, stats = sweep_with_stats(**kwargs, store=store, refresh=True)
        assert stats.reused == 0 and stats.ran == stats.total
        rows = store.rows()
        assert len(rows) == len({row.key for row in rows}) == stats.total  # replaced, not duplicated
        # A stored optimum replays to the same pipeline time without solving again.
        best = first[(first["schedule"] == "optimal") & first["skipped"].isna()].iloc[0]
        stored = [row for row in rows if row.record is not None and row.record.get("schedule") == "optimal"
                  and row.record.get("step_time_s") == best["step_time_s"]][0]
        problem, schedule = stored.problem(), stored.schedule()
        assert problem is not None and schedule is not None
        assert compute_metrics(simulate(problem, schedule)).makespan == pytest.approx(best["pipeline_time_s"])
        assert to_torch_csv(problem, schedule).count("\n") >= problem.num_devices  # and exported, one row per rank


class _StoppedAtOnce(pipeplan.solver.StopRequest):
    """A Ctrl-C that came before any budget finished."""

    def __init__(self) -> None:
        super().__init__()
        self.request()


def test_a_frontier_stopped_before_any_budget_finished_keeps_only_its_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(Path(__file__).parent / "configs" / "good-minimal.yaml")
    out = tmp_path / "frontier"
    argv = ["frontier", config, "--budgets", "2:3:1", "--time-limit", "0.5", "--workers", "1", "--jobs", "1",
            "--quiet", "--out", str(out)]
    monkeypatch.setattr("pipeplan.cli.StopRequest", _StoppedAtOnce)
    assert main(argv) == 130
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]  # no empty table: an unfinished sweep
    assert "wrote" not in capsys.readouterr().out
    monkeypatch.undo()
    assert main(argv) == 0  # the same command resumes it, no --force
    assert {"frontier.csv", "store.sqlite"} <= {p.name for p in out.iterdir()}


def test_a_failed_task_is_recorded_and_the_sweep_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs = {**SWEEP, "schedules": ["1f1b", "zb-h1"]}
    real = sweep_module.run_named

    def broken(sized: Any, orders: Any) -> Any:
        if orders.name == "zb-h1":
            raise RuntimeError("boom")
        return real(sized, orders)

    with Store(tmp_path / "s.sqlite") as store:
        monkeypatch.setattr(sweep_module, "run_named", broken)
        frame, stats = sweep_with_stats(**kwargs, store=store)
        failed = frame[frame["skipped"].fillna("").str.startswith("failed: RuntimeError: boom")]
        assert len(failed) == len(stats.failures) > 0 and set(failed["schedule"]) == {"zb-h1"}
        assert frame[frame["schedule"] == "1f1b"]["skipped"].isna().any()
        assert sum(row.error is not None for row in store.rows()) == len(failed)
        monkeypatch.setattr(sweep_module, "run_named", real)
        _, stats = sweep_with_stats(**kwargs, store=store)  # failures are run again, successes reused
        assert stats.failures == {} and stats.ran == len(failed) and stats.reused == stats.total - len(failed)


def make_not_a_store(path: Path) -> None:
    path.write_text("name,value\n", encoding="utf-8")


def make_plain_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()


def altered_store(statement: str, *parameters: object) -> Any:
    """A maker of a new store changed by one SQL ``statement``."""

    def make(path: Path) -> None:
        Store(path).close()
        db = sqlite3.connect(path)
        db.execute(statement, parameters)
        db.commit()
        db.close()

    return make


make_other_layout = altered_store("UPDATE meta SET value = ? WHERE key = 'format_version'", str(FORMAT_VERSION + 1))


def make_damaged_store(path: Path) -> None:
    Store(path).close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the first page's tables, after the 100-byte header
    path.write_bytes(bytes(data))


# How a store error names another store, for the command line and for Python.
ANOTHER = "another store file (--store FILE; Store(path) in Python)"

BAD_STORES = [
    ("not-sqlite", make_not_a_store, f"is not a pipeplan store (not an SQLite file); pick {ANOTHER}"),
    ("damaged", make_damaged_store, "is an SQLite file that cannot be read (database disk image is malformed): "
     "damaged or not a pipeplan store"),
    ("other-sqlite", make_plain_sqlite, "is an SQLite file but not a pipeplan store (no meta table); pick another"),
    ("other-layout", make_other_layout, f"this pipeplan reads layout {FORMAT_VERSION}: pick {ANOTHER}"),
    # Each was an internal error (no such table: results; no such column: label): a new user's trial.
    ("no-results-table", altered_store("DROP TABLE results"), f"is a pipeplan store with no results table: "
                                                             f"damaged; pick {ANOTHER}"),
    ("renamed-column", altered_store("ALTER TABLE results RENAME COLUMN label TO lbl"), "is a pipeplan store with a "
                                                                                        "results table with other "
                                                                                        "columns: damaged"),
]


@pytest.mark.parametrize(("name", "make", "message"), BAD_STORES, ids=[row[0] for row in BAD_STORES])
def test_a_file_that_is_not_a_usable_store_exits_2_and_is_left_alone(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, name: str, make: Any,
                                                                      message: str) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**{k: SWEEP[k] for k in ("model", "hardware", "global_batch_size", "seq_len")},
                                     "num_gpus": 8, "search": {"schedules": ["1f1b"]}}), encoding="utf-8")
    path = tmp_path / "results.sqlite"
    make(path)
    before = path.read_bytes()
    code = main(["size", str(study), "--store", str(path), "--quiet"])
    err = capsys.readouterr().err
    assert code == USER_ERROR and message in err and len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before


BAD_PLACES = [
    ("store-in-unwritable-place", ["--store", "/proc/store.sqlite"],
     f"pick {ANOTHER} in a folder you can write to"),
    # (it also said "or move that file away", of a folder)
    ("store-is-a-folder", ["--store", "."], f"'.' is a folder, not a store file; pick {ANOTHER}, e.g. "
                                            "'store.sqlite'"),
    ("ray-address-unreachable", ["--ray", "127.0.0.1:9"], "cannot reach a Ray cluster at '127.0.0.1:9'"),
    ("ray-address-malformed", ["--ray", "headnode"], "--ray 'headnode' is not HOST:PORT"),
]


@pytest.mark.parametrize(("name", "flags", "message"), BAD_PLACES, ids=[row[0] for row in BAD_PLACES])
def test_bad_store_place_or_ray_address_exits_2_naming_the_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               name: str, flags: list[str], message: str) -> None:
    pytest.importorskip("ray")
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    out = tmp_path / "out"
    code = main(["frontier", str(config), "--budgets", "2:3:1", "--time-limit", "0.2", "--quiet", "--out", str(out),
                 *flags])
    err = capsys.readouterr().err
    assert code == USER_ERROR and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no folder, no store left behind


@pytest.mark.parametrize("command", ["frontier", "size"])
def test_a_store_in_a_folder_that_does_not_exist_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                         command: str) -> None:
    """--store FILE created its missing folders without a word (a mistyped path made a tree of them); only --out
    creates missing folders."""
    if command == "frontier":
        args = ["frontier", str(Path(__file__).parent / "configs" / "good-minimal.yaml"), "--budgets", "2,3",
                "--time-limit", "0.2"]
    else:
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump({**{k: SWEEP[k] for k in ("model", "hardware", "global_batch_size",
                                                                   "seq_len")}, "num_gpus": 8}), encoding="utf-8")
        args = ["size", str(study)]
    store = tmp_path / "no" / "such" / "s.sqlite"
    code = main([*args, "--store", str(store), "--quiet"])
    assert code == USER_ERROR
    assert capsys.readouterr().err == (f"pipeplan: error: folder {str(store.parent)!r} of --store does not exist; "
                                       "create it or choose another path\n")
    assert not (tmp_path / "no").exists()


def test_a_store_named_inside_out_is_kept_or_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--store DIR/store.sqlite beside --out DIR is the folder's own store, named: kept and reused (the result
    folder, written over DIR, deleted it with every row); another file inside DIR is refused before any solve."""
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    out = tmp_path / "out"
    sweep = ["frontier", str(config), "--time-limit", "0.2", "--workers", "1", "--jobs", "1", "--quiet", "--no-png",
             "--out", str(out)]
    assert main([*sweep, "--budgets", "2:3:1", "--store", str(out / "store.sqlite")]) == 0
    assert (out / "store.sqlite").exists() and (out / "frontier.csv").exists()
    capsys.readouterr()
    assert main([*sweep, "--budgets", "2:4:1", "--store", str(out / "store.sqlite"), "--force"]) == 0
    assert f"2 of 3 results came from the store {out / 'store.sqlite'}" in capsys.readouterr().out
    assert store_count(out / "store.sqlite") == 3
    code = main([*sweep, "--budgets", "2:4:1", "--store", str(out / "sub" / "other.sqlite"), "--force"])
    err = capsys.readouterr().err
    assert code == USER_ERROR and "lies inside --out" in err and "omit --store to keep the store there" in err
    # (store_count's read-only connection leaves SQLite's -wal and -shm beside the store)
    kept = sorted(p.name for p in out.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert kept == ["frontier.csv", "frontier.html", "store.sqlite"]


def test_a_sweep_on_an_out_folder_that_another_run_is_writing_is_refused(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    """A second sweep on the same --out while the first runs resumed the first's unfinished folder (it holds only
    the store) and replaced it with its own result: it is refused now, the folder and its store untouched. The
    first run is stood in for by this test holding the folder's lock (as a running sweep does)."""
    import fcntl

    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "store.sqlite"):
        pass  # an unfinished sweep: a folder holding only its store
    sweep = ["frontier", str(config), "--time-limit", "0.2", "--workers", "1", "--jobs", "1", "--quiet", "--no-png",
             "--budgets", "2:3:1", "--out", str(out)]
    handle = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = main(sweep)
    finally:
        os.close(handle)
    err = capsys.readouterr().err
    assert code == USER_ERROR and f"another pipeplan run is writing {str(out)!r}" in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["store.sqlite"] and store_count(out / "store.sqlite") == 0
    assert main(sweep) == 0  # the lock released: the sweep resumes the folder
    assert (out / "frontier.csv").exists() and store_count(out / "store.sqlite") == 2


def test_a_sweep_holds_its_out_folder_while_it_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """While the budgets are solved, another lock on --out is refused (the run holds it); after the run, not."""
    import fcntl

    import pipeplan.frontier as frontier_module

    out = tmp_path / "out"
    tries: list[str] = []
    real = frontier_module.run_tasks

    def trying(*args: Any, **kwargs: Any) -> Any:
        handle = os.open(out, os.O_RDONLY)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            tries.append("locked")
        except BlockingIOError:
            tries.append("refused")
        finally:
            os.close(handle)
        return real(*args, **kwargs)

    monkeypatch.setattr(frontier_module, "run_tasks", trying)
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    assert main(["frontier", str(config), "--time-limit", "0.2", "--workers", "1", "--jobs", "1", "--quiet",
                 "--no-png", "--budgets", "2:3:1", "--out", str(out)]) == 0
    assert tries == ["refused"]
    handle = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at the end: no BlockingIOError
    finally:
        os.close(handle)


def test_an_out_folder_finished_by_another_run_meanwhile_is_not_replaced(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    """A sweep that found --out unfinished (to resume) and, before it took the folder's lock, saw another run
    finish it (here: the other run's result written while this one starts its executor) is refused without
    --force, as if the folder had been finished when it started; the finished result is kept."""
    import pipeplan.executors

    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "store.sqlite"):
        pass  # unfinished
    real = pipeplan.executors.make_executor

    def finishing(*args: Any, **kwargs: Any) -> Any:
        (out / "frontier.csv").write_text("budget\n", encoding="utf-8")  # the other run's result
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeplan.executors, "make_executor", finishing)
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    code = main(["frontier", str(config), "--time-limit", "0.2", "--workers", "1", "--jobs", "1", "--quiet",
                 "--no-png", "--budgets", "2:3:1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == USER_ERROR and f"output folder {str(out)!r} already exists; pass --force" in err, err
    assert (out / "frontier.csv").read_text(encoding="utf-8") == "budget\n"
    assert store_count(out / "store.sqlite") == 0


def stored_and_edited(store: Path, budgets: str, *edits: str) -> list[str]:
    """A frontier of good-minimal.yaml at ``budgets`` run into ``store``, whose rows are then changed by the SQL
    ``edits`` (as a hand edit or a flipped byte would): the command line that runs it again."""
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    sweep = ["frontier", str(config), "--budgets", budgets, "--time-limit", "0.2", "--workers", "1", "--jobs", "1",
             "--quiet", "--store", str(store)]
    assert main(sweep) == 0
    db = sqlite3.connect(store)
    with db:
        for edit in edits:
            db.execute(edit)
    db.close()
    return sweep


def test_a_damaged_row_runs_again_and_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """A row whose JSON does not read (edited by hand, a flipped byte) was an internal error (JSONDecodeError) in
    the sweep and in Store.rows(): a damaged record or schedule now runs again, its row replaced, with a warning
    naming it; rows() names it."""
    store = tmp_path / "s.sqlite"
    sweep = stored_and_edited(store, "2:4:1", "UPDATE results SET record = 'oops' WHERE label = 'budget 3'",
                              "UPDATE results SET orders = '[]' WHERE label = 'budget 2'")
    with Store(store) as opened, pytest.raises(
            StoreError, match=r"has a damaged row \(frontier 'budget 2', key [0-9a-f]{12}\.\.\.\): its schedule is "
                              r"not a JSON object"):
        opened.rows()
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="pipeplan.store"):
        assert main(sweep) == 0
    assert "1 of 3 results came from the store" in capsys.readouterr().out
    assert "damaged row (frontier 'budget 3', key " in caplog.text and "Expecting value" in caplog.text
    assert "damaged row (frontier 'budget 2', key " in caplog.text and "running it again" in caplog.text
    with Store(store) as opened:
        assert len(opened.rows()) == 3  # the damaged rows replaced


def test_a_stored_record_without_its_fields_runs_again(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A record that reads as JSON but lacks what the frontier reads (edited to {}) was an internal error
    (KeyError: 'source'): it now runs again, named in a warning, like a row whose JSON does not read; so do orders
    that read but are not the stored problem's."""
    store = tmp_path / "s.sqlite"
    not_its_orders = """UPDATE results SET orders = '{"name": "x", "orders": [[]]}' WHERE label = 'budget 2'"""
    sweep = stored_and_edited(store, "2:3:1", "UPDATE results SET record = '{}' WHERE label = 'budget 3'",
                              not_its_orders)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="pipeplan.store"):
        assert main(sweep) == 0
    captured = capsys.readouterr()
    assert "0 of 2 results came from the store" in captured.out and "internal error" not in captured.err
    assert "damaged row (frontier 'budget 2', key " in caplog.text and "has 1 device orders, expected" in caplog.text
    assert ("damaged row (frontier 'budget 3', key " in caplog.text
            and "its record lacks 3 fields (lower_bound, solve_time_s, source); running it again" in caplog.text)
    with Store(store) as opened:
        assert all(row.record for row in opened.rows())  # replaced


def test_a_store_under_a_file_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match=r"cannot create the store .*: '.*afile' is a file, not a folder; pick "):
        Store(tmp_path / "afile" / "sub" / "s.sqlite")  # it said "File exists"


def test_a_store_locked_by_another_process_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's write lock held past the wait was reported as a read-only store."""
    import pipeplan.store

    path = tmp_path / "s.sqlite"
    Store(path).close()
    monkeypatch.setattr(pipeplan.store, "LOCK_WAIT_S", 0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match=r"another process has held its lock for 0.2 s \(another sweep writing "
                                             r"it, or an sqlite3 shell in a transaction\); run again once it is done"):
            Store(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files anyway")
def test_a_read_only_store_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    Store(path).close()
    path.chmod(0o444)
    with pytest.raises(StoreError, match=re.escape(f"read-only: pick {ANOTHER} in a folder you can write to")):
        Store(path)


# ------------------------------------------------------------------------------------------- kills


# Many named-schedule replays of a few milliseconds each: a store written to many times a second.
WRITE_HEAVY = {
    "name": "write-heavy", "model": TINY, "hardware": "h100-80gb", "num_gpus": [8, 16],
    "global_batch_size": 64, "seq_len": 128,
    "search": {"tensor_parallel": [1, 2], "pipeline_parallel": [2, 4, 8], "microbatch_size": [1],
               "num_chunks": [1, 2], "recompute": ["none", "selective"],
               "schedules": ["1f1b", "zb-h1", "interleaved-1f1b", "zb-v", "dualpipe-v", "gpipe"]},
}


def store_count(path: Path) -> int:
    if not path.exists():
        return 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return int(db.execute("SELECT count(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGKILL, -9), (signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["kill-9", "sigterm", "sigint"])
def test_a_killed_sweep_resumes_without_losing_or_repeating_a_row(tmp_path: Path, signum: int, status: int) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(WRITE_HEAVY), encoding="utf-8")
    # With --out DIR the store is DIR/store.sqlite, and DIR holds only it until the sweep ends; else --store.
    out = tmp_path / "sized"
    store = out / "store.sqlite" if signum == signal.SIGINT else tmp_path / "sweep.sqlite"
    where = ["--out", str(out)] if signum == signal.SIGINT else ["--store", str(store)]
    argv = [sys.executable, "-m", "pipeplan.cli", "size", str(study), *where, "--jobs", "1", "--quiet"]
    child = subprocess.Popen(argv, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while store_count(store) < 20 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    assert child.poll() is None, child.communicate()
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    assert child.returncode == status, err
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    kept = db.execute("SELECT count(*) FROM results").fetchone()[0]
    db.close()
    assert kept >= 20
    if signum == signal.SIGINT:  # the finished rows are shown; DIR is not written yet
        assert f"tasks finished (kept in {store}); run the same command again to resume" in err
        assert sorted(p.name for p in out.iterdir())[0] == "store.sqlite" and not (out / "sweep.csv").exists()
    again = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    line = next(line for line in again.stdout.splitlines() if "came from the store" in line)
    reused, total = int(line.split()[0]), int(line.split()[2])
    assert reused == kept and total > kept
    if signum == signal.SIGINT:  # the same command (no --force) finished the folder, with a copy of the store
        assert sorted(p.name for p in out.iterdir()) == ["best.yaml", "report.html", "store.sqlite", "sweep.csv"]
    db = sqlite3.connect(store)
    assert db.execute("SELECT count(*), count(DISTINCT key) FROM results").fetchone() == (total, total)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def _state(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process from /proc, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0]


def _alive(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state[1] != "Z"  # a zombie is dead, waiting to be reaped


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_local_workers_end_when_their_parent_is_killed(tmp_path: Path) -> None:
    """kill -9 of the process that started a pool: its workers, waiting in a task, end within seconds (they lived
    on, adopted by init, about 150 MB each)."""
    script = tmp_path / "pool.py"
    script.write_text("import time\nfrom pipeplan.executors.local import LocalExecutor\n"
                      "if __name__ == '__main__':\n"
                      "    with LocalExecutor(2) as executor:\n"
                      "        print(list(executor.map(time.sleep, [60, 60])))\n", encoding="utf-8")
    # Not pipes: the workers hold the child's stdout and stderr, so a pipe would not close when the child dies.
    log = tmp_path / "pool.log"
    with log.open("w") as sink:
        child = subprocess.Popen([sys.executable, str(script)], env=child_env(), stdout=sink, stderr=sink)

    def children() -> set[int]:
        found = set()
        for entry in Path("/proc").iterdir():
            state = _state(int(entry.name)) if entry.name.isdigit() else None
            if state is not None and state[0] == child.pid and state[1] != "Z":
                found.add(int(entry.name))
        return found

    deadline = time.monotonic() + 60
    while len(children()) < 3 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.1)  # two workers and multiprocessing's resource tracker
    workers = children()
    assert len(workers) >= 3, log.read_text()
    child.kill()
    child.wait(timeout=30)
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = sorted(pid for pid in workers if _alive(pid))
    for pid in alive:  # leave nothing behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"processes {alive} outlived their parent"


def test_sigterm_during_a_sweep_on_a_local_ray_cluster_aborts_with_143(tmp_path: Path) -> None:
    """SIGTERM once three rows are stored (on a 2-core machine mostly as the last tasks end and Ray shuts down):
    "terminated", status 143, the store intact. Ray's driver puts in its own SIGTERM handler, which exited 15
    without a word when the signal came after the sweep's own handler was gone; a signal handler's exception raised
    inside Ray's wait came out as a SystemError (an "internal error"), and cancelling the tasks then could crash
    Ray's core worker."""
    pytest.importorskip("ray")
    study = tmp_path / "study.yaml"
    slow = {**WRITE_HEAVY, "search": {**WRITE_HEAVY["search"], "schedules": ["1f1b", "optimal"]},
            "optimizer": {"time_limit_s": 2.0}}
    study.write_text(yaml.safe_dump(slow), encoding="utf-8")
    store = tmp_path / "sweep.sqlite"
    argv = [sys.executable, "-m", "pipeplan.cli", "size", str(study), "--store", str(store), "--ray", "local",
            "--quiet"]
    # RAY_ADDRESS names a cluster that is not there: '--ray local' starts its own all the same (it joined the one
    # RAY_ADDRESS or a running 'ray start' named, and failed with --jobs)
    child = subprocess.Popen(argv, env={**child_env(), "RAY_ADDRESS": "127.0.0.1:9"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while store_count(store) < 3 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.5)
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 143, err
    assert "pipeplan: terminated" in err and "internal error" not in err
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM results").fetchone()[0] >= 1
    db.close()


# ------------------------------------------------------------------------------------------- progress


@pytest.mark.parametrize(("flags", "shown"), [([], False), (["--progress"], True), (["--progress", "--quiet"], True)],
                         ids=["pipe", "pipe-with-progress", "progress-beats-quiet"])
def test_progress_on_a_pipe_only_with_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                               flags: list[str], shown: bool) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**{k: SWEEP[k] for k in ("model", "hardware", "global_batch_size", "seq_len")},
                                     "num_gpus": 8, "search": {"schedules": ["1f1b", "zb-h1"]}}), encoding="utf-8")
    store = tmp_path / "s.sqlite"
    assert main(["size", str(study), "--store", str(store), "--jobs", "1", *flags]) == 0
    captured = capsys.readouterr()
    assert ("progress: " in captured.err) == shown
    if shown:
        last = captured.err.strip().splitlines()[-1]
        assert last.startswith("progress: 18/18 done, 0 reused, 0 failed, ") and last.endswith(" s elapsed"), last
        assert captured.err.count("progress: 18/18 done") == 1, captured.err
    assert "0 of 18 results came from the store" in captured.out  # 9 configurations, 2 schedules
    assert main(["size", str(study), "--store", str(store), "--jobs", "1", "--quiet"]) == 0
    assert f"18 of 18 results came from the store {store}" in capsys.readouterr().out


def test_the_last_progress_line_is_printed_once(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """With --progress on a pipe the last report was printed again at the end when a line a second had already
    printed it (a sweep whose last task came more than a second after the one before)."""
    from types import SimpleNamespace

    from pipeplan import cli

    clock = iter([100.0, 100.1, 102.0, 102.1, 105.0, 105.1, 105.2])
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    with cli._TaskProgress(quiet=False, forced=True) as progress:
        for done in (1, 2):
            progress(SimpleNamespace(done=done, total=2, reused=0, failed=0))
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["progress: 1/2 done", "progress: 2/2 done"], lines


def test_a_failed_budget_is_listed_and_the_frontier_goes_on(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeplan.frontier as frontier_module

    real = frontier_module.solve_checked

    def broken(problem: Any, settings: Any, **kwargs: Any) -> Any:
        if problem.budget[0] == 3.0:
            raise RuntimeError("boom")
        return real(problem, settings, **kwargs)

    monkeypatch.setattr(frontier_module, "solve_checked", broken)
    config = Path(__file__).parent / "configs" / "good-minimal.yaml"
    store = tmp_path / "f.sqlite"
    argv = ["frontier", str(config), "--budgets", "2:4:1", "--time-limit", "0.5", "--jobs", "1", "--store", str(store)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "budget 3: failed: RuntimeError: boom" in out
    assert "1 task(s) failed (recorded in the store; a re-run tries them again):" in out
    assert "  budget 3: RuntimeError: boom" in out
    monkeypatch.setattr(frontier_module, "solve_checked", real)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 of 3 results came from the store" in out and "task(s) failed" not in out and "boom" not in out


def test_a_frontiers_tasks_bring_back_the_named_schedules_rows(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    # Each budget's named schedules were replayed twice: inside its task's solve and again by the parent for the
    # rows. The task now returns their metrics; a record without them (an earlier pipeplan's) is replayed here.
    from pipeplan import schedules as registry

    budgets = [2.0, 3.0]
    reference = [r for r in frontier(SPLIT, budgets, SETTINGS) if r.schedule != "optimal"]
    built: list[float] = []
    real = registry.generate_applicable

    def counted(problem: Any) -> Any:
        built.append(problem.budget[0])
        return real(problem)

    monkeypatch.setattr(registry, "generate_applicable", counted)
    path = tmp_path / "f.sqlite"
    with Store(path) as store:
        rows = frontier(SPLIT, budgets, SETTINGS, store=store)
    assert sorted(built) == budgets  # once per budget
    assert [r for r in rows if r.schedule != "optimal"] == reference
    with sqlite3.connect(path) as db:  # as an earlier pipeplan wrote them: no named schedules' metrics
        for key, record in db.execute("SELECT key, record FROM results").fetchall():
            data = json.loads(record)
            data.pop("named")
            db.execute("UPDATE results SET record = ? WHERE key = ?", (json.dumps(data), key))
    built.clear()
    with Store(path) as store:
        again = frontier(SPLIT, budgets, SETTINGS, store=store)
    assert sorted(built) == budgets and [r for r in again if r.schedule != "optimal"] == reference
