"""``report.html``: one self-contained page that shows a ``solve`` result to a person.

The page holds the problem at a glance, the comparison table (the chosen schedule marked), Gantt charts of the
optimal schedule and of 1F1B (or, where 1F1B does not apply, the best named schedule within the budget),
activation memory per device against the budget, and utilization per schedule.
plotly.js is embedded once, so the page works offline and can be mailed or attached as one file.

It is built from a result folder alone (``summary.json`` and ``schedules/*.json``, see
:func:`~pipeplan.report.files.read_results`), so ``pipeplan solve --out`` and ``pipeplan report`` produce the
same page from the same files. The output is deterministic: the same folder gives the same bytes.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from pipeplan import __version__
from pipeplan.bounds import OPTIMAL
from pipeplan.config import Config, Units
from pipeplan.frontier import FrontierRow
from pipeplan.problem import counted
from pipeplan.report.figures import gantt, memory_per_device, slug, utilization_bars
from pipeplan.report.files import Results, read_results
from pipeplan.report.tables import format_gap, format_memory, frontier_grid
from pipeplan.schedules import group_reasons
from pipeplan.simulate import Timeline

REPORT_NAME = "report.html"

# The named schedule every framework ships; the report draws it beside the optimizer's.
BASELINE = "1f1b"

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px auto;
       max-width: 1400px; padding: 0 16px; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
p.lead { font-size: 1.1em; margin-top: 0.3em; }
table { border-collapse: collapse; margin: 0.6em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
td { white-space: nowrap; }
th { background: #f3f3f3; text-align: left; }
div.scroll { overflow-x: auto; }
td.num { text-align: right; }
tr.chosen td { background: #e3f4e6; font-weight: bold; }
tr.over td { color: #888; }
.note { color: #555; font-size: 0.92em; }
.figure { margin: 1em 0; }
footer { margin-top: 3em; color: #777; font-size: 0.85em; }
"""


def _num(value: float, digits: int = 4) -> str:
    """``digits`` significant digits; large values as the terminal's tables give them (memory in bytes read
    1.288e+10: :func:`~pipeplan.report.tables.format_memory`)."""
    return format_memory(value, digits)


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _values(values: Sequence[float] | None) -> str:
    """Per-stage (or per-device) values for display: one number when all alike, else "a, b, c"."""
    if values is None:
        return "unlimited"
    if len(set(values)) == 1:
        return _num(values[0])
    return ", ".join(_num(v) for v in values)


def _glance(summary: dict[str, Any], config: Config) -> str:
    """The problem in one table: pipeline shape, costs, memory, objective and solver settings."""
    problem, units, solver = config.problem, config.units, config.solver
    split = problem.split_backward
    chunks = problem.num_chunks
    per_stage = "per model stage" if chunks > 1 else "per stage"
    stopped = _stopped_early(summary, solver.time_limit_s)
    rows = [
        ("devices (pipeline stages)", str(problem.num_devices)),
        ("microbatches per step", str(problem.num_microbatches)),
        ("chunks per device", f"{chunks} ({problem.placement} placement)" if chunks > 1 else "1"),
        (f"forward F ({units.time}, {per_stage})", _values(problem.forward)),
        (f"backward B ({units.time}, {per_stage})", _values(problem.backward)
         + ("; input gradient only (split backward)" if split else "; full backward")),
        (f"weight gradient W ({units.time})", _values(problem.backward_weight) if split else "not split"),
        (f"comm latency ({units.time})", _values(problem.comm)),
        (f"activation per microbatch ({units.memory})", _values(problem.activation)),
        (f"kept until W ({units.memory})", _values(problem.weight_activation) if split else "-"),
        (f"budget per device ({units.memory})", _values(problem.budget)),
        ("objective", f"{summary['objective'].replace('_', ' ')} (lower is better)"),
        ("solver", f"time limit {_num(solver.time_limit_s)} s, {counted(solver.num_workers, 'worker')}, seed "
                   f"{solver.random_seed}" + (f"; {stopped}" if stopped else "")),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="glance">{body}</table>'


def _stopped_early(summary: dict[str, Any], time_limit_s: float) -> str:
    """Why the optimizer's answer may be worse than its time limit's, when Ctrl-C stopped the solve early (else
    ""). summary.json says ``interrupted``; without this note the page read as if the gap were what the whole time
    limit left. A proven optimum is the time limit's answer anyway and gets no note (as a frontier's row)."""
    optimal = next((row for row in summary["schedules"] if row["schedule"] == "optimal"), None)
    if summary.get("interrupted") is not True or optimal is None or optimal.get("status") == OPTIMAL:
        return ""
    took = optimal.get("solve_time_s")
    after = (f"after {took:.1f} s of its {_num(time_limit_s)} s" if isinstance(took, (int, float))
             and not isinstance(took, bool) else f"before its time limit of {_num(time_limit_s)} s")
    return f"stopped early by Ctrl-C {after}: the best schedule found by then, not the time limit's answer"


def _comparison(summary: dict[str, Any], units: Units) -> str:
    """Every schedule's measures side by side; the chosen row marked, rows over budget greyed."""
    head = [
        "schedule", f"makespan ({units.time})", f"stage span ({units.time})", "bubble", "utilization",
        f"peak memory ({units.memory})", "fits budget", "optimizer status", f"lower bound ({units.time})", "gap",
        "solve time",
    ]
    lines = ['<div class="scroll"><table class="comparison"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
             + "</tr>"]
    for row in summary["schedules"]:
        name = row["schedule"]
        chosen = name == summary["chosen"]
        solver = ["-", "-", "-", "-"]
        if "status" in row:
            solver = [row["status"], _num(row["lower_bound"], 6), format_gap(row["gap"]),
                      f"{row['solve_time_s']:.1f} s"]
        cells = [
            ("&#9733; " if chosen else "") + html.escape(name) + (" (chosen)" if chosen else ""),
            _num(row["makespan"], 6), _num(row["stage_span"], 6), _pct(row["bubble"]), _pct(row["utilization"]),
            _num(row["peak_memory"]), "yes" if row["feasible"] else "NO (over budget)", *solver,
        ]
        css = "chosen" if chosen else ("" if row["feasible"] else "over")
        tds = "".join(f"<td>{cells[0]}</td>" if i == 0 else f'<td class="num">{html.escape(c)}</td>'
                      for i, c in enumerate(cells))
        lines.append(f'<tr class="{css}">{tds}</tr>')
    lines.append("</table></div>")
    return "".join(lines)


def frontier_table(rows: Sequence[FrontierRow], objective: str, units: Units, not_run: Sequence[float] = (),
                   rerun: str = "run the same command again") -> str:
    """A frontier sweep as an HTML table under its chart (``frontier.html``): one row per budget, each named
    schedule's objective (in parentheses over the budget, "-" where it does not apply), the optimizer's with its
    bound, gap and status, and the budget's notes (why no schedule fits there), as the terminal prints it.
    ``not_run``: budgets asked for that an interrupted sweep never ran, said above the table with ``rerun``, how to
    run them (the command line's words)."""
    named, grid = frontier_grid(rows, lambda value: _num(value, 6))
    head = [f"budget ({units.memory})", *named, "optimal", "lower bound", "gap", "status", "note"]
    lines = ['<div class="scroll"><table class="frontier"><caption>'
             f"{html.escape(objective.replace('_', ' '))} ({html.escape(units.time)}) at each budget; (value) = over "
             "the budget</caption><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    notes: dict[float, list[str]] = {}  # keyed by budget: its rows' notes
    for row in rows:
        if row.note:
            notes.setdefault(row.budget, []).append(row.note)
    for budget, cells in grid:
        note = "; ".join(notes.get(budget, []))
        lines.append("<tr>" + "".join(f'<td class="num">{html.escape(f"({text})" if over else text)}</td>'
                                      for text, over in cells)
                     + f"<td>{html.escape(note)}</td></tr>")  # the note reads left to right
    lines.append("</table></div>")
    if not_run:
        shown = ", ".join(_num(budget) for budget in not_run)
        lines.insert(0, f'<p class="not-run">Interrupted: {len(not_run)} of the budgets asked for were not run '
                        f"({html.escape(shown)} {html.escape(units.memory)}); {html.escape(rerun)} to run "
                        "them.</p>")
    style = ("<style>table.frontier { border-collapse: collapse; margin: 1em; font-family: sans-serif; } "
             "table.frontier td, table.frontier th { border: 1px solid #ccc; padding: 0.2em 0.6em; } "
             "table.frontier td.num { text-align: right; } table.frontier caption { text-align: left; } "
             "p.not-run { margin: 1em; font-family: sans-serif; color: #a04000; }</style>")
    return style + "".join(lines)


def _headline(summary: dict[str, Any], units: Units, stopped: str = "") -> str:
    """One sentence: what to run, how good it is, and how it compares with 1F1B (the baseline) and with the best
    named schedule within the budget when that is another one (under a budget 1F1B may be fitted to it with a
    shorter warm-up, and GPipe in more flushes can beat it). ``stopped``: the :func:`_stopped_early` note, said
    after the optimizer's gap."""
    rows = {row["schedule"]: row for row in summary["schedules"]}
    chosen = rows[summary["chosen"]]
    objective = summary["objective"]
    text = (f"Run <b>{html.escape(chosen['schedule'])}</b>: {objective.replace('_', ' ')} "
            f"{_num(chosen[objective], 6)} {html.escape(units.time)}, bubble {_pct(chosen['bubble'])}, "
            f"peak memory {_num(chosen['peak_memory'])} {html.escape(units.memory)}")
    budget = summary.get("memory_budget")
    if isinstance(budget, (int, float)):
        text += f" of {_num(budget)}"
    base = rows.get(baseline(summary) or "")
    # The optimizer's answer is also set beside the best named schedule in the budget, when that is another (a
    # chosen named schedule is that best one already, or ties with it).
    fitting = [row for row in summary["schedules"] if row["schedule"] != "optimal" and row["feasible"]]
    best = min(fitting, key=lambda row: row[objective], default=None) if chosen["schedule"] == "optimal" else None
    compared = [row for row in (base, best) if row is not None and row["schedule"] != chosen["schedule"]
                and row[objective] > 0]
    within = " within the budget" if summary.get("memory_budget") is not None else ""
    for n, row in enumerate(dict((row["schedule"], row) for row in compared).values()):
        change = (chosen[objective] - row[objective]) / row[objective]
        which = "" if n == 0 else f"the best named schedule{within}, "
        # A tie (to the shown precision) is said as one, not as "0.0 % faster" (1 microbatch: GPipe is 1F1B).
        than = ("as fast as" if _pct(abs(change)) == _pct(0.0)
                else f"{_pct(abs(change))} {'faster' if change <= 0 else 'slower'} than")
        text += (f"{'; ' if n == 0 else ' and '}{than} {which}{html.escape(row['schedule'])} "
                 f"({_num(row[objective], 6)})")
    optimal = rows.get("optimal")
    if optimal is not None and "status" in optimal:
        text += (f". The optimizer's answer is {optimal['status']} (lower bound {_num(optimal['lower_bound'], 6)}, "
                 f"gap {format_gap(optimal['gap'])}).")
        if stopped:
            text += f" The solve was {html.escape(stopped)}."
    return f'<p class="lead">{text}</p>'


def _figure(fig: go.Figure, div_id: str) -> str:
    """A figure as a div and its plotting script; plotly.js itself is embedded once in the page head."""
    fig.update_layout(autosize=True, margin={"l": 70, "r": 30, "t": 60, "b": 50})
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       default_width="100%", default_height=f"{fig.layout.height or 450}px",
                       config={"displaylogo": False, "responsive": True})
    return f'<div class="figure">{body}</div>'


def baseline(summary: dict[str, Any]) -> str | None:
    """The named schedule to set beside the optimizer's: 1F1B when it applies, else the named schedule with the
    best objective within the budget (e.g. ZB-V with two chunks), else None."""
    named = [row for row in summary["schedules"] if row["schedule"] != "optimal"]
    if any(row["schedule"] == BASELINE for row in named):
        return BASELINE
    feasible = [row for row in named if row["feasible"]]
    if not feasible:
        return None
    return str(min(feasible, key=lambda row: row[summary["objective"]])["schedule"])


def _shown(results: Results) -> list[Timeline]:
    """The schedules drawn in full: the optimizer's, the baseline (1F1B when it applies), and the chosen one."""
    names = ["optimal", baseline(results.summary), results.summary["chosen"]]
    picked = list(dict.fromkeys(name for name in names if name in results.timelines))
    return [results.timelines[name] for name in picked]


def build_report(results: Results) -> str:
    """The report page for a result folder read back by :func:`~pipeplan.report.files.read_results`."""
    summary = results.summary
    units = results.config.units
    name = html.escape(str(summary["name"]))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>pipeplan report: {name}</title>",
        f"<style>{_STYLE}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>pipeplan report: {name}</h1>",
        _headline(summary, units, _stopped_early(summary, results.config.solver.time_limit_s)),
        "<h2>The problem</h2>",
        _glance(summary, results.config),
        "<h2>Schedules compared</h2>",
        _comparison(summary, units),
        '<p class="note">&#9733; chosen: the schedule within the budget with the best '
        f"{html.escape(summary['objective'])}; a named schedule wins a tie with the optimizer, since frameworks "
        "already implement it. Bubble = 1 - utilization; utilization = busy time / (devices x makespan).</p>",
    ]
    skipped: dict[str, str] = summary.get("skipped") or {}
    if skipped:
        items = "".join(f"<li><b>{html.escape(', '.join(names))}</b>: {html.escape(reason)}</li>"
                        for names, reason in group_reasons(skipped))
        parts.append(f'<p class="note">Not applicable here:</p><ul class="note">{items}</ul>')
    others: list[dict[str, Any]] = summary.get("other_layouts") or []
    if others:
        objective = summary["objective"]
        items = "".join(
            f"<li><b>{html.escape(row['schedule'])}</b> with num_chunks: {row['num_chunks']}, placement: "
            f"{html.escape(row['placement'])}: {html.escape(objective)} {_num(row[objective], 6)} "
            f"{html.escape(units.time)}, peak {_num(row['peak_memory'], 6)} {html.escape(units.memory)}</li>"
            for row in others
        )
        within = " within the same budget" if summary.get("memory_budget") is not None else ""
        parts.append(f'<p class="note">Faster{within} on another layout (the optimizer searched '
                     f"this config's layout only; set these under pipeline: to optimize that one):</p>"
                     f'<ul class="note">{items}</ul>')

    shown = _shown(results)
    end = 1.01 * max(max(t.end) for t in shown)
    parts.append("<h2>Gantt charts</h2>")
    parts.append('<p class="note">One row per device; F blue, B orange, W green; the number on a bar is its '
                 "microbatch (zoom in when bars are narrow); hover for start and end.</p>")
    for timeline in shown:
        row = next(r for r in summary["schedules"] if r["schedule"] == timeline.schedule.name)
        title = (f"{timeline.schedule.name}: makespan {_num(row['makespan'], 6)} {units.time}, "
                 f"bubble {_pct(row['bubble'])}, peak memory {_num(row['peak_memory'])} {units.memory}")
        fig = gantt(timeline, title=title, time_unit=units.time, labels=True)
        fig.update_xaxes(range=[0, end])  # one time scale for every chart on the page
        parts.append(_figure(fig, f"gantt-{slug(timeline.schedule.name)}"))
    parts.append("<h2>Activation memory per device</h2>")
    memory = memory_per_device(shown, title="Live activation memory over time (budget dashed)",
                               time_unit=units.time, memory_unit=units.memory)
    memory.update_xaxes(range=[0, end])
    parts.append(_figure(memory, "memory"))
    parts.append("<h2>Utilization</h2>")
    parts.append(_figure(utilization_bars(summary["schedules"], summary["chosen"]), "utilization"))
    parts.append(
        f"<footer>Made by pipeplan {html.escape(__version__)} from summary.json and schedules/ in this folder; "
        "re-render with <code>pipeplan report DIR --force</code>.</footer>"
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def figure_ids(results: Results) -> list[str]:
    """The ids of the figure divs :func:`build_report` writes, in page order."""
    return [f"gantt-{slug(t.schedule.name)}" for t in _shown(results)] + ["memory", "utilization"]


def render_folder(folder: Path | str) -> str:
    """The report page of the result folder ``folder`` (see :func:`build_report`)."""
    return build_report(read_results(Path(folder)))

