"""Terminal tables of metrics, with units, rendered with rich."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from pipeplan.config import Units


def _fmt_time(value: float) -> str:
    return f"{value:,.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.1f}"


def _fmt_pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _fmt_memory(value: float) -> str:
    return f"{value:g}"


def metrics_table(title: str, metrics: dict[str, Any], units: Units, budget: Sequence[float] | None) -> Table:
    """One schedule's metrics as a two-column table (``metrics`` is the JSON contract of ``simulate``)."""
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    rows: list[tuple[str, str, str]] = [
        ("schedule", str(metrics["schedule"]), ""),
        ("feasible under budget", "yes" if metrics["feasible"] else "NO", ""),
        ("makespan", _fmt_time(metrics["makespan"]), units.time),
        ("stage span", _fmt_time(metrics["stage_span"]), units.time),
        ("utilization", _fmt_pct(metrics["utilization"]), ""),
        ("bubble", _fmt_pct(metrics["bubble"]), ""),
        ("peak memory", _fmt_memory(metrics["peak_memory"]), units.memory),
        ("budget", "unlimited" if budget is None else ", ".join(sorted({f"{b:g}" for b in budget})), units.memory),
        ("peak per device", " ".join(_fmt_memory(v) for v in metrics["peak_memory_per_device"]), units.memory),
        ("busy per device", " ".join(_fmt_time(v) for v in metrics["busy_per_device"]), units.time),
        ("flushes", str(metrics["flushes"]), ""),
    ]
    for row in rows:
        table.add_row(*row)
    return table
