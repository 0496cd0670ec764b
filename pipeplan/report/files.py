"""Result folders: ``summary.json``, ``metrics.csv`` and one ``schedules/<name>.json`` per schedule.

A folder is written atomically: everything goes to a temporary sibling that is renamed into place at the end,
so a failed or interrupted run leaves nothing half-written, and an existing folder is replaced only when asked.

A folder is also self-describing: ``summary.json`` holds the effective config (key ``config``, in the YAML
file's layout with every per-stage value spelled out), so :func:`read_results` can rebuild the problem and
every replayed schedule from the folder alone, e.g. to re-render ``report.html``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeplan.config import Config, SolverSettings, Units, config_from_dict
from pipeplan.frontier import FrontierRow
from pipeplan.problem import ConfigError, Op, OpKind, Problem
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.simulate import Timeline, simulate

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


def metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows of a comparison as a table with :data:`CSV_COLUMNS` (missing fields left empty)."""
    frame = pd.DataFrame(rows)
    for column in CSV_COLUMNS:
        if column not in frame:
            frame[column] = None
    frame = frame[list(CSV_COLUMNS)].copy()
    for column in ("peak_memory_per_device", "busy_per_device"):
        frame[column] = frame[column].map(lambda values: " ".join(f"{v:g}" for v in values))
    return frame


def _umask() -> int:
    """The process's file creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A folder holding one of these is a pipeplan result folder, which --force may replace.
RESULT_MARKERS = ("summary.json", "frontier.csv", "sweep.csv")


def check_replaceable(out: Path, force: bool) -> None:
    """Raise :class:`ConfigError` unless ``out`` is free, or is a pipeplan result folder and ``force`` is set.

    --force never deletes a folder that pipeplan did not write (e.g. ``--out . --force`` or ``--out results``).
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError(f"output path {str(out)!r} is a file, not a folder; pick another --out")
    if not force:
        raise ConfigError(f"output folder {str(out)!r} already exists; pass --force to replace it or pick another")
    if out.resolve() == Path.cwd().resolve() or not any((out / marker).exists() for marker in RESULT_MARKERS):
        raise ConfigError(
            f"output folder {str(out)!r} is not a pipeplan result folder (no {' or '.join(RESULT_MARKERS)}); "
            "--force only replaces those, pick a new folder"
        )


def write_folder(out: Path, force: bool, fill: Callable[[Path], None]) -> None:
    """Create ``out`` by calling ``fill`` on a temporary folder, then moving it into place.

    Raises :class:`ConfigError` if ``out`` exists and may not be replaced (:func:`check_replaceable`).
    Nothing is left behind on error.
    """
    out = Path(out)
    check_replaceable(out, force)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the result is an ordinary folder
    try:
        fill(staging)
        if out.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=parent))
            os.replace(out, trash / out.name)
            os.replace(staging, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_results(out: Path, summary: dict[str, Any], timelines: dict[str, Timeline], force: bool = False,
                  extra: Callable[[Path], None] | None = None) -> None:
    """Write a comparison's result folder: summary.json, metrics.csv, schedules/<name>.json (and ``extra``)."""

    def fill(folder: Path) -> None:
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        metrics_frame(summary["schedules"]).to_csv(folder / "metrics.csv", index=False)
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
    budget = problem.budget_per_device
    return {
        "name": name,
        "pipeline": {"num_stages": problem.num_stages, "num_microbatches": problem.num_microbatches,
                     "num_chunks": v, "placement": problem.placement},
        "costs": {"forward": _per_stage(problem.forward_per_stage, v),
                  "backward": _per_stage(problem.backward_per_stage, v),
                  "backward_weight": _per_stage(problem.backward_weight_per_stage, v),
                  "comm": _per_stage(problem.comm_per_stage, v)},
        "memory": {"activation": _per_stage(problem.activation_per_stage, v),
                   "weight_activation": _per_stage(problem.weight_activation_per_stage, v),
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
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{str(folder)!r} has no {path.relative_to(folder)}; give a folder written by 'pipeplan solve --out'"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _timeline_from_record(problem: Problem, name: str, flushes: int, record: Any, path: Path) -> Timeline:
    """Rebuild a replayed schedule from its ops file and check that replaying its orders gives the same times."""
    if not isinstance(record, dict) or not isinstance(record.get("ops"), list):
        raise ConfigError(f"{path} must hold an object with a list 'ops'")
    orders: list[list[Op]] = [[] for _ in range(problem.num_stages)]
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


def read_results(folder: Path) -> Results:
    """Read a folder written by ``pipeplan solve --out``: rebuild its config and replay every schedule in it.

    Raises :class:`ConfigError` naming the file when something is missing, malformed or inconsistent.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"results folder {str(folder)!r} does not exist; give a folder written by "
                          "'pipeplan solve --out'")
    summary = _read_json(folder / "summary.json", folder)
    if not isinstance(summary, dict) or not isinstance(summary.get("schedules"), list):
        raise ConfigError(f"{folder / 'summary.json'} must hold the object 'pipeplan solve --format json' prints")
    if "config" not in summary:
        raise ConfigError(f"{folder / 'summary.json'} has no 'config' record (written by an older pipeplan); "
                          "run 'pipeplan solve CONFIG --out DIR' again")
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
    return Results(summary, config, timelines)


def write_file(path: Path, text: str, force: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (a temporary sibling renamed into place).

    Raises :class:`ConfigError` if ``path`` exists and ``force`` is false.
    """
    path = Path(path)
    if path.exists() and not force:
        raise ConfigError(f"{str(path)!r} already exists; pass --force to replace it")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes it private; the result is an ordinary file
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
