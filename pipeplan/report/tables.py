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


def comparison_table(summary: dict[str, Any], units: Units) -> Table:
    """Every schedule of a ``solve`` summary side by side; the chosen one marked and highlighted."""
    objective = summary["objective"]
    budget = summary["memory_budget"]
    budget_text = "unlimited" if budget is None else (
        f"{budget:g}" if isinstance(budget, (int, float)) else " ".join(f"{b:g}" for b in budget)
    )
    table = Table(
        title=f"{summary['name']}: {summary['num_stages']} stages x {summary['num_microbatches']} microbatches"
        f"{' x ' + str(summary['num_chunks']) + ' chunks' if summary.get('num_chunks', 1) > 1 else ''}, "
        f"budget {budget_text} {units.memory}, objective {objective}",
        header_style="bold",
    )
    table.add_column("schedule")
    table.add_column(f"makespan ({units.time})", justify="right")
    table.add_column(f"stage span ({units.time})", justify="right")
    table.add_column("bubble", justify="right")
    table.add_column("utilization", justify="right")
    table.add_column(f"peak memory ({units.memory})", justify="right")
    table.add_column("fits budget")
    table.add_column("optimizer", justify="left")
    for row in summary["schedules"]:
        chosen = row["schedule"] == summary["chosen"]
        solver = ""
        if "status" in row:
            solver = f"{row['status']}, bound {_fmt_time(row['lower_bound'])}, gap {_fmt_pct(row['gap'])}"
        table.add_row(
            ("* " if chosen else "  ") + row["schedule"],
            _fmt_time(row["makespan"]),
            _fmt_time(row["stage_span"]),
            _fmt_pct(row["bubble"]),
            _fmt_pct(row["utilization"]),
            _fmt_memory(row["peak_memory"]),
            "yes" if row["feasible"] else "NO",
            solver,
            style="bold green" if chosen else (None if row["feasible"] else "dim"),
        )
    table.caption = f"* chosen: {summary['chosen']} (feasible, best {objective}; ties go to the named schedule)"
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
            solved = [_fmt_time(opt.objective), _fmt_time(opt.lower_bound), _fmt_pct(opt.gap), opt.status or ""]
        table.add_row(f"{budget:g}", *values, *solved)
    table.caption = "(value) = over the budget; the optimizer's column never rises as the budget grows"
    return table
