"""Terminal tables of metrics, with units, rendered with rich."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from pipeplan.config import Units
from pipeplan.frontier import FrontierRow


def _fmt_time(value: float) -> str:
    """Up to 3 decimals, trailing zeros dropped, at least one decimal: 213.0, 91.34, 0.125."""
    rounded = round(value, 3)
    return f"{rounded:,.1f}" if rounded == int(rounded) else f"{rounded:,.3f}".rstrip("0")


def _fmt_pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def format_gap(gap: float) -> str:
    """A proof's relative gap as a percentage that never rounds a real gap to zero: "0 %" only when the bound
    meets the value, two decimals down to 0.01 %, one significant digit below (e.g. "0.002 %")."""
    if gap <= 0:
        return "0 %"
    percent = 100 * gap
    return f"{percent:.2f} %" if percent >= 0.01 else f"{percent:.1g} %"


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
        ("budget", "none" if budget is None else ", ".join(sorted({f"{b:g}" for b in budget})),
         "" if budget is None else units.memory),
        ("peak per device", " ".join(_fmt_memory(v) for v in metrics["peak_memory_per_device"]), units.memory),
        ("busy per device", " ".join(_fmt_time(v) for v in metrics["busy_per_device"]), units.time),
        ("flushes", str(metrics["flushes"]), ""),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _budget_text(budget: float | list[float] | None, units: Units) -> str:
    if budget is None:
        return "no memory budget"
    values = f"{budget:g}" if isinstance(budget, (int, float)) else " ".join(f"{b:g}" for b in budget)
    return f"budget {values} {units.memory}"


def comparison_table(summary: dict[str, Any], units: Units) -> Table:
    """Every schedule of a ``solve`` summary side by side; the chosen one marked and highlighted.

    Narrow enough for an 80-column terminal: units go in the title, the optimizer's proof in one short cell.
    """
    objective = summary["objective"]
    chunks = summary.get("num_chunks", 1)
    table = Table(
        title=f"{summary['name']}: {summary['num_stages']} stages x {summary['num_microbatches']} microbatches"
        f"{f' x {chunks} chunks' if chunks > 1 else ''}, {_budget_text(summary['memory_budget'], units)}\n"
        f"objective {objective}; times in {units.time}, memory in {units.memory}",
        header_style="bold",
    )
    table.add_column("schedule", no_wrap=True)
    table.add_column("makespan", justify="right")
    table.add_column("span", justify="right")
    table.add_column("bubble", justify="right")
    table.add_column("peak", justify="right")
    table.add_column("fits")
    table.add_column("proof", no_wrap=True)
    for row in summary["schedules"]:
        chosen = row["schedule"] == summary["chosen"]
        proof = ""
        if "status" in row:
            proof = "optimal" if row["status"] == "OPTIMAL" else f"gap {format_gap(row['gap'])}"
        table.add_row(
            ("* " if chosen else "  ") + row["schedule"],
            _fmt_time(row["makespan"]),
            _fmt_time(row["stage_span"]),
            _fmt_pct(row["bubble"]),
            _fmt_memory(row["peak_memory"]),
            "yes" if row["feasible"] else "NO",
            proof,
            style="bold green" if chosen else (None if row["feasible"] else "dim"),
        )
    table.caption = f"* chosen: {summary['chosen']} (best {objective} in budget)"
    return table


def frontier_table(name: str, rows: Sequence[FrontierRow], objective: str, units: Units) -> Table:
    """A frontier sweep as one row per budget: each schedule's objective, then the optimizer's with its proof.

    Values in parentheses are over the budget (shown, but not a choice); "-" means not applicable there.
    """
    budgets = sorted({row.budget for row in rows})
    named = list(dict.fromkeys(row.schedule for row in rows if row.schedule != "optimal"))
    cell: dict[tuple[float, str], FrontierRow] = {(row.budget, row.schedule): row for row in rows}  # keyed by
    # (budget, schedule name)
    table = Table(title=f"{name}: {objective.replace('_', ' ')} ({units.time}) against budget ({units.memory})",
                  header_style="bold")
    table.add_column(f"budget ({units.memory})", justify="right")
    for schedule in named:
        table.add_column(schedule, justify="right")
    table.add_column("optimal", justify="right", style="bold")
    table.add_column("lower bound", justify="right")
    table.add_column("gap", justify="right")
    table.add_column("status")
    for budget in budgets:
        values = []
        for schedule in named:
            row = cell.get((budget, schedule))
            if row is None or row.objective is None:
                values.append("-")
            else:
                values.append(_fmt_time(row.objective) if row.feasible else f"[dim]({_fmt_time(row.objective)})[/dim]")
        opt = cell.get((budget, "optimal"))
        if opt is None or opt.objective is None:
            solved = ["-", "-", "-", opt.status if opt is not None and opt.status else "-"]
        else:
            assert opt.lower_bound is not None and opt.gap is not None
            solved = [_fmt_time(opt.objective), _fmt_time(opt.lower_bound), format_gap(opt.gap), opt.status or ""]
        table.add_row(f"{budget:g}", *values, *solved)
    table.caption = "(value) = over the budget; the optimizer's column never rises as the budget grows"
    return table
