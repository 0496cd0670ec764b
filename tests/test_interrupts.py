"""Ctrl-C and SIGTERM during a search, in process through ``pipeplan.cli.main``.

The signals are sent by the process to itself from the progress callback, so they arrive at a known point:
the first report comes before the CP-SAT search starts, later ones from the search itself. The contract: the
first Ctrl-C stops the search, the run finishes with the best schedule so far, says so, marks its JSON and
result folder ``interrupted`` and exits 130; a second Ctrl-C or SIGTERM aborts at once (130 or 143) and writes
nothing; a frontier sweep stops after the budget it was solving.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pipeplan.cli
import pipeplan.frontier
import pipeplan.planner
from pipeplan.cli import INTERRUPTED, TERMINATED, main
from pipeplan.solver import StopRequest

# A split backward at a tight budget: no warm start meets the bound, so CP-SAT searches (for up to 10 s).
CONFIG = """\
pipeline: {num_stages: 8, num_microbatches: 32}
costs: {forward: 1.0, backward: 1.0, backward_weight: 0.5, comm: 0.03}
memory: {activation: 1, weight_activation: 0.35, budget: 5}
solver: {time_limit_s: 10, num_workers: 2}
"""


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "tight.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)


def ctrl_c_on_first_report(real_solve: Callable[..., Any]) -> Callable[..., Any]:
    """``real_solve`` that sends SIGINT to this process on each solve's first progress report, which comes
    before its search starts (the caller's own progress callback is replaced)."""
    def solve_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        sent = {"done": False}

        def on_report(_progress: Any) -> None:
            if not sent["done"]:
                sent["done"] = True
                os.kill(os.getpid(), signal.SIGINT)

        return real_solve(*args, **{**kwargs, "progress": on_report})

    return solve_then_ctrl_c


def ctrl_c_after(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` that sends SIGINT to this process once it has returned."""
    def call_then_ctrl_c(*args: Any, **kwargs: Any) -> Any:
        result = call(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return result

    return call_then_ctrl_c


def send_on_report(monkeypatch: pytest.MonkeyPatch, when: Callable[[int, Any], bool], *signals: int,
                   gap: float = 2 * pipeplan.cli.SAME_INTERRUPT_S) -> None:
    """Send ``signals`` to this process on the first progress report for which ``when(n, report)`` holds (n is
    1-based). Reports after the first come from CP-SAT's threads; between two signals the sender waits until the
    main thread has handled the first (a stop was requested), since the same signal twice at once would arrive
    as one, and then ``gap`` seconds (a Ctrl-C sooner after the first is taken for the same one). The search
    cannot end meanwhile: CP-SAT waits for the report to return."""
    original = pipeplan.cli._ProgressLine.__call__
    calls = {"n": 0, "sent": False}
    handled = threading.Event()
    request = StopRequest.request

    def record(self: StopRequest) -> None:
        handled.set()
        request(self)

    def report(self: Any, progress: Any) -> None:
        calls["n"] += 1
        if not calls["sent"] and when(calls["n"], progress):
            calls["sent"] = True
            for i, signum in enumerate(signals):
                if i:
                    assert handled.wait(30), "the first signal was never handled"
                    time.sleep(gap)
                os.kill(os.getpid(), signum)
        original(self, progress)

    monkeypatch.setattr(StopRequest, "request", record)
    monkeypatch.setattr(pipeplan.cli._ProgressLine, "__call__", report)


def frontier_in_process(config: str, budgets: str, time_limit: str, out: Path) -> list[str]:
    """A frontier whose budgets are tasks (--out keeps them in DIR/store.sqlite), run one at a time in this
    process."""
    return ["frontier", config, "--budgets", budgets, "--time-limit", time_limit, "--jobs", "1", "--out", str(out),
            "--no-png"]


def nth(at: int) -> Callable[[int, Any], bool]:
    return lambda n, _report: n == at


@pytest.mark.parametrize("at", [1, 2], ids=["before-the-search", "during-the-search"])
def test_first_ctrl_c_finishes_with_the_best_schedule_and_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path, at: int
) -> None:
    send_on_report(monkeypatch, nth(at), signal.SIGINT)
    out = tmp_path / "out"
    before = signal.getsignal(signal.SIGINT)  # default_int_handler, unless something in this process set its own
    code = main(["solve", config, "--format", "json", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == INTERRUPTED == 130
    assert "interrupted" in captured.err and "Traceback" not in captured.err
    summary = json.loads(captured.out)
    assert summary["interrupted"] is True
    optimal = next(row for row in summary["schedules"] if row["schedule"] == "optimal")
    assert optimal["interrupted"] is True and optimal["feasible"]
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["interrupted"] is True
    # The page says so beside the proof and the solver's time limit, also when rebuilt from the folder (it read
    # "time limit 10 s" and the gap as if the whole limit had run).
    note = (f"stopped early by Ctrl-C after {optimal['solve_time_s']:.1f} s of its 10 s: the best schedule found "
            "by then, not the time limit&#x27;s answer")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count(note) == 2 and f"The solve was {note}." in page
    assert main(["report", str(out), "--out", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text(encoding="utf-8") == page
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left


@pytest.mark.parametrize(("signals", "status", "word"), [
    ((signal.SIGINT, signal.SIGINT), INTERRUPTED, "interrupted"),
    ((signal.SIGTERM,), TERMINATED, "terminated"),
], ids=["second-ctrl-c", "sigterm"])
def test_a_second_ctrl_c_or_sigterm_aborts_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path,
    signals: tuple[int, ...], status: int, word: str
) -> None:
    send_on_report(monkeypatch, nth(2), *signals)
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, unless something in this process (Ray) set its own
    code = main(["solve", config, "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == status
    assert f"pipeplan: {word}" in captured.err and "Traceback" not in captured.err
    assert list(tmp_path.iterdir()) == [Path(config)]  # neither DIR nor a temporary folder
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_the_same_ctrl_c_delivered_twice_still_finishes_with_the_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    """``timeout -s INT`` signals the command and then its process group: the same Ctrl-C twice, a moment apart.
    It used to abort the run one time in three (nothing printed or written after "finishing with the best
    schedule found so far")."""
    send_on_report(monkeypatch, nth(2), signal.SIGINT, signal.SIGINT, gap=0.0)
    code = main(["solve", config, "--format", "json", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert json.loads(captured.out)["interrupted"] is True
    assert json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))["interrupted"] is True


def ctrl_c_when_the_first_task_is_done(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Send SIGINT as a sweep's task progress first reports one task done; returns the real report (to restore)."""
    original = pipeplan.cli._TaskProgress.__call__
    sent = {"done": False}

    def report(self: Any, progress: Any) -> None:
        if not sent["done"] and getattr(progress, "done", 0) == 1:
            sent["done"] = True
            os.kill(os.getpid(), signal.SIGINT)
        original(self, progress)

    monkeypatch.setattr(pipeplan.cli._TaskProgress, "__call__", report)
    return original


def test_ctrl_c_stops_a_frontier_sweep_keeping_the_budgets_done(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    # With --out each budget is a task (here one at a time, in this process) kept in DIR/store.sqlite. Ctrl-C
    # as the first budget finishes: that budget is written, budgets 5 to 8 are never solved; the same command
    # again reuses budget 4 from the store and solves the rest.
    original = ctrl_c_when_the_first_task_is_done(monkeypatch)
    out = tmp_path / "frontier"
    argv = frontier_in_process(config, "4:8:1", "1", out)
    code = main([*argv, "--format", "json"])  # its object says the rows are not all there
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    # The last line names the budgets not run, as the sweep in one process does.
    assert captured.err.strip().splitlines()[-1].endswith("to resume (not run: 5, 6, 7, 8)")
    lines = (out / "frontier.csv").read_text(encoding="utf-8").splitlines()
    assert {float(line.split(",")[0]) for line in lines[1:]} == {4.0}
    data = json.loads(captured.out)
    assert data["finished"] is False and {row["budget"] for row in data["rows"]} == {4.0}
    assert "0 of 5 results came from the store" in captured.err
    # The page says which budgets are missing (the CSV just has no rows for them).
    page = (out / "frontier.html").read_text(encoding="utf-8")
    assert ("Interrupted: 4 of the budgets asked for were not run (5, 6, 7, 8 slots); run the same command with "
            "--force to run them.") in page
    monkeypatch.setattr(pipeplan.cli._TaskProgress, "__call__", original)
    assert main([*argv, "--force"]) == 0
    captured = capsys.readouterr()
    assert "1 of 5 results came from the store" in captured.out
    lines = (out / "frontier.csv").read_text(encoding="utf-8").splitlines()
    assert {float(line.split(",")[0]) for line in lines[1:]} == {4.0, 5.0, 6.0, 7.0, 8.0}
    assert "were not run" not in (out / "frontier.html").read_text(encoding="utf-8")


def test_ctrl_c_in_a_refresh_sweep_says_to_resume_without_refresh(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    # --refresh ignores the store, so "run the same command with --force to resume" would start over: the hint
    # says to drop --refresh, and that command reuses the budget the refresh run finished.
    original = ctrl_c_when_the_first_task_is_done(monkeypatch)
    out = tmp_path / "frontier"
    argv = frontier_in_process(config, "4:5:1", "1", out)
    assert main([*argv, "--refresh", "--quiet"]) == INTERRUPTED
    captured = capsys.readouterr()
    assert (f"interrupted: 1 of 2 budgets finished (kept in {out / 'store.sqlite'}, and written to {out}); run the "
            "same command with --force and without --refresh to resume") in captured.err
    monkeypatch.setattr(pipeplan.cli._TaskProgress, "__call__", original)
    assert main([*argv, "--force", "--quiet"]) == 0
    assert "1 of 2 results came from the store" in capsys.readouterr().out


def test_ctrl_c_during_a_budgets_solve_in_process_leaves_that_budget_out_of_the_store(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    # With --out and one job, each budget's solve runs in this process. A Ctrl-C during the first one stops that
    # search (not only the sweep after it); the answer it had is not the time limit's, so it is neither stored nor
    # shown, and the same command again solves both budgets in full.
    real_solve = pipeplan.frontier.solve_checked
    monkeypatch.setattr(pipeplan.frontier, "solve_checked", ctrl_c_on_first_report(real_solve))
    out = tmp_path / "frontier"
    argv = frontier_in_process(config, "5:6:1", "2", out)
    code = main(argv)
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert "0 of 2 results came from the store" in captured.out and "0 ran, 2 did not (stopped)" in captured.out
    assert "interrupted: 0 of 2 budgets finished; run the same command again to resume" in captured.err
    assert "┏" not in captured.out and "over the budget" not in captured.out  # no empty table and its footnote
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    monkeypatch.setattr(pipeplan.frontier, "solve_checked", real_solve)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "0 of 2 results came from the store" in captured.out  # the cut-short solve was not kept
    lines = (out / "frontier.csv").read_text(encoding="utf-8").splitlines()
    assert {float(line.split(",")[0]) for line in lines[1:]} == {5.0, 6.0}


def test_a_ctrl_c_after_the_search_ended_says_the_answer_is_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str
) -> None:
    # The Ctrl-C comes once the comparison has its answer (as if while the other layouts were compared): the answer
    # is not marked interrupted, and the last line says it is complete instead of "stopped early".
    monkeypatch.setattr(pipeplan.cli, "compare", ctrl_c_after(pipeplan.cli.compare))
    code = main(["solve", config, "--time-limit", "1", "--format", "json", "--quiet"])
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert json.loads(captured.out)["interrupted"] is False
    assert "interrupted after the search had finished: the results above are complete" in captured.err
    assert "stopped early" not in captured.err


def test_the_progress_line_says_what_solve_does_before_and_after_the_search(monkeypatch: pytest.MonkeyPatch,
                                                                             config: str) -> None:
    # On a large pipeline the named schedules' replays before the search and on the other layouts after it each
    # take longer than the search's time limit; the line said "solving" all along.
    real = pipeplan.cli.compare
    seen: list[tuple[str, str]] = []

    def watching(problem: Any, settings: Any, *, progress: Any, stop: Any, phase: Any) -> Any:
        def heard(step: str) -> None:
            phase(step)
            seen.append((step, progress.__rich__()))

        return real(problem, settings, progress=progress, stop=stop, phase=heard)

    monkeypatch.setattr(pipeplan.cli, "compare", watching)
    assert main(["solve", config, "--time-limit", "1", "--format", "json"]) == 0
    assert [step for step, _ in seen] == ["named", "search", "layouts"]
    assert seen[0][1] == "replaying the named schedules ..."
    assert seen[1][1].startswith("solving: ")
    assert seen[2][1] == "replaying the named schedules on the other layouts ..."


def test_a_ctrl_c_while_the_other_layouts_are_compared_cuts_that_comparison_short(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str
) -> None:
    # The search is over; a Ctrl-C while the named schedules are replayed on the other layouts (a minute at the size
    # limit) says at once that it stops that comparison rather than the search, the schedules not replayed yet are
    # left out, and the last line says what the results lack.
    real = pipeplan.planner.replay_named
    replayed: list[int] = []

    def ctrl_c_then_replay(problem: Any, fitting_only: bool = False, stop: Any = None) -> Any:
        if fitting_only and len(replayed) == 1:  # the first other layout (the config's own came first)
            os.kill(os.getpid(), signal.SIGINT)
        found = real(problem, fitting_only, stop)
        replayed.append(len(found[0]))
        return found

    monkeypatch.setattr(pipeplan.planner, "replay_named", ctrl_c_then_replay)
    code = main(["solve", config, "--time-limit", "1", "--format", "json", "--quiet"])
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert replayed[0] > 0 and replayed[1:] == [0]  # the config's layout in full, then nothing after the Ctrl-C
    summary = json.loads(captured.out)
    assert summary["interrupted"] is False and summary["other_layouts"] == []
    assert "pipeplan: interrupted: the search is over: stopping the comparison with the other layouts" in captured.err
    assert captured.err.strip().splitlines()[-1] == (
        "pipeplan: interrupted after the search had finished: the results above are complete but for the other "
        "layouts, whose comparison it cut short")


def test_a_ctrl_c_while_the_answer_is_shown_says_the_folder_is_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    # Once the folder was written, a Ctrl-C while the table was printed ended in a bare "pipeplan: interrupted",
    # the same words as one that dropped the folder: now the table is finished and the last line says all is whole.
    import pipeplan.report.tables

    monkeypatch.setattr(pipeplan.report.tables, "comparison_table",
                        ctrl_c_after(pipeplan.report.tables.comparison_table))
    out = tmp_path / "out"
    code = main(["solve", config, "--time-limit", "1", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert f"pipeplan: interrupted: the search is over and {out} written: showing its answer" in captured.err
    assert captured.err.strip().splitlines()[-1] == ("pipeplan: interrupted after the search had finished: the "
                                                     "results above are complete")
    assert "optimizer: " in captured.out and f"wrote {out}/summary.json" in captured.out
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["interrupted"] is False


def test_a_ctrl_c_while_a_sweep_writes_its_folder_says_what_was_left(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, tmp_path: Path
) -> None:
    # Every budget had finished; the Ctrl-C came while the folder was written. It said "stopping the sweep;
    # finished tasks are kept", then "nothing was written there" beside the store the folder keeps.
    import pipeplan.report.figures

    real_save = pipeplan.report.figures.save
    monkeypatch.setattr(pipeplan.report.figures, "save", ctrl_c_after(real_save))
    out = tmp_path / "frontier"
    code = main(frontier_in_process(config, "5:5:1", "1", out))
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    assert [line for line in captured.err.splitlines() if line.startswith("pipeplan:")] == [
        f"pipeplan: interrupted while writing {out}: its results were not written; run the command again to write "
        "them"]
    assert [p.name for p in out.iterdir()] == ["store.sqlite"]
    monkeypatch.setattr(pipeplan.report.figures, "save", real_save)
    assert main(frontier_in_process(config, "5:5:1", "1", out)) == 0  # the same command writes it from the store
    assert "1 of 1 results came from the store" in capsys.readouterr().out


def test_a_stop_request_sent_to_another_process_arrives_fresh() -> None:
    """A sweep's task carries the stop request; pickled for a worker process it is a new, unrequested one (the
    parent ends its workers itself), and a requested one stays requested in this process."""
    stop = StopRequest()
    stop.request()
    copy = pickle.loads(pickle.dumps(stop))
    assert isinstance(copy, StopRequest) and not copy.requested and stop.requested


@pytest.mark.parametrize("during", [True, False], ids=["during-a-solve", "between-budgets"])
def test_ctrl_c_in_an_in_process_sweep_names_the_budget_cut_short_and_those_not_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: str, during: bool
) -> None:
    # Without a store and with one job, a Ctrl-C ends the budget being solved with its best schedule so far and
    # leaves the larger budgets out. That row is marked, and the last line names the budgets never run (it used
    # to say only that "the results above are the best found by then"). A Ctrl-C once a budget's solve has
    # returned cuts nothing short: no row is marked.
    real_solve = pipeplan.frontier.solve_checked
    monkeypatch.setattr(pipeplan.frontier, "solve_checked", ctrl_c_on_first_report(real_solve) if during else
                        ctrl_c_after(real_solve))
    code = main(["frontier", config, "--budgets", "5:7:1", "--time-limit", "3", "--jobs", "1", "--quiet"])
    captured = capsys.readouterr()
    assert code == INTERRUPTED
    marked = "budget 5: stopped early (Ctrl-C): the best schedule found by then, not proven optimal"
    assert (marked in captured.out) == during
    stopped = ("the sweep stopped at budget 5 (its row is the best found by then)" if during else
               "the sweep stopped after budget 5 had finished (every row above is whole)")
    assert captured.err.strip().splitlines()[-1] == (
        f"pipeplan: interrupted: {stopped}; 2 of 3 budgets were not run (6, 7); with --store FILE a sweep keeps "
        "every budget it finishes and the same command again runs only the rest")


def test_a_sweeps_first_ctrl_c_says_kept_only_when_there_is_a_store(tmp_path: Path) -> None:
    # A sweep of worker processes (or on Ray) without --out or --store keeps nothing: its first Ctrl-C said
    # "finished tasks are kept", and the last line then that none was stored.
    from pipeplan.cli import _sweep_stopping

    assert _sweep_stopping(None, None) == "stopping the sweep; finished tasks are shown"
    assert _sweep_stopping(tmp_path / "out", None).endswith("finished tasks are kept")
    assert _sweep_stopping(None, tmp_path / "store.sqlite").endswith("finished tasks are kept")


@pytest.mark.parametrize("status", [INTERRUPTED, TERMINATED])
def test_an_abort_ends_the_process_even_when_the_shutdown_would_wait_for_ever(tmp_path: Path, status: int) -> None:
    """After Ctrl-C or SIGTERM has been answered, the interpreter's shutdown gets a few seconds, then the process
    ends with the abort's status and says nothing more. A signal that interrupts a worker pool while it holds a
    lock (a new user's trial: about one SIGTERM in 60 during `size --jobs 2`) left the shutdown joining that pool's
    thread for ever; here a thread that never ends stands in for it, and an exit hook that meets a closed pipe for
    the traceback it printed otherwise."""
    script = tmp_path / "abort.py"
    script.write_text("import atexit, threading\n"
                      "from pipeplan import entry\n"
                      "entry.EXIT_GRACE_S = 0.5\n"
                      "def closed() -> None:\n"
                      "    raise OSError(9, 'Bad file descriptor')\n"
                      "atexit.register(closed)\n"
                      f"if {status} == 143:  # the shutdown joins this thread, which never ends\n"
                      "    threading.Thread(target=threading.Event().wait).start()\n"
                      f"entry.aborted({status})\n", encoding="utf-8")
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == status and done.stderr == "" and done.stdout == "", done.stderr
    assert time.monotonic() - started < 30
