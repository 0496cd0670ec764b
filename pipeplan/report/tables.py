"""Terminal tables of metrics, with units, rendered with rich."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from pipeplan.config import Units
from pipeplan.frontier import FrontierRow
from pipeplan.problem import counted

# Significant digits of a time in the terminal's tables: as the optimizer's line (:g) and report.html give it. With
# three, times in seconds of close schedules read as ties or out of order (0.0992 and 0.0988 for 0.09924 and
# 0.09877; 0.145 for 0.14489).
TIME_DIGITS = 6


def _fmt_time(value: float) -> str:
    """:data:`TIME_DIGITS` significant digits, trailing zeros dropped, at least one decimal, thousands separated:
    213.0, 91.34, 0.14489, 12,345.7; below 0.1 as ``g`` writes it (0.09924, 3.3e-08: times in seconds of a small
    model)."""
    if not math.isfinite(value) or 0 < abs(value) < 0.1:  # nan and inf as Python writes them
        return f"{value:.{TIME_DIGITS}g}"
    decimals = 1 if value == 0 else max(1, TIME_DIGITS - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _fmt_pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def format_gap(gap: float) -> str:
    """A proof's relative gap as a percentage that never rounds a real gap to zero: "0 %" only when the bound
    meets the value, two decimals down to 0.01 %, one significant digit below (e.g. "0.002 %")."""
    if gap <= 0:
        return "0 %"
    percent = 100 * gap
    return f"{percent:.2f} %" if percent >= 0.01 else f"{percent:.1g} %"


def format_memory(value: float, digits: int = 6) -> str:
    """``digits`` significant digits (44.1406, 17.5); from 100,000 to 10**15, whole with thousands separators
    (12,884,901,888: memory in bytes), which six digits would print as 1.28849e+10."""
    return f"{value:,.0f}" if 1e5 <= abs(value) < 1e15 else f"{value:.{digits}g}"


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
        ("peak memory", format_memory(metrics["peak_memory"]), units.memory),
        ("budget", "none" if budget is None else _per_device(budget), "" if budget is None else units.memory),
        ("peak per device", " ".join(format_memory(v) for v in metrics["peak_memory_per_device"]), units.memory),
        ("busy per device", " ".join(_fmt_time(v) for v in metrics["busy_per_device"]), units.time),
        ("flushes", str(metrics["flushes"]), ""),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _per_device(budget: Sequence[float]) -> str:
    """One value when every device has the same budget, else each device's in device order (as the peaks)."""
    values = [format_memory(b) for b in budget]
    return values[0] if len(set(values)) == 1 else " ".join(values)


def _budget_text(budget: float | list[float] | None, units: Units) -> str:
    if budget is None:
        return "no memory budget"
    values = (format_memory(budget) if isinstance(budget, (int, float))
              else " ".join(format_memory(b) for b in budget))
    return f"budget {values} {units.memory}"


def comparison_table(summary: dict[str, Any], units: Units, width: int | None = None) -> list[Table]:
    """Every schedule of a ``solve`` summary side by side; the chosen one marked and highlighted.

    Narrow enough for an 80-column terminal: units go in the title, the optimizer's proof in one short cell.
    Narrower than ``width``, it comes in parts (:func:`fitted_tables`), each with the schedule column.
    """
    objective = summary["objective"]
    chunks = summary.get("num_chunks", 1)
    title = (f"{summary['name']}: {counted(summary['num_stages'], 'stage')} x "
             f"{counted(summary['num_microbatches'], 'microbatch', 'microbatches')}"
             f"{f' x {chunks} chunks' if chunks > 1 else ''}, {_budget_text(summary['memory_budget'], units)}\n"
             f"objective {objective}; times in {units.time}, memory in {units.memory}")
    columns = [Column("schedule", "left"), Column("makespan"), Column("span"), Column("bubble"), Column("peak"),
               Column("fits", "left"), Column("proof", "left")]
    body: list[list[str]] = []
    styles: list[str | None] = []
    for row in summary["schedules"]:
        chosen = row["schedule"] == summary["chosen"]
        proof = ""
        if "status" in row:
            proof = "optimal" if row["status"] == "OPTIMAL" else f"gap {format_gap(row['gap'])}"
        body.append([
            ("* " if chosen else "  ") + row["schedule"],
            _fmt_time(row["makespan"]),
            _fmt_time(row["stage_span"]),
            _fmt_pct(row["bubble"]),
            format_memory(row["peak_memory"]),
            "yes" if row["feasible"] else "NO",
            proof,
        ])
        styles.append("bold green" if chosen else (None if row["feasible"] else "dim"))
    return fitted_tables(title, columns, body, width, keep=1, row_styles=styles,
                         caption=f"* chosen: {summary['chosen']} (best {objective} in budget)")


def over_budget_notes(summary: dict[str, Any], units: Units) -> list[str]:
    """With a budget per device, a line per schedule over it naming the devices it exceeds: the table's peak is the
    largest device's, which may fit the largest budget ("peak 6, fits NO" beside budgets 6 5 4 3 3 3)."""
    budget = summary.get("memory_budget")
    if not isinstance(budget, list):
        return []
    return [over_budget_note(row, budget, units) for row in summary["schedules"] if not row["feasible"]]


def over_budget_note(row: dict[str, Any], budget: float | Sequence[float], units: Units) -> str:
    """The line of :func:`over_budget_notes` for one schedule's summary row over the per-device ``budget``; over
    one budget for every device, its peak and that budget."""
    if not isinstance(budget, Sequence):
        return (f"{row['schedule']} peaks at {format_memory(row['peak_memory'])} {units.memory}, over the budget of "
                f"{format_memory(budget)}")
    over = [f"{d} ({format_memory(peak)} against {format_memory(limit)})"
            for d, (peak, limit) in enumerate(zip(row["peak_memory_per_device"], budget))
            if peak > limit * (1 + 1e-9)]
    more = f" and {len(over) - 3} more" if len(over) > 3 else ""
    return (f"{row['schedule']} is over the budget on device{'s' if len(over) > 1 else ''} "
            f"{', '.join(over[:3])}{more} (in {units.memory})")


def frontier_grid(rows: Sequence[FrontierRow], fmt: Callable[[float], str]
                  ) -> tuple[list[str], list[tuple[float, list[tuple[str, bool]]]]]:
    """A frontier sweep as the terminal's table and ``frontier.html`` lay it out: the named schedules' names, and
    per budget (increasing) its cells, each (text, over the budget): the budget, each named schedule's objective
    ("-" where it does not apply), then the optimizer's objective, bound, gap and status. Times through ``fmt``."""
    named = list(dict.fromkeys(row.schedule for row in rows if row.schedule != "optimal"))
    cell = {(row.budget, row.schedule): row for row in rows}  # keyed by (budget, schedule)
    grid = []
    for budget in sorted({row.budget for row in rows}):
        cells = [(format_memory(budget), False)]
        for name in named:
            row = cell.get((budget, name))
            cells.append(("-", False) if row is None or row.objective is None
                         else (fmt(row.objective), not row.feasible))
        opt = cell.get((budget, "optimal"))
        if opt is None or opt.objective is None or opt.lower_bound is None or opt.gap is None:
            solved = ["-", "-", "-", (opt.status or "-") if opt is not None else "-"]
        else:
            solved = [fmt(opt.objective), fmt(opt.lower_bound), format_gap(opt.gap), opt.status or ""]
        grid.append((budget, cells + [(text, False) for text in solved]))
    return named, grid


def frontier_tables(name: str, rows: Sequence[FrontierRow], objective: str, units: Units,
                    width: int | None = None) -> list[Table]:
    """A frontier sweep as one row per budget: each schedule's objective, then the optimizer's with its proof.

    Values in parentheses are over the budget (shown, but not a choice); "-" means not applicable there. One
    table when it fits in ``width`` columns (or ``width`` is None); otherwise :func:`fitted_tables`' parts, the
    optimizer's columns first.
    """
    named, grid = frontier_grid(rows, _fmt_time)
    columns = [Column(f"budget ({units.memory})"), *(Column(schedule) for schedule in named),
               Column("optimal", style="bold"), Column("lower bound"), Column("gap"), Column("status", "left")]
    body: list[list[str | Text]] = [[Text(f"({text})", style="dim") if over else text for text, over in cells]
                                    for _, cells in grid]
    solved = list(range(len(columns) - 4, len(columns)))
    return fitted_tables(f"{name}: {objective.replace('_', ' ')} ({units.time}) against budget ({units.memory})",
                         columns, body, width, keep=1, order=[*solved, *range(1, len(named) + 1)],
                         caption="(value) = over the budget; the optimizer's column never rises as the budget grows")


@dataclass(frozen=True)
class Column:
    """A table column: its header, how its cells are justified and their style."""

    header: str
    justify: JustifyMethod = "right"
    style: str | None = None


def fitted_tables(title: str, columns: Sequence[Column], body: Sequence[Sequence[str | Text]], width: int | None, *,
                  keep: int = 1, order: Sequence[int] | None = None, caption: str | None = None,
                  row_styles: Sequence[str | None] | None = None) -> list[Table]:
    """``body`` (rows of cells: plain text, never read as rich markup, or styled :class:`~rich.text.Text`) as one
    table when it fits in ``width`` columns (or ``width`` is None), else as several: no cell is ever wrapped or cut
    short (headers may wrap). Each part repeats the first ``keep`` columns, which identify a row, and takes as many
    of the others as fit, in ``order`` (their indices, none of them kept; default: as given); with ``keep`` 0 the
    parts number the rows in a "#" column instead. Parts are titled "(i of n) ``title``"; the caption goes under
    the last. A column too wide to fit beside the kept ones even alone gets a part of its own, wider than
    ``width``."""
    widest = [max((cell_len(str(row[i])) for row in body), default=1) for i in range(len(columns))]

    def title_width(text: str) -> int | None:
        """A table's least width: its title's longest line, within ``width`` (a narrow table, such as a part of
        one column beside the kept ones, wrapped its title a few words a line)."""
        longest = max((cell_len(line) for line in text.splitlines()), default=0)
        return min(longest, width) if width else None

    def table(part_title: str, indices: Sequence[int], numbered: bool = False) -> Table:
        out = Table(title=part_title, header_style="bold", min_width=title_width(part_title))
        if numbered:
            out.add_column("#", justify="right", min_width=len(str(len(body))))
        for i in indices:
            column = columns[i]
            out.add_column(column.header, justify=column.justify, style=column.style, min_width=widest[i])
        for r, row in enumerate(body):
            out.add_row(*([str(r + 1)] if numbered else []), *(row[i] for i in indices),
                        style=row_styles[r] if row_styles is not None else None)
        return out

    keep = min(keep, len(columns))
    whole = table("", range(len(columns)))  # measured without its title, which may wrap
    if width is None or keep == len(columns) or _fits(whole, width):
        whole.title, whole.caption, whole.min_width = title, caption, title_width(title)
        return [whole]
    kept = list(range(keep))
    groups: list[list[int]] = []
    for i in order if order is not None else range(keep, len(columns)):
        if groups and _fits(table("", [*kept, *groups[-1], i], numbered=not kept), width):
            groups[-1].append(i)
        else:
            groups.append([i])
    # The part's number first, where a narrow terminal does not break it over two lines.
    parts = [table(f"({n + 1} of {len(groups)}) {title}", [*kept, *group], numbered=not kept)
             for n, group in enumerate(groups)]
    parts[-1].caption = caption
    return parts


def _fits(table: Table, width: int) -> bool:
    """Whether rich draws ``table`` within ``width`` columns without cutting a cell or a header short (it may wrap
    headers). Measured by drawing it: rich's own least width assumes every column at its least at once, which its
    layout does not always reach."""
    out = io.StringIO()
    Console(width=width, file=out, color_system=None, highlight=False, markup=False).print(table, crop=False)
    drawn = out.getvalue()
    return "…" not in drawn and all(cell_len(line) <= width for line in drawn.splitlines())
