"""Writing result folders under stress: two runs racing for one folder, a folder appearing mid-write, signals.

The races are real: threads or processes meet at a barrier inside the write, so both pass the early check and
both try to move their folder into place. The signal tests kill a real ``pipeplan solve`` process while it is
writing (its report rendering made to wait, so the kill always lands mid-write).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from bad_configs import CONFIGS

import pipeplan.cli
import pipeplan.report.files
import pipeplan.report.html
from pipeplan import ConfigError
from pipeplan.cli import USER_ERROR, main
from pipeplan.report.files import read_results, rename_no_replace, write_folder

ROOT = CONFIGS.parent.parent
TINY = str(CONFIGS / "good-per-stage-split.yaml")
SOLVE = ["solve", TINY, "--time-limit", "2", "--workers", "1", "--quiet"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_rename_no_replace_refuses_every_existing_target(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (tmp_path / "empty").mkdir()  # a plain rename would silently replace an empty folder
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x", encoding="utf-8")
    (tmp_path / "file").write_text("x", encoding="utf-8")
    for target in ("empty", "full", "file"):
        with pytest.raises(FileExistsError):
            rename_no_replace(source, tmp_path / target)
    assert names(tmp_path) == ["empty", "file", "full", "source"]
    rename_no_replace(source, tmp_path / "free")
    assert names(tmp_path) == ["empty", "file", "free", "full"]


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_two_threads_racing_for_one_folder_exactly_one_wins(tmp_path: Path, force: bool) -> None:
    out = tmp_path / "run"
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}  # keyed by writer: "ok" or the error message

    def writer(name: str) -> None:
        def fill(folder: Path) -> None:
            (folder / "summary.json").write_text(json.dumps({"writer": name}), encoding="utf-8")
            barrier.wait(timeout=30)  # both have passed the early check and are about to move into place

        try:
            write_folder(out, force, fill)
            outcomes[name] = "ok"
        except ConfigError as exc:
            outcomes[name] = str(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if force:  # --force: each may replace the other's result folder; both succeed, the last one stays
        assert outcomes == {"a": "ok", "b": "ok"}
    else:
        winners = [name for name, outcome in outcomes.items() if outcome == "ok"]
        assert len(winners) == 1, outcomes
        (loser,) = set(outcomes) - set(winners)
        assert "already exists" in outcomes[loser] and "pass --force" in outcomes[loser]
        assert json.loads((out / "summary.json").read_text(encoding="utf-8")) == {"writer": winners[0]}
    assert names(tmp_path) == ["run"]  # no staging or trash folder left by either
    assert names(out) == ["summary.json"]


# A `pipeplan` process whose report rendering, the last step of the write, signals that it has started
# (by creating argv[1]) and then waits until argv[2] exists. The rest of argv is pipeplan's.
WAITING_CHILD = """
import sys, time
from pathlib import Path
import pipeplan.report.html as html
started, go = Path(sys.argv[1]), Path(sys.argv[2])
render = html.render_folder
def waiting(folder):
    page = render(folder)
    # Written aside and renamed: the parent polls for the file and would read it empty mid-write.
    partial = started.with_name(started.name + ".partial")
    partial.write_text(str(folder), encoding="utf-8")
    partial.replace(started)
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return page
html.render_folder = waiting
from pipeplan.cli import main
sys.exit(main(sys.argv[3:]))
"""


def start_child(tmp_path: Path, tag: str, argv: list[str]) -> tuple[subprocess.Popen[str], Path]:
    started = tmp_path / f"started-{tag}"
    proc = subprocess.Popen([sys.executable, "-c", WAITING_CHILD, str(started), str(tmp_path / "go"), *argv],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, started


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_solve_processes_racing_for_one_out_exactly_one_wins(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = work / "run"
    children = [start_child(tmp_path, tag, [*SOLVE, "--out", str(out)]) for tag in ("a", "b")]
    for proc, started in children:
        wait_for(started, proc)  # both are writing: both passed the early "does DIR exist" check
    (tmp_path / "go").touch()
    results = [proc.communicate(timeout=120) + (proc.returncode,) for proc, _ in children]
    codes = sorted(code for _, _, code in results)
    assert codes == [0, USER_ERROR], results
    loser_err = next(err for _, err, code in results if code == USER_ERROR)
    assert f"output folder '{out}' already exists" in loser_err and "Traceback" not in loser_err
    assert loser_err.count("\n") == 1
    assert names(work) == ["run"]
    read_results(out)  # the winner's folder is complete and consistent


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("empty", [False, True], ids=["with-files", "empty"])
def test_a_folder_created_at_out_while_writing_is_never_removed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, force: bool, empty: bool
) -> None:
    out = tmp_path / "run"
    render = pipeplan.report.html.render_folder

    def someone_else_creates_out(folder: Path | str) -> str:
        out.mkdir()
        if not empty:
            (out / "mine.txt").write_text("keep me", encoding="utf-8")
        return render(folder)

    monkeypatch.setattr(pipeplan.report.html, "render_folder", someone_else_creates_out)
    code, stdout, err = run(capsys, *SOLVE, "--out", str(out), *(["--force"] if force else []))
    assert code == USER_ERROR
    assert f"output folder '{out}'" in err and "Traceback" not in err
    assert stdout == ""
    assert names(tmp_path) == ["run"]
    assert names(out) == ([] if empty else ["mine.txt"])


def test_force_never_replaces_a_foreign_folder_swapped_in_while_writing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DIR is an earlier result folder when the run starts (so --force is accepted), then becomes someone else's."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}", encoding="utf-8")
    render = pipeplan.report.html.render_folder

    def swap(folder: Path | str) -> str:
        (out / "summary.json").unlink()
        (out / "mine.txt").write_text("keep me", encoding="utf-8")
        return render(folder)

    monkeypatch.setattr(pipeplan.report.html, "render_folder", swap)
    code, _, err = run(capsys, *SOLVE, "--out", str(out), "--force")
    assert code == USER_ERROR
    assert "is not a pipeplan result folder" in err and "Traceback" not in err
    assert names(tmp_path) == ["run"]
    assert names(out) == ["mine.txt"]
    assert (out / "mine.txt").read_text(encoding="utf-8") == "keep me"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("existing", [False, True], ids=["new", "force-over-earlier"])
def test_a_signal_while_writing_leaves_the_folder_complete_or_absent(
    tmp_path: Path, signum: int, existing: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out = work / "run"
    # The seed runs CP-SAT for the full second, which installs and removes its own SIGINT handler.
    argv = ["solve", str(ROOT / "models" / "seed-8x64.yaml"), "--time-limit", "1", "--quiet", "--out", str(out)]
    if existing:
        out.mkdir()
        (out / "summary.json").write_text("{}", encoding="utf-8")  # an earlier result, replaced with --force
        argv.append("--force")
    proc, started = start_child(tmp_path, "a", argv)
    wait_for(started, proc)
    staging = Path(started.read_text(encoding="utf-8"))
    assert staging.parent == work and staging.name.startswith(".run.")  # the kill lands mid-write
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    if signum == signal.SIGINT:
        assert proc.returncode == 130, err
        # It used to say only "pipeplan: interrupted", as after a folder written in full.
        assert err.strip().splitlines()[-1] == (f"pipeplan: interrupted while writing {out}: its results were not "
                                                "written; run the command again to write them")
        assert "Traceback" not in err
    else:
        assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), err  # killed by it, after cleaning up
    assert names(work) == (["run"] if existing else [])  # no hidden .run.xxxx folder
    if existing:
        assert names(out) == ["summary.json"]
        assert (out / "summary.json").read_text(encoding="utf-8") == "{}"


def test_signal_handlers_are_restored_after_a_write(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    code, _, err = run(capsys, *SOLVE, "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert {signum: signal.getsignal(signum) for signum in before} == before


def _no_solve(*args: object, **kwargs: object) -> None:
    raise AssertionError("the output folder must be checked before solving")


@pytest.mark.parametrize("command", ["solve", "frontier"])
def test_out_under_a_file_is_refused_before_solving(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setattr(pipeplan.cli, "compare", _no_solve)
    monkeypatch.setattr(pipeplan.cli, "frontier", _no_solve)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file", encoding="utf-8")
    out = blocker / "sub" / "run"
    argv = [command, TINY, "--quiet", "--out", str(out)] + (["--budgets", "5:6:1"] if command == "frontier" else [])
    code, stdout, err = run(capsys, *argv)
    assert code == USER_ERROR
    assert f"cannot create output folder '{out}': '{blocker}' is a file, not a folder" in err
    assert "pick an --out" in err and err.count("\n") == 1 and "Traceback" not in err
    assert stdout == "" and names(tmp_path) == ["notes.txt"]


@pytest.mark.skipif(os.access("/sys", os.W_OK) and not Path("/sys/kernel").is_dir(), reason="no sysfs")
def test_out_in_a_folder_that_cannot_be_written_is_refused_before_solving(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sysfs refuses new folders even to root, so this runs where the tests run as root."""
    monkeypatch.setattr(pipeplan.cli, "compare", _no_solve)
    out = Path("/sys/pipeplan-test/run")
    code, _, err = run(capsys, "solve", TINY, "--quiet", "--out", str(out))
    assert code == USER_ERROR
    assert f"cannot create output folder '{out}': cannot write in '/sys'" in err
    assert "pick an --out in a folder you can write to" in err and "Traceback" not in err


def test_missing_parents_of_out_are_created(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "run"
    code, _, err = run(capsys, *SOLVE, "--out", str(out))
    assert code == 0, err
    assert names(out) == ["metrics.csv", "report.html", "schedules", "summary.json"]
    assert names(out.parent) == ["run"]


def _project(out: Path) -> None:
    """A user's folder that happens to hold a file named like one pipeplan writes."""
    (out / "src").mkdir(parents=True)
    (out / "summary.json").write_text("{}", encoding="utf-8")
    (out / "src" / "main.c").write_text("int main;", encoding="utf-8")


def _fake_store(out: Path) -> None:
    out.mkdir()
    (out / "store.sqlite").write_text("not a database", encoding="utf-8")


def _solve_folder_with_notes(out: Path) -> None:
    """A real result folder with a note of the user's added beside it."""
    assert main([*SOLVE, "--out", str(out)]) == 0
    (out / "notes.txt").write_text("mine", encoding="utf-8")


def _solve_folder_with_a_json_note_in_schedules(out: Path) -> None:
    """A real result folder with a note of the user's in schedules/ named like a schedule's file (a new user's
    trial: any .json there was taken as pipeplan's, and --force deleted it)."""
    assert main([*SOLVE, "--out", str(out)]) == 0
    (out / "schedules" / "notes.json").write_text("my hand-tuned notes", encoding="utf-8")


def _solve_folder_with_folders_named_like_a_browsers_files(out: Path) -> None:
    """A real result folder beside which the user keeps folders whose names a file browser uses for its files."""
    assert main([*SOLVE, "--out", str(out)]) == 0
    for name in ("._my-notes", "Thumbs.db"):
        (out / name).mkdir()
        (out / name / "data.txt").write_text("precious", encoding="utf-8")


@pytest.mark.parametrize(("make", "message"), [
    (_project, "holds what pipeplan does not write (src)"),
    # It said "(no summary.json or frontier.csv or sweep.csv or store.sqlite)" of a folder holding store.sqlite.
    (_fake_store, "is not a pipeplan result folder: its store.sqlite is not an SQLite file, and it holds no "
                  "summary.json"),
    (_solve_folder_with_notes, "holds what pipeplan does not write (notes.txt)"),
    (_solve_folder_with_a_json_note_in_schedules, "holds what pipeplan does not write (schedules/notes.json)"),
    (_solve_folder_with_folders_named_like_a_browsers_files, "holds what pipeplan does not write (._my-notes, "
     "Thumbs.db)"),
], ids=["project", "text-named-store", "result-with-notes", "json-note-in-schedules",
        "folders-named-like-browser-files"])
def test_force_never_replaces_a_folder_holding_what_pipeplan_does_not_write(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, make: object, message: str) -> None:
    # A file named summary.json or store.sqlite used to be proof enough: --force deleted the user's src/main.c.
    out = tmp_path / "proj"
    make(out)  # type: ignore[operator]
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    capsys.readouterr()
    code, _, err = run(capsys, *SOLVE, "--out", str(out), "--force")
    assert code == USER_ERROR and message in err and err.count("\n") == 1, err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert names(tmp_path) == ["proj"]


def test_a_full_disk_while_writing_names_the_folder_and_the_fix(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The message was only "[Errno 28] No space left on device". (The write fails here by a stand-in: filling a
    # real disk needs a mount.)
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pipeplan.report.files, "metrics_frame", full)
    out = tmp_path / "run"
    code, _, err = run(capsys, *SOLVE, "--out", str(out))
    assert code == USER_ERROR and err.count("\n") == 1, err
    assert f"cannot write {str(out)!r} (No space left on device); nothing was written: free some space" in err
    assert names(tmp_path) == []


def test_force_replaces_a_result_folder_holding_what_pipeplan_writes_into_it(capsys: pytest.CaptureFixture[str],
                                                                            tmp_path: Path) -> None:
    # Its torch exports (pipeplan export DIR writes DIR/NAME.torch.csv) and the temporary file of a write into it
    # that was killed are pipeplan's own.
    out = tmp_path / "run"
    assert main([*SOLVE, "--out", str(out)]) == 0
    assert main(["export", str(out)]) == 0
    (out / ".report.html.x1y2z3").write_text("half", encoding="utf-8")
    # So are the files a file browser leaves in a folder it showed (an ._NAME is a macOS copy's companion file).
    for browsed in (out / ".DS_Store", out / "Thumbs.db", out / "._summary.json", out / "schedules" / ".DS_Store"):
        browsed.write_bytes(b"\0\0\0\1Bud1")
    assert any(name.endswith(".torch.csv") for name in names(out))
    capsys.readouterr()
    code, _, err = run(capsys, *SOLVE, "--out", str(out), "--force")
    assert code == 0, err
    assert not any(name.endswith(".torch.csv") or name.startswith(".") for name in names(out))


def test_out_as_a_link_to_nothing_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A dangling link at --out was called "a file, not a folder" (a new user's trial)."""
    monkeypatch.setattr(pipeplan.cli, "compare", _no_solve)
    out = tmp_path / "run"
    out.symlink_to(tmp_path / "nowhere")
    code, stdout, err = run(capsys, "solve", TINY, "--quiet", "--out", str(out), "--force")
    assert code == USER_ERROR and stdout == "" and err.count("\n") == 1, err
    assert f"{str(out)!r} is a symbolic link to {str(tmp_path / 'nowhere')!r}, which does not exist; remove the " \
           "link or give another folder name" in err
    assert out.is_symlink() and names(tmp_path) == ["run"]
