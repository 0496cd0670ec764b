"""Result folders: ``summary.json``, ``metrics.csv`` and one ``schedules/<name>.json`` per schedule.

A folder is written atomically: everything goes to a temporary sibling that is renamed into place at the end,
in a step that never replaces what is there (:func:`rename_no_replace`), so a failed or interrupted run leaves
nothing half-written, of two runs writing one folder exactly one wins, and an existing folder is replaced only
when asked and only if pipeplan wrote it (:func:`write_folder`).

A folder is also self-describing: ``summary.json`` holds the effective config (key ``config``, in the YAML
file's layout with every per-stage value spelled out), so :func:`read_results` can rebuild the problem and
every replayed schedule from the folder alone, e.g. to re-render ``report.html``.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeplan.bounds import prove
from pipeplan.config import Config, SolverSettings, Units, config_from_dict
from pipeplan.frontier import FrontierRow
from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.problem import ConfigError, Op, OpKind, Problem, python_reason, shown
from pipeplan.reading import RESULT_FILE_BYTES, read_text
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.simulate import Timeline, simulate
from pipeplan.store import SQLITE_HEADER

# Columns of metrics.csv, in order; list-valued fields are written as space-separated numbers.
CSV_COLUMNS = (
    "schedule", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory",
    "peak_memory_per_device", "busy_per_device", "flushes", "status", "lower_bound", "gap", "solve_time_s",
)


# Columns of frontier.csv, in order: one row per (budget, schedule).
FRONTIER_COLUMNS = (
    "budget", "schedule", "feasible", "objective", "makespan", "stage_span", "utilization", "peak_memory",
    "status", "lower_bound", "gap", "solve_time_s", "source", "note",
)


def frontier_frame(rows: Sequence[FrontierRow]) -> pd.DataFrame:
    """A frontier sweep as a table with :data:`FRONTIER_COLUMNS` (empty cells where a value does not apply)."""
    return pd.DataFrame([row.to_dict() for row in rows], columns=list(FRONTIER_COLUMNS))


def timeline_records(timeline: Timeline) -> list[dict[str, Any]]:
    """Every op of a replayed schedule as a JSON-ready record, device by device in run order."""
    return [
        {
            "device": device,
            "stage": op.stage,
            "chunk": op.chunk,
            "microbatch": op.microbatch,
            "kind": op.kind.value,
            "start": start,
            "end": end,
        }
        for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end)
    ]


# How result files write floats: twelve significant digits, so that sums of costs read 123.26, not the
# 123.26000000000005 of their binary floats (a replay's check forgives far more: _REPLAY_TOLERANCE).
CSV_FLOAT_FORMAT = "%.12g"


def summary_json(summary: dict[str, Any]) -> str:
    """A comparison's summary as ``solve --format json`` prints it and summary.json holds it: its config as given,
    the rest at twelve significant digits (:func:`printed_json`)."""
    return printed_json(summary, exact=("config",))


def printed_json(record: dict[str, Any], exact: tuple[str, ...] = (), nan_as_null: bool = False) -> str:
    """``record`` as indented JSON (``--format json``, summary.json), its floats at the twelve significant digits
    of the result CSVs (:data:`CSV_FLOAT_FORMAT`): 6.7, not the 6.699999999999999 of a sum of binary floats. The
    top-level keys in ``exact`` are written as they are (a config, which saved as YAML reproduces the run). numpy
    numbers (a pandas frame's) are written as numbers; with ``nan_as_null`` NaN, a frame's empty cell, is null."""

    def rounded(value: Any) -> Any:
        if hasattr(value, "item") and not isinstance(value, (str, bytes, dict, list, tuple)):  # a numpy number
            value = value.item()
        if isinstance(value, float):
            if nan_as_null and math.isnan(value):
                return None
            return float(CSV_FLOAT_FORMAT % value)  # inf and nan read back as themselves
        if isinstance(value, dict):
            return {key: rounded(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [rounded(item) for item in value]
        return value

    return json.dumps({key: value if key in exact else rounded(value) for key, value in record.items()}, indent=2)


def metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows of a comparison as a table with :data:`CSV_COLUMNS` (missing fields left empty)."""
    frame = pd.DataFrame(rows)
    for column in CSV_COLUMNS:
        if column not in frame:
            frame[column] = None
    frame = frame[list(CSV_COLUMNS)].copy()
    for column in ("peak_memory_per_device", "busy_per_device"):
        frame[column] = frame[column].map(lambda values: " ".join(CSV_FLOAT_FORMAT % v for v in values))
    return frame


def _umask() -> int:
    """The process's file creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A folder holding one of these is a pipeplan result folder, which --force may replace (a sweep's result store
# included: a sweep creates its folder to hold it while it runs).
RESULT_MARKERS = ("summary.json", "frontier.csv", "sweep.csv", "store.sqlite")
# The sweeps' result files (of those markers) -> (the command that writes it, the page beside it).
_SWEEP_RESULTS = {"sweep.csv": ("size", "report.html"), "frontier.csv": ("frontier", "frontier.html")}
# What a sweep's folder holds while the sweep runs: its store and SQLite's files beside it.
_STORE_FILES = frozenset({"store.sqlite", "store.sqlite-wal", "store.sqlite-shm", "store.sqlite-journal"})


def is_unfinished_sweep(path: Path) -> bool:
    """True when ``path`` is a folder holding a sweep's store and nothing else: a sweep that was stopped or killed
    before it wrote its results. Running the sweep again resumes it (and may replace the folder)."""
    if not path.is_dir() or path.is_symlink():
        return False
    entries = {entry.name for entry in path.iterdir()}
    return "store.sqlite" in entries and entries <= _STORE_FILES


# Every name pipeplan writes at the top of a result folder (solve's, frontier's, size's, a sweep's store, and the
# figures scripts/make_figures.py draws beside solve's files).
_RESULT_ENTRIES = frozenset({"summary.json", "metrics.csv", "report.html", "schedules", "frontier.csv",
                             "frontier.html", "frontier.png", "sweep.csv", "best.yaml", "schedules.html",
                             "schedules.png", "utilization.html", "utilization.png", "report.png"}) | _STORE_FILES


# What a file browser leaves in any folder it shows (macOS, Windows), and macOS's "._NAME" companions of files
# on other file systems: a result folder that was looked at is still one.
_BROWSER_FILES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


def _browsers(entry: Path) -> bool:
    """Whether ``entry`` is a file a file browser leaves (:data:`_BROWSER_FILES`, or ``._NAME``): a regular file,
    so that a folder of the user's with such a name is never taken for one."""
    named = entry.name in _BROWSER_FILES or entry.name.startswith("._")
    return named and entry.is_file() and not entry.is_symlink()


def _ours(name: str) -> bool:
    """Whether pipeplan writes an entry called ``name`` at the top of a result folder: one of
    :data:`_RESULT_ENTRIES`, a torch CSV ``pipeplan export`` wrote there, or the temporary file of a write into it
    that was killed (``.report.html.XXXX``)."""
    if name in _RESULT_ENTRIES or name.endswith(".torch.csv"):
        return True
    return name.startswith(".") and any(name.startswith(f".{entry}.") for entry in _RESULT_ENTRIES)


def foreign_entries(path: Path) -> list[str]:
    """The entries of the folder ``path`` that pipeplan does not write there (``schedules`` holds only .json
    files), sorted; at most the first 10,000 looked at."""
    foreign = [entry.name for _, entry in zip(range(10_000), path.iterdir())
               if not (_ours(entry.name) or _browsers(entry))]
    schedules = path / "schedules"
    if schedules.is_dir() and not schedules.is_symlink():
        listed = _listed_schedules(path)
        foreign += [f"schedules/{entry.name}" for _, entry in zip(range(10_000), schedules.iterdir())
                    if not _browsers(entry) and (entry.suffix != ".json" or entry.is_symlink() or not entry.is_file()
                                                 or (listed is not None and entry.stem not in listed))]
    elif os.path.lexists(schedules):
        foreign.append("schedules")
    return sorted(foreign)


def _listed_schedules(path: Path) -> set[str] | None:
    """The schedules the folder's summary.json lists (solve writes one schedules/NAME.json for each, and no
    other), or None when it cannot be read so: any .json file in schedules/ is then taken as solve's."""
    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        return {str(row["schedule"]) for row in summary["schedules"]}
    except (OSError, ValueError, TypeError, KeyError):
        return None


def is_result_folder(path: Path) -> bool:
    """True when ``path`` is a folder pipeplan wrote: it holds one of :data:`RESULT_MARKERS` and nothing
    pipeplan does not write (a file of one of those names beside a user's own files is not proof)."""
    return path.is_dir() and _has_marker(path) and not foreign_entries(path)


def _has_marker(path: Path) -> bool:
    """Whether the folder ``path`` holds one of :data:`RESULT_MARKERS` as a regular file (a store as an SQLite
    file: any file can be named store.sqlite)."""
    for marker in RESULT_MARKERS:
        file = path / marker
        if file.is_file() and not file.is_symlink():
            if marker != "store.sqlite":
                return True
            try:
                with file.open("rb") as handle:
                    if handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER:
                        return True
            except OSError:
                pass
    return False


def check_replaceable(out: Path, force: bool) -> None:
    """Raise :class:`ConfigError` unless ``out`` is free, or is a pipeplan result folder and ``force`` is set.

    --force never deletes a folder that pipeplan did not write (e.g. ``--out . --force`` or ``--out results``).
    This is the early check that spares a long solve; :func:`write_folder` checks again when it moves the
    result into place, atomically.
    """
    if not os.path.lexists(out):
        return
    if out.is_symlink() and not out.exists():
        raise ConfigError(_dangling(out, "folder"))
    if not out.is_dir():
        raise ConfigError(f"output path {str(out)!r} is a file, not a folder; pick another --out")
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"output folder {str(out)!r} holds the current folder, which is never replaced; pick a "
                          "new folder or run from outside it")
    if out.is_symlink():  # the result replaces a folder whole: the link would go, not what it points to
        raise ConfigError(f"output folder {str(out)!r} is a symbolic link; give the folder it points to "
                          f"({os.path.realpath(out)!r}) or another name")
    if not force:
        raise ConfigError(f"output folder {str(out)!r} already exists; pass --force to replace it or pick another")
    if not is_result_folder(out):
        raise ConfigError(_not_ours(out))


def _dangling(path: Path, what: str) -> str:
    """The message for an output ``path`` that is a symbolic link to nothing (``what``: "file" or "folder")."""
    return (f"{str(path)!r} is a symbolic link to {os.readlink(path)!r}, which does not exist; remove the link or "
            f"give another {what} name")


def _not_ours(out: Path) -> str:
    if out.is_dir() and _has_marker(out):
        foreign = foreign_entries(out)
        if foreign:
            listed = ", ".join(shown(name, 40, quote=False) for name in foreign[:5])
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            return (f"output folder {str(out)!r} is not a pipeplan result folder: it holds what pipeplan does not "
                    f"write ({listed}{more}); --force only replaces folders pipeplan wrote, pick a new folder")
    if (out / "store.sqlite").is_file():  # a marker by name only: any file can be called that
        return (f"output folder {str(out)!r} is not a pipeplan result folder: its store.sqlite is not an SQLite "
                "file, and it holds no summary.json, frontier.csv or sweep.csv; --force only replaces folders "
                "pipeplan wrote, pick a new folder")
    return (f"output folder {str(out)!r} is not a pipeplan result folder (no {' or '.join(RESULT_MARKERS)}); "
            "--force only replaces those, pick a new folder")


def check_creatable(out: Path) -> None:
    """Raise :class:`ConfigError` unless the folder ``out`` (and any missing parents) can be created here.

    Tries it: a probe folder is made and removed in the nearest existing ancestor, where the first missing
    folder would go. Missing parents are created only when the result is written.
    """
    out = Path(out)
    ancestor = out.absolute().parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"cannot create output folder {str(out)!r}: {str(ancestor)!r} is a file, not a folder; "
                          "pick an --out that is not under a file")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".pipeplan-probe.", dir=ancestor))
    except OSError as exc:
        raise ConfigError(f"cannot create output folder {str(out)!r}: cannot write in {str(ancestor)!r} "
                          f"({exc.strerror}); pick an --out in a folder you can write to") from None


def check_output_folder(out: Path, force: bool) -> None:
    """Fail early, before a long solve, when ``out`` may not be replaced or cannot be created (see above)."""
    check_replaceable(out, force)
    check_creatable(out)


class WriteInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a result was being written; nothing was left behind.

    Raised only when the signal's own handler, called again after the cleanup, did not end the run itself.
    """

    def __init__(self, signum: int, path: Path) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name} while writing {path}")
        self.signum = signum
        self.path = path  # what was being written (nothing of it is left)


class _SignalGuard:
    """While active (in the main thread), SIGINT and SIGTERM abort the write so that its cleanup runs.

    The first signal raises :class:`WriteInterrupted`; once ``holding`` is set (the cleanup or the final moves
    are running), signals are only recorded so that nothing interrupts those. On exit the previous handlers
    are restored and a recorded signal is delivered to them: SIGTERM then ends the process as it would have
    (status 143 in a shell), SIGINT raises KeyboardInterrupt. Signals set to be ignored stay ignored.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, path: Path) -> None:
        self.path = path  # what is being written
        self.previous: dict[int, Any] = {}  # keyed by signal number: the handler to restore
        self.pending: int | None = None
        self.holding = False

    def _handle(self, signum: int, frame: object) -> None:
        if self.pending is None:
            self.pending = signum
        if not self.holding:
            self.holding = True
            raise WriteInterrupted(signum, self.path)

    def __enter__(self) -> _SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                previous = signal.getsignal(signum)
                if previous is None or previous == signal.SIG_IGN:
                    continue  # installed outside Python, or ignored on purpose: leave it alone
                self.previous[signum] = previous
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self.holding = True
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        if self.pending is not None:
            signal.raise_signal(self.pending)


# renameat2(2) flag: fail with EEXIST instead of replacing the target.
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _libc_renameat2() -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:
        return None


_RENAMEAT2 = _libc_renameat2() if sys.platform.startswith("linux") else None


def rename_no_replace(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` in one step that fails with FileExistsError if ``target`` exists.

    On Linux this is renameat2(RENAME_NOREPLACE), atomic even against other processes. Elsewhere, or on a
    file system without that flag, it checks first and then renames: a plain rename already refuses a target
    that is a file or a non-empty folder, so only an empty folder created in between could be replaced.
    """
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), str(target))
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
        raise


def _taken(out: Path) -> str:
    return (f"output folder {str(out)!r} already exists (something else created it while this run was writing); "
            "pass --force to replace it or pick another")


def _publish(staging: Path, out: Path, force: bool) -> None:
    """Move the finished ``staging`` folder to ``out``; with ``force``, replace a pipeplan result folder there.

    Never replaces anything in one step: an existing ``out`` is first moved aside (atomically, to a fresh
    hidden folder only this run knows), checked there to be a pipeplan result folder, and deleted only after
    the new folder is in place. Anything else is moved back untouched.
    """
    try:
        rename_no_replace(staging, out)
        return
    except FileExistsError:
        if not force:
            raise ConfigError(_taken(out)) from None
    trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=staging.parent))
    old = trash / out.name
    try:
        os.rename(out, old)
    except FileNotFoundError:  # removed meanwhile: nothing to replace
        trash.rmdir()
        try:
            rename_no_replace(staging, out)
        except FileExistsError:
            raise ConfigError(_taken(out)) from None
        return
    if not is_result_folder(old):
        try:
            rename_no_replace(old, out)
        except OSError:
            raise ConfigError(f"{_not_ours(out)}; it appeared while this run was writing and another folder "
                              f"took its place meanwhile, so it was kept at {str(old)!r}: move it back") from None
        trash.rmdir()
        raise ConfigError(_not_ours(out))
    try:
        rename_no_replace(staging, out)
    except FileExistsError:
        try:
            rename_no_replace(old, out)
        except OSError:
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.rmdir()
        raise ConfigError(_taken(out)) from None
    shutil.rmtree(trash, ignore_errors=True)


def write_folder(out: Path, force: bool, fill: Callable[[Path], None]) -> None:
    """Create ``out`` by calling ``fill`` on a temporary folder, then moving it into place.

    Raises :class:`ConfigError` if ``out`` exists and may not be replaced (:func:`check_replaceable`), now or
    when the result is moved into place (of two runs writing the same folder, exactly one wins), or if it
    cannot be created. Missing parent folders are created. Nothing is left behind on error, nor on SIGINT or
    SIGTERM while writing: ``out`` is then either complete or absent (see :class:`_SignalGuard`).
    """
    out = Path(out)
    check_output_folder(out, force)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the parent folders of {str(out)!r} ({exc.strerror}); pick another --out") \
            from None
    with _SignalGuard(out) as guard:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
        try:
            staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the result is an ordinary folder
            try:
                fill(staging)
            except OSError as exc:
                raise ConfigError(_cannot_write(out, exc)) from None
            guard.holding = True  # from here on a signal waits until the folder is in place or cleaned up
            _publish(staging, out, force)
        except BaseException:
            guard.holding = True
            shutil.rmtree(staging, ignore_errors=True)
            raise


def _cannot_write(target: Path, exc: OSError) -> str:
    """The message for an error while writing ``target``'s contents (nothing is left behind)."""
    fix = ("free some space or write to another disk" if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", 0))
           else "pick a place you can write to")
    return f"cannot write {str(target)!r} ({exc.strerror or exc}); nothing was written: {fix}"


def write_results(out: Path, summary: dict[str, Any], timelines: dict[str, Timeline], force: bool = False,
                  extra: Callable[[Path], None] | None = None) -> None:
    """Write a comparison's result folder: summary.json, metrics.csv, schedules/<name>.json (and ``extra``)."""

    def fill(folder: Path) -> None:
        (folder / "summary.json").write_text(summary_json(summary) + "\n", encoding="utf-8")
        metrics_frame(summary["schedules"]).to_csv(folder / "metrics.csv", index=False, float_format=CSV_FLOAT_FORMAT)
        (folder / "schedules").mkdir()
        for name, timeline in timelines.items():
            record = {"schedule": name, "ops": timeline_records(timeline)}
            (folder / "schedules" / f"{name}.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
        if extra is not None:
            extra(folder)

    write_folder(out, force, fill)


def _per_stage(values: tuple[float, ...], num_chunks: int) -> float | list[float]:
    """A per-stage field as the config file spells it: one number when one chunk and all alike, else the list.

    With chunks a single number would be split over the chunks again when read back, so the full list of
    ``num_stages * num_chunks`` values (one per model stage) is written instead.
    """
    if num_chunks == 1 and len(set(values)) == 1:
        return values[0]
    return list(values)


def config_record(name: str, problem: Problem, settings: SolverSettings, units: Units) -> dict[str, Any]:
    """The effective config as a JSON-ready mapping in the YAML file's layout (``config_from_dict`` reads it).

    Every value is the one the run used: per-stage costs and memory after expansion, the solver settings after
    command-line overrides. Saving it as YAML gives a config that reproduces the run.
    """
    v = problem.num_chunks
    budget = problem.budget
    return {
        "name": name,
        "pipeline": {"num_stages": problem.num_devices, "num_microbatches": problem.num_microbatches,
                     "num_chunks": v, "placement": problem.placement},
        "costs": {"forward": _per_stage(problem.forward, v),
                  "backward": _per_stage(problem.backward, v),
                  "backward_weight": _per_stage(problem.backward_weight, v),
                  "comm": _per_stage(problem.comm, v)},
        "memory": {"activation": _per_stage(problem.activation, v),
                   "weight_activation": _per_stage(problem.weight_activation, v),
                   **({} if budget is None else {"budget": _per_stage(budget, 1)})},
        "solver": asdict(settings),
        "units": asdict(units),
    }


@dataclass(frozen=True)
class Results:
    """A result folder read back: the summary as written, the config it records, and every replayed schedule."""

    summary: dict[str, Any]
    config: Config
    timelines: dict[str, Timeline]
    """Keyed by schedule name, in the order of ``summary["schedules"]``."""


def _read_json(path: Path, folder: Path) -> Any:
    if not path.exists() and not path.is_symlink():
        raise ConfigError(
            f"{str(folder)!r} has no {path.relative_to(folder)}; give a folder written by 'pipeplan solve --out'")
    text = read_text(path, "result file", RESULT_FILE_BYTES, larger="give a folder written by 'pipeplan solve "
                     "--out'")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (RecursionError, ValueError) as exc:  # nested too deep, or a whole number of thousands of digits
        raise ConfigError(f"{path} cannot be read ({python_reason(exc, 120)}); give a folder written by "
                          "'pipeplan solve --out'") from None


def _timeline_from_record(problem: Problem, name: str, flushes: int, record: Any, path: Path) -> Timeline:
    """Rebuild a replayed schedule from its ops file and check that replaying its orders gives the same times."""
    if not isinstance(record, dict) or not isinstance(record.get("ops"), list):
        raise ConfigError(f"{path} must hold an object with a list 'ops'")
    orders: list[list[Op]] = [[] for _ in range(problem.num_devices)]
    times: dict[Op, tuple[float, float]] = {}  # keyed by op: (start, end) as written
    try:
        for item in record["ops"]:
            op = Op(OpKind(item["kind"]), int(item["stage"]), int(item["microbatch"]), int(item["chunk"]))
            orders[int(item["device"])].append(op)
            times[op] = (float(item["start"]), float(item["end"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ConfigError(f"{path} has a malformed op record ({type(exc).__name__}: {exc}); each op needs "
                          "device, stage, chunk, microbatch, kind (F, B or W), start and end") from None
    try:
        timeline = simulate(problem, Schedule.from_lists(name, orders, flushes))
    except ScheduleError as exc:
        raise ConfigError(f"{path} does not fit the config in summary.json: {exc}") from None
    for op, start, end in zip(timeline.ops, timeline.start, timeline.end):
        written = times[op]
        if not (math.isclose(start, written[0], rel_tol=1e-9, abs_tol=1e-9)
                and math.isclose(end, written[1], rel_tol=1e-9, abs_tol=1e-9)):
            raise ConfigError(
                f"{path}: {op.label} is written at {written[0]:g}..{written[1]:g} but its order replays to "
                f"{start:g}..{end:g} under the config in summary.json; the folder was edited or mixed up"
            )
    return timeline


def read_summary(folder: Path) -> dict[str, Any]:
    """The summary.json of a folder written by ``pipeplan solve --out``, its fields checked (a quick look before a
    long read: a command fails on the folder before it fails on its output). Raises :class:`ConfigError` naming
    the fix when the folder or the file is missing or malformed."""
    if not folder.is_dir():
        raise ConfigError(f"results folder {str(folder)!r} does not exist; give a folder written by "
                          "'pipeplan solve --out'")
    for marker, (command, page) in _SWEEP_RESULTS.items():
        if (folder / marker).is_file() and not (folder / "summary.json").exists():
            also = (f" (its best plan as a config: 'pipeplan solve {folder / 'best.yaml'} --out DIR' writes one)"
                    if (folder / "best.yaml").is_file() else "")
            raise ConfigError(f"{str(folder)!r} was written by 'pipeplan {command} --out' (its page: {page}); give "
                              f"a folder written by 'pipeplan solve --out'{also}")
    summary = _read_json(folder / "summary.json", folder)
    _check_shape(summary, folder / "summary.json")
    if "config" not in summary:
        raise ConfigError(f"{folder / 'summary.json'} has no 'config' record (written by an older pipeplan); "
                          "run 'pipeplan solve CONFIG --out DIR' again")
    return dict(summary)


def read_results(folder: Path) -> Results:
    """Read a folder written by ``pipeplan solve --out``: rebuild its config and replay every schedule in it.

    Raises :class:`ConfigError` naming the file when something is missing, malformed or inconsistent.
    """
    folder = Path(folder)
    summary = read_summary(folder)
    try:
        config = config_from_dict(summary["config"])
    except ConfigError as exc:
        raise ConfigError(f"{folder / 'summary.json'}: config: {exc}") from None
    timelines: dict[str, Timeline] = {}
    for row in summary["schedules"]:
        name = str(row.get("schedule")) if isinstance(row, dict) else ""
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"{folder / 'summary.json'} has a schedule entry without a valid name: {row!r}")
        path = folder / "schedules" / f"{name}.json"
        record = _read_json(path, folder)
        timelines[name] = _timeline_from_record(config.problem, name, int(row.get("flushes", 1)), record, path)
    check_summary(summary, config, timelines, folder / "summary.json")
    return Results(summary, config, timelines)


# The fields of summary.json that the report reads, each with the JSON type it must have.
_SUMMARY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str, "objective": str, "schedules": list, "chosen": str, "skipped": dict, "other_layouts": list,
}
_LAYOUT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "schedule": str, "num_chunks": int, "placement": str, "peak_memory": (int, float),
}


def _check_shape(summary: Any, path: Path) -> None:
    """Raise :class:`ConfigError` unless ``summary`` has every field the report reads, each of its JSON type
    (numbers are checked against the replay later)."""
    fix = "run 'pipeplan solve CONFIG --out DIR' again to write a complete one"
    if not isinstance(summary, dict):
        raise ConfigError(f"{path} must hold the object 'pipeplan solve --format json' prints; {fix}")

    def check(record: dict[str, Any], fields: dict[str, type | tuple[type, ...]], where: str) -> None:
        for key, kind in fields.items():
            if key not in record:
                raise ConfigError(f"{path}: {where}has no {key!r}; {fix}")
            if not isinstance(record[key], kind) or isinstance(record[key], bool):
                raise ConfigError(f"{path}: {where}{key!r} is {_short(record[key])}, not a valid value; {fix}")

    check(summary, _SUMMARY_FIELDS, "")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in summary["skipped"].items()):
        raise ConfigError(f"{path}: 'skipped' must map schedule names to reasons; {fix}")
    for row in summary["schedules"]:
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: a schedule entry is {_short(row)}, not a record; {fix}")
        if not isinstance(row.get("flushes", 1), int) or isinstance(row.get("flushes", 1), bool):
            raise ConfigError(f"{path}: schedule {_short(row.get('schedule'))}: 'flushes' is "
                              f"{_short(row.get('flushes'))}, not a whole number; {fix}")
    for row in summary["other_layouts"]:
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: an 'other_layouts' entry is {_short(row)}, not a record; {fix}")
        check(row, {**_LAYOUT_FIELDS, summary["objective"]: (int, float)}, "an 'other_layouts' entry ")


# Relative and absolute slack when comparing a stored number with its replay: it forgives the last bits of a sum
# taken in another order and the rounding to twelve significant digits (CSV_FLOAT_FORMAT: at most 5e-13 of it).
_REPLAY_TOLERANCE = 1e-9


def _same(stored: Any, replayed: Any) -> bool:
    """True when a stored summary value equals its replay: booleans exactly, numbers within the tolerance,
    lists element by element."""
    if isinstance(replayed, bool) or isinstance(stored, bool):
        return stored is replayed
    if isinstance(replayed, list):
        return isinstance(stored, list) and len(stored) == len(replayed) and all(
            _same(a, b) for a, b in zip(stored, replayed))
    if isinstance(replayed, (int, float)):
        return isinstance(stored, (int, float)) and math.isclose(
            stored, replayed, rel_tol=_REPLAY_TOLERANCE, abs_tol=_REPLAY_TOLERANCE)
    return bool(stored == replayed)


def _short(value: Any, limit: int = 80) -> str:
    """``value`` for a message: floats to 10 significant digits, cut to ``limit`` characters."""
    if isinstance(value, float):
        text = f"{value:.10g}"
    elif isinstance(value, list):
        text = "[" + ", ".join(_short(item, limit) for item in value[:limit]) + "]"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_summary(summary: dict[str, Any], config: Config, timelines: dict[str, Timeline], path: Path) -> None:
    """Check every number of ``summary`` that a replay recomputes against the replay of ``timelines``.

    Per schedule: every metric (makespan, stage span, utilization, bubble, peaks, busy times, whether it fits
    the budget, ...); for the optimizer, that its gap and status agree with its bound and replayed objective;
    for the whole: the problem's shape and budget, the objective, and that the chosen schedule fits and is
    among the best. Raises :class:`ConfigError` naming the schedule, the field, the stored and the replayed
    value. The solver's bound, time and source are not replayable and are not checked.
    """
    problem = config.problem
    rerun = "the folder was edited; run 'pipeplan solve' again to get a consistent one"

    def mismatch(where: str, stored: Any, replayed: Any) -> ConfigError:
        shown = replayed if isinstance(replayed, str) else _short(replayed)  # a text describes the replay
        return ConfigError(f"{path}: {where} is {_short(stored)} but the replay gives {shown}; {rerun}")

    budget = problem.budget
    expected: dict[str, Any] = {
        "num_stages": problem.num_devices, "num_microbatches": problem.num_microbatches,
        "num_chunks": problem.num_chunks, "objective": config.solver.objective,
        "memory_budget": None if budget is None else (budget[0] if len(set(budget)) == 1 else list(budget)),
    }
    for key, value in expected.items():
        if key in summary and not (summary[key] is None if value is None else _same(summary[key], value)):
            raise ConfigError(f"{path}: {key!r} is {_short(summary[key])} but its 'config' record gives "
                              f"{_short(value)}; {rerun}")
    objective = config.solver.objective
    replayed: dict[str, Metrics] = {name: compute_metrics(timeline) for name, timeline in timelines.items()}
    for row in summary["schedules"]:
        name = str(row["schedule"])
        metrics = replayed[name].to_dict()
        for key, value in metrics.items():
            if key == "schedule":
                continue
            if key not in row:
                raise ConfigError(f"{path}: schedule {name!r} has no {key!r}; {rerun}")
            if not _same(row[key], value):
                raise mismatch(f"schedule {name!r}: {key!r}", row[key], value)
        if "status" in row:
            _check_proof(row, name, metrics[objective], mismatch)
    chosen = summary.get("chosen")
    if chosen not in replayed:
        raise ConfigError(f"{path}: 'chosen' is {_short(chosen)}, not a schedule in the folder; {rerun}")
    if not replayed[chosen].feasible:
        raise ConfigError(f"{path}: 'chosen' is {chosen!r}, which its replay puts over the budget (a chosen "
                          f"schedule always fits it); {rerun}")
    best_name, best = min(((name, getattr(m, objective)) for name, m in replayed.items() if m.feasible),
                          key=lambda pair: pair[1])
    value = getattr(replayed[chosen], objective)
    if value > best * (1 + _REPLAY_TOLERANCE) + _REPLAY_TOLERANCE:
        raise ConfigError(f"{path}: 'chosen' is {chosen!r}, whose replay gives {objective} {value:g}, but "
                          f"{best_name!r} in the folder gives {best:g} within the budget (the chosen one is always "
                          f"the best); {rerun}")


def _check_proof(row: dict[str, Any], name: str, value: float,
                 mismatch: Callable[[str, Any, Any], ConfigError]) -> None:
    """The optimizer's bound, gap and status must agree with its replayed objective ``value``."""
    lower, gap, status = row.get("lower_bound"), row.get("gap"), row.get("status")
    if not isinstance(lower, (int, float)) or isinstance(lower, bool) or lower > value * (1 + _REPLAY_TOLERANCE) \
            + _REPLAY_TOLERANCE:
        raise mismatch(f"schedule {name!r}: 'lower_bound' (a bound never above the schedule)", lower,
                       f"at most {value:g}")
    proof = prove(value, lower)
    if not _same(gap, proof.gap):
        raise mismatch(f"schedule {name!r}: 'gap'", gap, proof.gap)
    if status != proof.status:
        raise mismatch(f"schedule {name!r}: 'status'", status, proof.status)


def check_output_file(path: Path, force: bool) -> None:
    """Raise :class:`ConfigError` when ``path`` is a folder, a symbolic link or another file that is not a
    regular one (a device, a pipe), or exists and ``force`` is false: the early check before the work whose
    result goes there (:func:`write_file` checks again). The file is replaced whole, so a link or a device would
    be replaced by a regular file, never written through."""
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a folder, not a file; give a file name, e.g. {str(path / 'out')!r}")
    if path.is_symlink() and not path.exists():
        raise ConfigError(_dangling(path, "file"))
    if (path.exists() or path.is_symlink()) and not Path(os.path.realpath(path)).is_file():  # e.g. /dev/stdout
        raise ConfigError(f"{str(path)!r} is not a regular file (a device or a pipe, or a link to one); give the "
                          "name of a file to write, or - for stdout")
    if path.is_symlink():
        raise ConfigError(f"{str(path)!r} is a symbolic link; give the file it points to ({os.path.realpath(path)!r}) "
                          "or another name")
    if path.exists() and not force:
        raise ConfigError(f"{str(path)!r} already exists; pass --force to replace it")


def write_file(path: Path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (a temporary sibling renamed into place).

    Missing parent folders are created. Raises :class:`ConfigError` if ``path`` is a folder, exists and
    ``force`` is false, or cannot be written (its folder cannot be created or written to). The temporary file
    is removed on error and on SIGINT or SIGTERM (see :class:`_SignalGuard`).
    """
    path = Path(path)
    check_output_file(path, force)
    if not os.path.lexists(path.parent):
        check_creatable(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
    with _SignalGuard(path) as guard:
        try:
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        except OSError as exc:
            raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror} in {str(path.parent)!r}; "
                              "pick a file in a folder you can write to") from None
        try:
            os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; the result is an ordinary file
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as file:
                    file.write(text)
            except OSError as exc:
                raise ConfigError(_cannot_write(path, exc)) from None
            guard.holding = True
            os.replace(temporary, path)
        except BaseException:
            guard.holding = True
            Path(temporary).unlink(missing_ok=True)
            raise
