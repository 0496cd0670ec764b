"""What ``pipeplan size`` shows: the top configurations as a terminal table and ``report.html``.

The page is self-contained (plotly.js embedded once): tokens/s of every configuration by schedule, the memory
breakdown of the top configurations against the GPU's capacity, and the best plan's Gantt chart and live
activation memory (the figures of :mod:`pipeplan.report.figures`, on the best plan's replay).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import yaml
from plotly.offline import get_plotlyjs
from rich.table import Table

from pipeplan import __version__
from pipeplan.config import SolverSettings, Units
from pipeplan.problem import counted
from pipeplan.report.figures import gantt, memory_figure, schedule_colours
from pipeplan.report.files import CSV_FLOAT_FORMAT, config_record, write_folder
from pipeplan.report.tables import Column, fitted_tables
from pipeplan.simulate import Timeline
from pipeplan.sizing.hardware import GIB
from pipeplan.sizing.study import StudyResult
from pipeplan.sizing.sweep import candidate_label

REPORT_NAME = "report.html"

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px auto;
       max-width: 1400px; padding: 0 16px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 4px 8px; white-space: nowrap; } th { background: #f3f3f3; }
td.num { text-align: right; } table.study td { white-space: normal; }
tr.best td { background: #e3f4e6; font-weight: bold; }
.note { color: #555; font-size: 0.92em; } footer { margin-top: 3em; color: #777; font-size: 0.85em; }
"""

# The least change of tokens/s the gain sentence shows with one decimal (0.1 %), and calls the optimizer slower for.
VISIBLE_CHANGE = 0.0005

# Columns of the top-configurations table: (column, header, format).
TOP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("num_gpus", "GPUs", "{:d}"), ("tensor_parallel", "TP", "{:d}"), ("pipeline_parallel", "PP", "{:d}"),
    ("data_parallel", "DP", "{:d}"), ("microbatch_size", "mbs", "{:d}"), ("num_microbatches", "N", "{:d}"),
    ("num_chunks", "v", "{:d}"), ("recompute", "recompute", "{}"), ("schedule", "schedule", "{}"),
    ("tokens_per_s", "tokens/s", "{:,.0f}"), ("mfu", "MFU", "{:.1%}"), ("bubble", "bubble", "{:.1%}"),
    ("step_time_s", "step (s)", "{:.2f}"), ("memory_gib", "memory (GiB)", "{:.1f}"),
)


_TOP_HEADERS = [Column(header, "left" if header in ("recompute", "schedule") else "right")
                for _, header, _ in TOP_COLUMNS]


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if fmt == "{:d}":
        return fmt.format(int(value))
    if fmt in _SMALL and 0 < abs(value) < _SMALL[fmt]:  # a small model's step or memory: not 0.00
        return f"{value:.3g}"
    return fmt.format(value)


# Fixed-decimal formats -> the magnitude below which they would keep fewer than two significant digits.
_SMALL = {"{:.1f}": 1.0, "{:.2f}": 0.1}


def _gib(value: float) -> str:
    """GiB as the tables give them: one decimal, three significant digits below 1."""
    return _cell(value, "{:.1f}")


def top_rows(frame: pd.DataFrame, top: int) -> pd.DataFrame:
    """The ``top`` fastest rows that fit."""
    return frame[frame["fits"]].head(top)


def top_table(title: str, frame: pd.DataFrame, top: int, width: int | None = None) -> list[Table]:
    """The ``top`` fastest fitting configurations as rich tables (one when it fits in ``width`` columns, see
    :func:`pipeplan.report.tables.fitted_tables`), the best one marked."""
    rows = top_rows(frame, top)
    body = [[_cell(row[column], fmt) for column, _, fmt in TOP_COLUMNS] for _, row in rows.iterrows()]
    return fitted_tables(title, _TOP_HEADERS, body, width, keep=0,
                         row_styles=["bold green" if i == 0 else None for i in range(len(body))])


def best_per_gpu_count(frame: pd.DataFrame) -> pd.DataFrame:
    """The best fitting row for each GPU count, fewest GPUs first: the first in ``frame``, a sweep's rows in their
    ranking (:func:`~pipeplan.sizing.sweep.ranked`)."""
    return frame[frame["fits"]].groupby("num_gpus", sort=True).head(1).sort_values("num_gpus", kind="stable")


def per_gpu_count_table(title: str, frame: pd.DataFrame, width: int | None = None) -> list[Table]:
    """The best configuration at each GPU count as rich tables (tokens/s also per GPU; one table when it fits in
    ``width`` columns, else parts that each start with the GPU count)."""
    body = [[*(_cell(row[column], fmt) for column, _, fmt in TOP_COLUMNS),
             f"{row['tokens_per_s'] / row['num_gpus']:,.0f}"] for _, row in best_per_gpu_count(frame).iterrows()]
    return fitted_tables(title, [*_TOP_HEADERS, Column("tokens/s/GPU")], body, width, keep=1)


def gain_sentence(label: str, baseline: dict[str, Any], optimal: dict[str, Any]) -> str:
    """One sentence: the optimal schedule against 1F1B on the configuration ``label``."""
    gain = optimal["tokens_per_s"] / baseline["tokens_per_s"] - 1.0
    status = optimal["status"] or "-"
    gap = optimal["gap"]
    proof = f"{status}, gap {gap:.1%}" if gap is not None else status
    fit = "" if optimal["fits"] and baseline["fits"] else " (one of them does not fit the memory)"
    # The optimizer plans a split backward (B and W ops), and with 2 chunks V placement; where that costs more than
    # it gains (a tiny model, whose per-op overheads dominate), 1F1B on the fused backward is faster, and OPTIMAL is
    # of the optimizer's own plan. Said only where both fit and the optimizer proved its plan: else a slower answer
    # has other causes (the budget 1F1B exceeds, a search cut short).
    slower = ("; slower although proven optimal: its plan splits the backward into B and W, which may cost more than "
              "it gains on this model, so 1F1B is the better plan here"
              if gain <= -VISIBLE_CHANGE and optimal["fits"] and baseline["fits"] and optimal["status"] == "OPTIMAL"
              else "")
    # Never "-0.0%": a change below a twentieth of a percent gets two decimals, one that rounds away "±0.00%".
    change = (f"{gain:+.1%}" if abs(gain) >= VISIBLE_CHANGE else f"{gain:+.2%}" if abs(gain) >= 0.00005
              else "±0.00%")
    return (f"optimal schedule on {label}: {optimal['tokens_per_s']:,.0f} tokens/s against 1F1B's "
            f"{baseline['tokens_per_s']:,.0f} ({change}; optimizer {proof}{slower}){fit}")


def outside_ranking(result: StudyResult) -> str:
    """A sentence when the optimizer's run on the gain's configuration (the best plan's sizes on one chunk per
    device) is faster than the best plan the ranking chose, by more than the ranking's near tie (that plan was
    not ranked: the sweep runs the optimizer only on its ``optimizer.top`` configurations, or its own run there,
    a time-limited search, found less); else ""."""
    from pipeplan.sizing.estimate import OPTIMAL
    from pipeplan.sizing.sweep import CANDIDATE, DEFAULT_SCHEDULES, NEAR_TIE, schedule_names_of

    best, optimal = result.best, result.optimal
    if not (best and optimal and optimal["fits"]) or (best["schedule"] == OPTIMAL and int(best["num_chunks"]) == 1):
        return ""
    if optimal["tokens_per_s"] <= best["tokens_per_s"] * (1 + NEAR_TIE):
        return ""
    frame = result.frame
    same = frame["schedule"] == OPTIMAL
    for column in CANDIDATE:
        same &= frame[column] == ({**best, "num_chunks": 1}[column])
    ran = frame[same & frame["skipped"].isna()]
    searched = schedule_names_of(result.study.sweep_kwargs.get("schedules", DEFAULT_SCHEDULES))
    if len(ran):
        why = (f"the sweep's own optimizer run there found {float(ran['tokens_per_s'].max()):,.0f} tokens/s within "
               "its time limit")
    elif OPTIMAL in searched:
        why = ("the sweep ran the optimizer only on its optimizer.top configurations, not on this one; raise "
               "optimizer.top to rank it")
    else:
        why = f"the sweep did not run the optimizer at all; add {OPTIMAL} to search.schedules to rank it"
    return (f"the optimizer on one chunk per device ({optimal['tokens_per_s']:,.0f} tokens/s) is faster than the "
            f"best plan above ({best['schedule']} on {counted(int(best['num_chunks']), 'chunk')} per device, "
            f"{best['tokens_per_s']:,.0f} tokens/s): {why}")


def _figure(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(autosize=True, margin={"l": 70, "r": 30, "t": 60, "b": 50})
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_width="100%",
                       default_height=f"{fig.layout.height or 450}px",
                       config={"displaylogo": False, "responsive": True})
    return f'<div class="figure">{body}</div>'


def throughput_figure(frame: pd.DataFrame) -> go.Figure:
    """Tokens/s of every configuration that ran, a marker per schedule; hollow markers do not fit memory."""
    ran = frame[frame["skipped"].isna()].copy()
    ran["label"] = [candidate_label(row) for _, row in ran.iterrows()]
    order = list(dict.fromkeys(ran.sort_values("tokens_per_s", ascending=False)["label"]))
    names = list(dict.fromkeys(ran["schedule"]))
    colours = schedule_colours(names)
    fig = go.Figure()
    for name in names:
        part = ran[ran["schedule"] == name]
        fig.add_trace(go.Scatter(
            x=part["label"], y=part["tokens_per_s"], mode="markers", name=name,
            marker={"color": colours[name], "size": 9, "symbol": ["circle" if f else "circle-open" for f in
                                                                   part["fits"]]},
            customdata=list(zip(part["mfu"], part["memory_gib"], part["fits"])),
            hovertemplate=f"{name}<br>%{{x}}<br>%{{y:,.0f}} tokens/s<br>MFU %{{customdata[0]:.1%}}<br>"
                          "memory %{customdata[1]:.1f} GiB<br>fits %{customdata[2]}<extra></extra>",
        ))
    # Beyond this many configurations the axis labels overlap; hovering names each point.
    readable = len(order) <= 40
    fig.update_layout(title="Tokens/s of every configuration by schedule (hollow: does not fit memory)",
                      xaxis={"title": None if readable else f"{len(order)} configurations, fastest first (hover "
                             "for each)", "categoryorder": "array", "categoryarray": order, "tickangle": -45,
                             "showticklabels": readable},
                      yaxis={"title": "tokens/s (higher is better)", "rangemode": "tozero"}, height=560)
    return fig


def memory_breakdown_figure(frame: pd.DataFrame, top: int) -> go.Figure:
    """Peak memory per GPU of the top fitting rows: static state, live activations and the reserve, stacked,
    against the GPU's capacity."""
    rows = top_rows(frame, top)
    labels = [f"{candidate_label(row)} {row['schedule']}" for _, row in rows.iterrows()]
    fig = go.Figure()
    parts = (("static_memory_gib", "weights, gradients, optimizer (+ workspace)", "#4C78A8"),
             ("activation_memory_gib", "live activations (peak)", "#F58518"),
             ("reserve_gib", "reserve (CUDA context, NCCL, fragmentation)", "#BBBBBB"))
    for column, name, colour in parts:
        values = rows[column] if column in rows else [0.0] * len(rows)
        fig.add_trace(go.Bar(x=labels, y=values, name=name, marker={"color": colour},
                             hovertemplate="%{x}<br>%{y:.1f} GiB<extra>" + name + "</extra>"))
    if len(rows):
        fig.add_hline(y=float(rows["capacity_gib"].iloc[0]), line={"dash": "dash", "color": "black"},
                      annotation_text="GPU capacity", annotation_position="top left")
    fig.update_layout(barmode="stack", title=f"Memory per GPU of the top {len(rows)} configurations",
                      yaxis={"title": "GiB"}, xaxis={"tickangle": -30}, height=520)
    return fig


def _top_html(frame: pd.DataFrame, top: int, rows: pd.DataFrame | None = None) -> str:
    """The top rows as an HTML table, the best marked; or ``rows`` as given, unmarked."""
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in TOP_COLUMNS)
    body = []
    shown = top_rows(frame, top) if rows is None else rows
    for i, (_, row) in enumerate(shown.iterrows()):
        cells = "".join(f'<td class="num">{html.escape(_cell(row[c], f))}</td>' for c, _, f in TOP_COLUMNS)
        body.append(f'<tr class="{"best" if i == 0 and rows is None else ""}">{cells}</tr>')
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def build_report(name: str, frame: pd.DataFrame, top: int, best_timeline: Timeline, headline: str,
                 gain: str | None, settings: dict[str, str]) -> str:
    """The report page of a sizing sweep (``frame`` with reserve_gib filled in)."""
    skipped = frame[frame["skipped"].notna()]
    reasons = skipped["skipped"].value_counts()
    reason_items = "".join(f"<li>{html.escape(str(r))}: {n} rows</li>" for r, n in reasons.items())
    setting_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in
                           settings.items())
    timeline_fig = gantt(best_timeline, title=f"best plan: {best_timeline.schedule.name}", time_unit="s")
    # The sized problem counts bytes; shown in GiB, as the tables and best.yaml give memory.
    memory_fig = memory_figure(best_timeline, title="best plan: live activation memory per device (budget dashed)",
                               time_unit="s", memory_unit="GiB", scale=GIB)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>pipeplan size: {html.escape(name)}</title>", f"<style>{_STYLE}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>', "</head><body>",
        f"<h1>pipeplan size: {html.escape(name)}</h1>", f'<p class="lead">{html.escape(headline)}</p>',
    ]
    if gain:
        parts.append(f"<p>{html.escape(gain)}</p>")
    parts += [
        "<h2>The study</h2>", f'<table class="study">{setting_rows}</table>',
        f"<h2>Top {top} configurations that fit</h2>", _top_html(frame, top),
        "<h2>The best configuration at each GPU count</h2>", _top_html(frame, top, best_per_gpu_count(frame)),
        '<p class="note">tokens/s = global batch x sequence length / step time; step time = the replayed '
        "pipeline (or the optimizer's schedule) + the data-parallel gradient sync not hidden + the optimizer step. "
        "MFU counts model FLOPs as Megatron-LM does (no recompute).</p>",
        "<h2>Throughput</h2>", _figure(throughput_figure(frame), "throughput"),
        "<h2>Memory</h2>", _figure(memory_breakdown_figure(frame, top), "memory-breakdown"),
        "<h2>The best plan</h2>", _figure(timeline_fig, "gantt-best"), _figure(memory_fig, "memory-best"),
    ]
    if reason_items:
        parts.append(f'<h2>Skipped combinations</h2><ul class="note">{reason_items}</ul>')
    parts += [f"<footer>Made by pipeplan {html.escape(__version__)}; every row is in sweep.csv, the best plan's "
              "pipeline problem in best.yaml (run <code>pipeplan solve best.yaml</code>).</footer>",
              "</body></html>"]
    return "\n".join(parts) + "\n"


def best_config_text(result: StudyResult) -> str:
    """``best.yaml``: the best plan's pipeline problem as an ordinary pipeplan config (seconds, GiB: the bytes the
    sizing counts in, divided by 2**30, which is exact, so every peak compares with the budget as it did)."""
    best = result.best
    problem = best["problem"]
    name = f"{result.study.name}: {candidate_label(best)} {best['schedule']}"
    chosen = {key: result.study.sweep_kwargs[key] for key in ("num_workers", "random_seed")
              if result.study.sweep_kwargs.get(key) is not None}
    # The optimizer settings the run used (the study's, with --time-limit's limit when given).
    settings = SolverSettings(time_limit_s=result.study.time_limit_s, **chosen)
    record = config_record(name, problem, settings, Units(time="s", memory="GiB"))
    memory = record["memory"]
    for key in ("activation", "weight_activation", "budget"):
        if key in memory:
            value = memory[key]
            memory[key] = [v / GIB for v in value] if isinstance(value, list) else value / GIB
    header = (f"# The best plan of pipeplan size ({best['schedule']}: {best['tokens_per_s']:,.0f} tokens/s, "
              f"{_gib(best['memory_gib'])} GiB per GPU).\n# Times in seconds, memory in GiB; the budget is the "
              "activation memory left per pipeline device. Run: pipeplan solve best.yaml\n# A warning there that costs "
              "or memory are not whole ticks is expected (sized values have many digits): the answer\n# is "
              "replayed exactly; only the optimizer's proven bound may sit a hair low.\n")
    if problem.split_backward:
        # The trial's case: size said 1F1B took 3.62 s a step, solve best.yaml 3.51 s, each right for what it ran.
        header += ("# The backward is split into B and W (as the zero-bubble schedules and the optimizer run it). "
                   "1F1B and GPipe replayed\n# on this file run B and W as two ops and can drain faster than the fused "
                   "backward pipeplan size counts for them.\n")
    return header + yaml.safe_dump(record, sort_keys=False, width=120)


def setting_text(value: object) -> str:
    """A study setting as the report shows it: a mapping (a model or GPU given inline) as "key: value, ...", a list
    as "a, b", a flag as YAML writes it ("true"), anything else as its text (a page said "{'num_layers': 40, ...}"
    and "['selective', 'full']")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}: {setting_text(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(setting_text(item) for item in value)
    return str(value)


def write_size_folder(out: Path, force: bool, result: StudyResult, top: int,
                      extra: Callable[[Path], None] | None = None) -> None:
    """Write sweep.csv, report.html and best.yaml to ``out`` atomically (nothing is left on error); ``extra``
    adds more files to the folder before it is moved into place."""
    frame = result.frame.copy()
    frame["reserve_gib"] = result.best["reserve_gib"]
    headline = (f"Best: {candidate_label(result.best)} with {result.best['schedule']}: "
                f"{result.best['tokens_per_s']:,.0f} tokens/s, MFU {result.best['mfu']:.1%}, "
                f"{_gib(result.best['memory_gib'])} GiB per GPU of {result.best['capacity_gib']:.0f}.")
    kwargs = result.study.sweep_kwargs
    settings = {key: setting_text(kwargs[key])
                for key in ("model", "hardware", "num_gpus", "global_batch_size", "seq_len")}
    settings["searched"] = "; ".join(f"{k}: {setting_text(kwargs[k])}" for k in (
        "tensor_parallel", "pipeline_parallel", "microbatch_size", "num_chunks", "recompute", "schedules")
        if k in kwargs)
    gain = gain_sentence(result.gain_label, result.baseline, result.optimal)
    outside = outside_ranking(result)
    page = build_report(result.study.name, frame, top, result.best["timeline"], headline,
                        f"{gain}. Note: {outside}." if outside else gain, settings)

    def fill(folder: Path) -> None:
        result.frame.to_csv(folder / "sweep.csv", index=False, float_format=CSV_FLOAT_FORMAT)
        (folder / REPORT_NAME).write_text(page, encoding="utf-8")
        (folder / "best.yaml").write_text(best_config_text(result), encoding="utf-8")
        if extra is not None:
            extra(folder)

    write_folder(out, force, fill)
