"""The result store: every finished task of a sweep, in one SQLite file, so that no finished work is lost or
repeated.

A row is keyed by :func:`task_key`, a hash of everything that decides the result (the problem or the
configuration it is built from, the schedule, the solver settings) and pipeplan's version, so a re-run of the
same or an overlapping sweep finds its rows and a change to any of those misses them. A row holds the result's
record (JSON) and, for the optimizer's results, the problem and the schedule's per-device orders, so a stored
optimum can be replayed, reported and exported without solving again (:meth:`StoredRow.problem`,
:meth:`StoredRow.schedule`; a named schedule's orders are its generator's, so they are not kept). A failed task
is stored with its error and is run again next time.

Each row is written in its own transaction, in WAL mode: a process killed at any point (even ``kill -9``)
leaves every committed row and never a half-written one. A new store is built under a temporary name and moved
into place, so a file at the store's path is always a complete store; an existing file that is not one is
never overwritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import logging
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeplan import __version__
from pipeplan.executors import Executor, ShouldStop, TaskResult
from pipeplan.problem import ConfigError, Op, OpKind, Problem, counted, shown
from pipeplan.schedule import Schedule

log = logging.getLogger(__name__)

# Written in the store's meta table; a file without it is not a pipeplan store.
FORMAT = "pipeplan-store"
# The layout of the tables. A store of another layout is refused (a new pipeplan never guesses at an old file).
FORMAT_VERSION = 1
# Files SQLite keeps next to a store in WAL mode.
SIDE_FILES = ("-wal", "-shm", "-journal")

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE results (
    key TEXT PRIMARY KEY,      -- task_key(): hash of the task's inputs and pipeplan's version
    kind TEXT NOT NULL,        -- which sweep made it: "size" or "frontier"
    label TEXT NOT NULL,       -- the task in words, for people reading the file
    record TEXT,               -- the result's record (JSON); NULL when the task failed
    problem TEXT,              -- the Problem's fields (JSON), when the task had one
    orders TEXT,               -- the schedule: name, flushes and per-device op orders (JSON)
    error TEXT,                -- why the task failed; NULL when it succeeded
    version TEXT NOT NULL,     -- the pipeplan that wrote the row
    written REAL NOT NULL      -- when (Unix time)
);
"""
# The columns of the results table, as _SCHEMA makes it (read from it once: one list to edit).
with contextlib.closing(sqlite3.connect(":memory:")) as _schema:
    _schema.executescript(_SCHEMA)
    RESULT_COLUMNS = tuple(row[1] for row in _schema.execute("PRAGMA table_info(results)").fetchall())


# The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


# The meta key naming the command whose result folder holds the store ("size" or "frontier"; see Store.own).
OWNER = "command"


def stored_kinds(path: Path) -> frozenset[str] | None:
    """Which sweep the store file ``path`` belongs to: the command that holds it in its result folder
    (:meth:`Store.own`) when one does, else the kinds of its results (``"size"``, ``"frontier"``; none in an
    empty store); None when it cannot be read as a store (the command that opens it then says why). Read as a
    store is, never created: a read-only connection would leave SQLite's -wal and -shm files behind it, where a
    connection that may write removes them when it closes."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=5)
    except (sqlite3.Error, ValueError):
        return None
    try:
        owner = db.execute("SELECT value FROM meta WHERE key = ?", (OWNER,)).fetchall()
        if owner:
            return frozenset({owner[0][0]})
        return frozenset(kind for (kind,) in db.execute("SELECT DISTINCT kind FROM results"))
    except sqlite3.Error:
        return None
    finally:
        db.close()


def check_store(store: object) -> None:
    """A :class:`ConfigError` unless ``store`` is a :class:`Store` or None (a path given instead failed inside)."""
    if store is not None and not isinstance(store, Store):
        raise ConfigError(f"store must be a pipeplan.store.Store (with Store(path) as store: ...) or None, got "
                          f"{type(store).__name__} {shown(store, 60)}")


class StoreError(ConfigError):
    """A store that cannot be used: not a pipeplan store, another layout, or a place that cannot be written."""


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as dicts, enums as their values, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value == int(value) and abs(value) < 2**53:
        return int(value)  # 2.0 and 2 are the same input
    return value


def task_key(kind: str, inputs: Any) -> str:
    """The canonical hash of a task: sha256 of sorted-key JSON of its kind, its inputs (dataclasses such as the
    problem, the configuration and the solver settings, as field dicts) and pipeplan's version."""
    text = json.dumps({"kind": kind, "inputs": _plain(inputs), "pipeplan": __version__}, sort_keys=True,
                      separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def orders_record(schedule: Schedule) -> dict[str, Any]:
    """A schedule as JSON-ready data: per device, ops as [kind, stage, microbatch, chunk]."""
    return {"name": schedule.name, "flushes": schedule.flushes,
            "orders": [[[op.kind.value, op.stage, op.microbatch, op.chunk] for op in order]
                       for order in schedule.orders]}


def schedule_from_record(record: dict[str, Any]) -> Schedule:
    """The inverse of :func:`orders_record`."""
    orders = [[Op(OpKind(kind), stage, microbatch, chunk) for kind, stage, microbatch, chunk in order]
              for order in record["orders"]]
    return Schedule.from_lists(record["name"], orders, record.get("flushes", 1))


def problem_record(problem: Problem) -> dict[str, Any]:
    """A problem's fields as JSON-ready data (floats kept exactly)."""
    return {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}


def problem_from_record(record: dict[str, Any]) -> Problem:
    """The inverse of :func:`problem_record` (validated again, as every Problem is)."""
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}
    return Problem(**fields)


@dataclass(frozen=True)
class StoredRow:
    """One row of a store."""

    key: str
    kind: str
    label: str
    record: dict[str, Any] | None
    problem_data: dict[str, Any] | None  # the problem's record (:func:`problem_record`), as read from its JSON
    orders_data: dict[str, Any] | None  # the schedule's record (:func:`orders_record`), as read from its JSON
    error: str | None

    def problem(self) -> Problem | None:
        return None if self.problem_data is None else problem_from_record(self.problem_data)

    def schedule(self) -> Schedule | None:
        return None if self.orders_data is None else schedule_from_record(self.orders_data)


@dataclass(frozen=True)
class TaskOutput:
    """What a sweep's task returns for the store: its record, and the problem and schedule as JSON when it has
    them. Encoded in the task (:meth:`of`), so that a worker process sends the parent one string rather than
    thousands of op objects, and the store writes it as it is."""

    record: dict[str, Any]
    problem_json: str | None = None
    orders_json: str | None = None
    # The task was stopped before it finished (a stop request reached it in this process): :func:`run_tasks`
    # neither stores nor returns it, and counts it as not run.
    cut_short: bool = False

    @classmethod
    def of(cls, record: dict[str, Any], problem: Problem | None = None,
           schedule: Schedule | None = None) -> TaskOutput:
        return cls(record, None if problem is None else json.dumps(problem_record(problem)),
                   None if schedule is None else json.dumps(orders_record(schedule), separators=(",", ":")))

    def problem(self) -> Problem | None:
        return None if self.problem_json is None else problem_from_record(json.loads(self.problem_json))

    def schedule(self) -> Schedule | None:
        return None if self.orders_json is None else schedule_from_record(json.loads(self.orders_json))


# How to name another store, from the command line and from Python.
_ANOTHER = "another store file (--store FILE; Store(path) in Python)"


def _refuse(path: Path, why: str) -> StoreError:
    return StoreError(f"{str(path)!r} {why}; pick {_ANOTHER} or move that file away. pipeplan never "
                      "overwrites a file that is not its own store")


class Store:
    """A result store at ``path`` (created when missing). Use as a context manager; the connection is closed on
    exit. Raises :class:`StoreError` naming the fix for a file that is not a store, a store of another layout,
    and a place that cannot be written."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.exists():
            self._create()
        self._db = self._open()

    def _create(self) -> None:
        folder = self.path.absolute().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle, staging = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)
            os.close(handle)
        except OSError as exc:
            blocking = next((parent for parent in (folder, *folder.parents) if parent.is_file()), None)
            why = (f"{str(blocking)!r} is a file, not a folder" if blocking is not None
                   else f"{exc.strerror} in {str(folder)!r}")
            raise StoreError(f"cannot create the store {str(self.path)!r}: {why}; pick {_ANOTHER} in a folder you "
                             "can write to") from None
        try:
            db = sqlite3.connect(staging)
            with db:
                db.executescript(_SCHEMA)
                db.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("format", FORMAT), ("format_version", str(FORMAT_VERSION)), ("created_by", __version__)])
            db.close()
            os.chmod(staging, 0o666 & ~_umask())
            from pipeplan.report.files import rename_no_replace

            try:
                rename_no_replace(Path(staging), self.path)
            except FileExistsError:
                pass  # another run made it meanwhile: use theirs
        finally:
            if os.path.exists(staging):
                os.unlink(staging)

    def _open(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise StoreError(f"{str(self.path)!r} is a folder, not a store file; pick {_ANOTHER}, e.g. "
                             f"{str(self.path / 'store.sqlite')!r}")
        try:
            with open(self.path, "rb") as file:
                head = file.read(16)
        except OSError as exc:
            raise StoreError(f"cannot read the store {str(self.path)!r} ({exc.strerror}); pick {_ANOTHER}") \
                from None
        if head != SQLITE_HEADER:
            raise _refuse(self.path, "is not a pipeplan store (not an SQLite file)")
        try:
            db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S, isolation_level=None)
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise _refuse(self.path, "is an SQLite file but not a pipeplan store (no meta table)") from None
            if "locked" in str(exc):
                raise self._cannot_write(exc) from None
            # A store is read and written in place (its journal lives beside it): a read-only folder fails here.
            raise StoreError(f"cannot open the store {str(self.path)!r} ({exc}); if it or its folder is read-only, "
                             "copy it to a folder you can write to and use that copy") from None
        except sqlite3.DatabaseError as exc:
            raise _refuse(self.path, f"is an SQLite file that cannot be read ({exc}): damaged or not a pipeplan "
                          "store") from None
        if meta.get("format") != FORMAT:
            db.close()
            raise _refuse(self.path, "is an SQLite file but not a pipeplan store")
        if meta.get("format_version") != str(FORMAT_VERSION):
            db.close()
            raise StoreError(f"the store {str(self.path)!r} has layout {meta.get('format_version')} (written by "
                             f"pipeplan {meta.get('created_by')}); this pipeplan reads layout {FORMAT_VERSION}: pick "
                             f"{_ANOTHER}, or use that pipeplan version to read it")
        # The results table as the layout has it (a dropped table or a renamed column was an internal error later).
        columns = {row[1] for row in db.execute("PRAGMA table_info(results)").fetchall()}
        if columns != set(RESULT_COLUMNS):
            db.close()
            missing = "no results table" if not columns else "a results table with other columns"
            raise _refuse(self.path, f"is a pipeplan store with {missing}: damaged")
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("BEGIN IMMEDIATE")  # take the write lock once now: a read-only place fails here, early
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            db.close()
            raise self._cannot_write(exc, "it or its folder is read-only: ") from None
        return db

    def _cannot_write(self, exc: sqlite3.OperationalError, cause: str = "") -> StoreError:
        """The error for a write that failed: another process's lock held past :data:`LOCK_WAIT_S`, else
        ``cause`` (e.g. a read-only place)."""
        if "locked" in str(exc):
            return StoreError(f"cannot write the store {str(self.path)!r}: another process has held its lock for "
                              f"{LOCK_WAIT_S:g} s (another sweep writing it, or an sqlite3 shell in a transaction); "
                              f"run again once it is done, or pick {_ANOTHER}")
        return StoreError(f"cannot write the store {str(self.path)!r} ({exc}); {cause}pick {_ANOTHER} in a folder "
                          "you can write to")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def get(self, keys: Iterable[str], check: Callable[[StoredRow], None] | None = None) -> dict[str, StoredRow]:
        """The successful rows among ``keys``, keyed by key (failed rows are not returned: they run again). A row
        whose JSON does not read, or that ``check`` refuses (a ValueError naming what the row lacks, as a record
        edited by hand to ``{}`` would), is left out with a warning: its task runs again and replaces it."""
        found: dict[str, StoredRow] = {}  # keyed by task key
        wanted = list(keys)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, kind, label, record, problem, orders, error in self._db.execute(
                    f"SELECT key, kind, label, record, problem, orders, error FROM results WHERE key IN ({marks}) "
                    "AND error IS NULL", chunk):
                # A row left out runs again, and its row is replaced.
                try:
                    row = self._row(key, kind, label, record, problem, orders, error)
                    if check is not None:
                        check(row)
                    found[key] = row
                except StoreError as exc:  # its JSON does not read (said by _row)
                    log.warning("%s; running it again", exc)
                except ValueError as exc:  # refused by check
                    log.warning("%s; running it again", self._damaged(kind, label, key, exc))
        return found

    def rows(self) -> list[StoredRow]:
        """Every row, failed ones included, in the order written. Raises :class:`StoreError` naming a damaged
        row (one whose JSON does not read)."""
        return [self._row(*row) for row in self._db.execute(
            "SELECT key, kind, label, record, problem, orders, error FROM results ORDER BY written")]

    def _row(self, key: str, kind: str, label: str, record: str | None, problem: str | None, orders: str | None,
             error: str | None) -> StoredRow:
        """A row as read, its JSON read once and checked (edited by hand, a flipped byte): the record and problem
        objects, the orders an object with a list of orders."""
        try:
            fields, problem_data, orders_data = (None if text is None else json.loads(text)
                                                 for text in (record, problem, orders))
            for value, what in ((fields, "record"), (problem_data, "problem"), (orders_data, "schedule")):
                if value is not None and not isinstance(value, dict):
                    raise ValueError(f"its {what} is not a JSON object")
            if orders_data is not None and not isinstance(orders_data.get("orders"), list):
                raise ValueError("its schedule has no list of orders")
        except ValueError as exc:  # json.JSONDecodeError is one
            raise self._damaged(kind, label, key, exc) from exc
        return StoredRow(key, kind, label, fields, problem_data, orders_data, error)

    def _damaged(self, kind: str, label: str, key: str, why: Exception) -> StoreError:
        return StoreError(f"the store {str(self.path)!r} has a damaged row ({kind} {label!r}, key {key[:12]}...): "
                          f"{why}")

    def own(self, command: str) -> None:
        """Record that the result folder of ``command`` (``"size"`` or ``"frontier"``) holds this store, so that
        the other command does not take the folder over while it holds only the store, an unfinished sweep, even
        before any result is stored (:func:`stored_kinds`)."""
        try:
            with self._db:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (OWNER, command))
        except sqlite3.OperationalError as exc:
            raise self._cannot_write(exc) from None

    def put(self, key: str, kind: str, label: str, output: TaskOutput | None = None, error: str | None = None) -> None:
        """Write one row in its own transaction (replacing a failed row of the same key)."""
        problem = None if output is None else output.problem_json
        orders = None if output is None else output.orders_json
        record = None if output is None else json.dumps(output.record)
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                 (key, kind, label, record, problem, orders, error, __version__, time.time()))
        except sqlite3.OperationalError as exc:
            raise self._cannot_write(exc) from None

    def copy_to(self, target: Path) -> None:
        """A consistent copy of the store at ``target`` (SQLite's online backup)."""
        copy = sqlite3.connect(target)
        try:
            self._db.backup(copy)
        finally:
            copy.close()


# Seconds a store's reader or writer waits for another process's lock before it gives up.
LOCK_WAIT_S = 30.0


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Task:
    """One task of a sweep: its store key, a label for people, and the input its function receives."""

    key: str
    label: str
    input: Any


@dataclass(frozen=True)
class Progress:
    """How far a sweep is: tasks done of ``total`` (``reused`` of them from the store, ``failed`` with an error),
    and the last one to finish."""

    done: int
    total: int
    reused: int
    failed: int
    label: str


@dataclass
class Outcome:
    """The results of :func:`run_tasks`: records keyed by task key, and the failures and stop."""

    records: dict[str, TaskOutput | StoredRow]  # keyed by task key: what it returned, or its stored row
    failures: dict[str, str]  # keyed by task key: the error
    reused: int
    ran: int
    stopped: bool


def run_tasks(tasks: Sequence[Task], function: Callable[[Any], TaskOutput], *, kind: str, executor: Executor | None,
              store: Store | None = None, refresh: bool = False, num_cpus: int = 1,
              progress: Callable[[Progress], None] | None = None, should_stop: ShouldStop | None = None,
              done_before: tuple[int, int, int, int] = (0, 0, 0, 0),
              check: Callable[[StoredRow], None] | None = None) -> Outcome:
    """Every task's output: taken from ``store`` when there (unless ``refresh``), else run on ``executor`` (this
    process when None) and written to ``store`` as it finishes. A task that raises is recorded (in the outcome
    and the store) and the others go on. ``done_before`` is (done, total, reused, failed) of earlier phases of
    the same sweep, for progress; ``check`` refuses a stored row its reader could not use (see
    :meth:`Store.get`), which then runs again. A task whose output is ``cut_short`` (a stop reached it in this
    process) ends the loop: it is not stored, not returned and not counted as run, so the outcome is
    ``stopped``."""
    from pipeplan.executors import call

    unique = list({task.key: task for task in tasks}.values())
    stored = {} if store is None or refresh else store.get((task.key for task in unique), check)
    outcome = Outcome(records=dict(stored), failures={}, reused=len(stored), ran=0, stopped=False)
    todo = [task for task in unique if task.key not in stored]
    before_done, before_total, before_reused, before_failed = done_before
    total = before_total + len(unique)

    def report(label: str) -> None:
        if progress is not None:
            progress(Progress(before_done + outcome.reused + outcome.ran, total, before_reused + outcome.reused,
                              before_failed + len(outcome.failures), label))

    if unique:  # a phase with no tasks (a sweep without the optimizer) has nothing to report
        report("from the store" if stored else "starting")
    results: Iterator[TaskResult]
    if executor is None:
        results = (call(function, i, task.input) for i, task in enumerate(todo))
    else:
        results = executor.map(function, [task.input for task in todo], num_cpus=num_cpus, should_stop=should_stop)
    for result in results:
        task = todo[result.index]
        for name, level, text in result.warnings:  # logged in a worker process: again here, where the user sees it
            logging.getLogger(name).log(level, "%s", text)
        if result.ok and result.value.cut_short:
            log.info("task %s was stopped before it finished: left out", task.label)
            break  # only a stop in this process cuts a task short: the sweep is stopping
        outcome.ran += 1
        if result.ok:
            outcome.records[task.key] = result.value
            if store is not None:
                store.put(task.key, kind, task.label, result.value)
        else:
            log.warning("task %s failed: %s", task.label, result.error)
            outcome.failures[task.key] = str(result.error)
            if store is not None:
                store.put(task.key, kind, task.label, error=result.error)
        report(task.label)
        if should_stop is not None and should_stop() and executor is None:
            break
    outcome.stopped = outcome.ran < len(todo)
    return outcome


def require_fields(record: dict[str, Any], names: Iterable[str]) -> None:
    """Raise ValueError naming the fields of ``names`` that a stored ``record`` lacks (for the ``check`` of
    :meth:`Store.get`)."""
    missing = [name for name in names if name not in record]
    if missing:
        listed = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise ValueError(f"its record lacks {counted(len(missing), 'field')} ({listed})")


def record_of(output: TaskOutput | StoredRow) -> dict[str, Any]:
    """The record of a fresh or a stored result."""
    assert output.record is not None
    return output.record


def schedule_of(output: TaskOutput | StoredRow) -> Schedule | None:
    """The schedule of a fresh or a stored result, when it has one."""
    return output.schedule()
