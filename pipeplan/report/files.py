"""Result folders: ``summary.json``, ``metrics.csv`` and one ``schedules/<name>.json`` per schedule.

A folder is written atomically: everything goes to a temporary sibling that is renamed into place at the end,
so a failed or interrupted run leaves nothing half-written, and an existing folder is replaced only when asked.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from pipeplan.problem import ConfigError
from pipeplan.simulate import Timeline

# Columns of metrics.csv, in order; list-valued fields are written as space-separated numbers.
CSV_COLUMNS = (
    "schedule", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory",
    "peak_memory_per_device", "busy_per_device", "flushes", "status", "lower_bound", "gap", "solve_time_s",
)


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


def write_folder(out: Path, force: bool, fill: Callable[[Path], None]) -> None:
    """Create ``out`` by calling ``fill`` on a temporary folder, then moving it into place.

    Raises :class:`ConfigError` if ``out`` exists and ``force`` is false. Nothing is left behind on error.
    """
    out = Path(out)
    if out.exists() and not force:
        raise ConfigError(f"output folder {str(out)!r} already exists; pass --force to replace it or pick another")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output path {str(out)!r} is a file, not a folder; pick another --out")
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
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
