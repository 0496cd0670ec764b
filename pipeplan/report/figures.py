"""Figures of replayed schedules (plotly): Gantt charts, activation memory over time, side-by-side comparisons.

Everything here reads a :class:`~pipeplan.simulate.Timeline` (and, for memory, :func:`memory_timeline`); nothing
recomputes times. Figures are returned, not shown; :func:`save` writes them to HTML and, when plotly's static
export works on this machine, to PNG.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipeplan.frontier import FrontierRow
from pipeplan.metrics import memory_timeline
from pipeplan.problem import OpKind
from pipeplan.simulate import Timeline
from pipeplan.torch_csv import action_text

log = logging.getLogger(__name__)

# Op kind -> bar colour: forward blue, backward (input gradient) orange, weight gradient green.
KIND_COLOURS: dict[OpKind, str] = {OpKind.F: "#4C78A8", OpKind.B: "#F58518", OpKind.W: "#54A24B"}
KIND_NAMES: dict[OpKind, str] = {OpKind.F: "F (forward)", OpKind.B: "B (backward)", OpKind.W: "W (weight grad)"}
# Device index -> line colour in memory plots (cycled).
DEVICE_COLOURS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")
# Where Debian and Ubuntu put Chromium, for kaleido's static export.
SYSTEM_CHROMIUM = Path("/usr/bin/chromium")


def slug(name: str) -> str:
    """``name`` as an HTML id: letters, digits and dashes."""
    return "".join(c if c.isalnum() or c == "-" else "-" for c in name) or "figure"


def _device_label(device: int) -> str:
    return f"device {device}"


# Label bars with their microbatch only up to this many microbatches; beyond, the labels are unreadable.
MAX_LABELLED_MICROBATCHES = 16


def gantt_traces(timeline: Timeline, show_legend: bool = True, labels: bool | None = None) -> list[go.Bar]:
    """One horizontal bar trace per op kind: a bar per op from its start to its end, labelled by microbatch.

    Hovering a bar shows the op (kind, microbatch, model stage; and as the exported torch CSV writes it), its start
    and its end. ``labels``: write the microbatch on each bar; None does so up to :data:`MAX_LABELLED_MICROBATCHES`
    (labels that do not fit a bar are hidden, and appear when an interactive figure is zoomed in).
    """
    problem = timeline.problem
    labelled = problem.num_microbatches <= MAX_LABELLED_MICROBATCHES if labels is None else labels
    # Columns as numpy arrays: plotly checks and copies a list element by element (seconds on a Gantt of 100,000
    # ops), an array at once.
    kinds = np.array([op.kind.value for op in timeline.ops])
    start = np.asarray(timeline.start, dtype=float)
    end = np.asarray(timeline.end, dtype=float)
    device = np.asarray(timeline.device, dtype=int)
    device_labels = np.array([_device_label(d) for d in range(problem.num_devices)], dtype=object)
    op_labels = np.array([op.label for op in timeline.ops], dtype=object)
    # the op as the exported torch CSV writes it (B5@s7 is 7I5 there when the backward is split)
    actions = np.array([action_text(problem, op) for op in timeline.ops], dtype=object)
    microbatches = np.array([str(op.microbatch) for op in timeline.ops], dtype=object)
    traces = []
    for kind in problem.kinds:
        picked = np.flatnonzero(kinds == kind.value)
        hover = np.empty((len(picked), 4), dtype=object)  # what a hovered bar shows: op, start, end, torch action
        hover[:, 0], hover[:, 1], hover[:, 2] = op_labels[picked], start[picked], end[picked]
        hover[:, 3] = actions[picked]
        traces.append(
            go.Bar(
                orientation="h",
                name=KIND_NAMES[kind],
                legendgroup=kind.value,
                showlegend=show_legend,
                marker={"color": KIND_COLOURS[kind], "line": {"color": "white", "width": 0.5}},
                y=device_labels[device[picked]],
                base=start[picked],
                x=end[picked] - start[picked],
                text=microbatches[picked] if labelled else None,
                textposition="inside" if labelled else "none",
                insidetextanchor="middle",
                customdata=hover,
                hovertemplate="%{customdata[0]} (torch CSV: %{customdata[3]})<br>start %{customdata[1]:.4g}<br>end "
                "%{customdata[2]:.4g}<extra></extra>",
            )
        )
    return traces


def _device_axis(num_devices: int) -> dict[str, object]:
    """A categorical y axis listing devices top to bottom, device 0 first."""
    labels = [_device_label(d) for d in range(num_devices)]
    return {"categoryorder": "array", "categoryarray": labels, "autorange": "reversed", "title": None}


def gantt(
    timeline: Timeline, title: str | None = None, time_unit: str = "units", labels: bool | None = None
) -> go.Figure:
    """The Gantt chart of one replayed schedule: a row per device, F/B/W in distinct colours."""
    fig = go.Figure(gantt_traces(timeline, labels=labels))
    fig.update_layout(
        title=title or timeline.schedule.name,
        barmode="overlay",
        uniformtext={"minsize": 7, "mode": "hide"},
        xaxis={"title": f"time ({time_unit})"},
        yaxis=_device_axis(timeline.problem.num_devices),
        height=140 + 40 * timeline.problem.num_devices,
    )
    return fig


def memory_traces(timeline: Timeline, show_legend: bool = True, scale: float = 1.0) -> list[go.Scatter]:
    """One step line per device: live activation memory from time 0 to the end of the step, in the problem's
    memory unit divided by ``scale`` (2**30 shows bytes in GiB)."""
    end = max(timeline.end)
    traces = []
    for device, steps in enumerate(memory_timeline(timeline)):
        times = np.array([t for t, _ in steps] + [end], dtype=float)  # arrays: see gantt_traces
        levels = np.array([level for _, level in steps] + [steps[-1][1]], dtype=float) / scale
        traces.append(
            go.Scatter(
                x=times,
                y=levels,
                mode="lines",
                line={"shape": "hv", "color": DEVICE_COLOURS[device % len(DEVICE_COLOURS)]},
                name=f"{_device_label(device)} memory",
                legendgroup=f"memory-{device}",
                showlegend=show_legend,
                hovertemplate=f"{_device_label(device)}<br>t %{{x:.4g}}<br>live %{{y:.4g}}<extra></extra>",
            )
        )
    return traces


def budget_lines(fig: go.Figure, lines: Sequence[tuple[int, float, str | None]], font_size: int | None = None) -> None:
    """Dashed grey lines across subplots of one column: (row, level, label or None) each, the label at the line's
    top left.

    Added to the layout in one update: plotly's ``add_hline(row=...)`` looks the row's axes up through the whole
    grid on every call, so a line per device took minutes at a few hundred devices."""
    shapes, labels = [], []
    for row, level, label in lines:
        subplot = fig.get_subplot(row, 1)
        xref = "x" + subplot.xaxis.plotly_name.removeprefix("xaxis")
        yref = "y" + subplot.yaxis.plotly_name.removeprefix("yaxis")
        shapes.append({"type": "line", "xref": f"{xref} domain", "x0": 0, "x1": 1, "yref": yref, "y0": level,
                       "y1": level, "line": {"dash": "dash", "color": "grey"}})
        if label is not None:
            labels.append({"text": label, "xref": f"{xref} domain", "x": 0, "xanchor": "left", "yref": yref,
                           "y": level, "yanchor": "bottom", "showarrow": False,
                           **({"font": {"size": font_size}} if font_size is not None else {})})
    # Assigned, not passed to update_layout, which re-validates the subplot titles one by one (18 s at 1,000).
    fig.layout.shapes = (*fig.layout.shapes, *shapes)
    fig.layout.annotations = (*fig.layout.annotations, *labels)


def memory_figure(
    timeline: Timeline, title: str | None = None, time_unit: str = "units", memory_unit: str = "slots",
    scale: float = 1.0,
) -> go.Figure:
    """Live activation memory over time, one panel per device, with the device's budget as a dashed line; memory
    in the problem's unit divided by ``scale``, which ``memory_unit`` names."""
    problem = timeline.problem
    num_devices = problem.num_devices
    fig = make_subplots(rows=num_devices, cols=1, shared_xaxes=True, vertical_spacing=0.02,
                        subplot_titles=[_device_label(d) for d in range(num_devices)])
    budget = problem.budget
    for device, trace in enumerate(memory_traces(timeline, show_legend=False, scale=scale)):
        fig.add_trace(trace, row=device + 1, col=1)
    if budget is not None:
        budget_lines(fig, [(device + 1, level / scale, None) for device, level in enumerate(budget)])
    fig.update_yaxes(title=memory_unit, rangemode="tozero")
    fig.update_xaxes(title=f"time ({time_unit})", row=num_devices, col=1)
    fig.update_layout(title=title or f"{timeline.schedule.name}: live activation memory",
                      height=120 + 110 * num_devices)
    return fig


def compare(
    timelines: Sequence[Timeline],
    titles: Sequence[str],
    title: str,
    time_unit: str = "units",
    memory_unit: str = "slots",
) -> go.Figure:
    """Schedules stacked on one time axis: for each, its Gantt chart and, below it, memory per device."""
    assert len(timelines) == len(titles) and timelines
    num_devices = max(t.problem.num_devices for t in timelines)
    subplot_titles = []
    for name in titles:
        subplot_titles += [name, "live activation memory per device"]
    row_heights = [float(num_devices), 3.0] * len(timelines)
    fig = make_subplots(rows=2 * len(timelines), cols=1, shared_xaxes=True, vertical_spacing=0.05,
                        subplot_titles=subplot_titles, row_heights=row_heights)
    for k, timeline in enumerate(timelines):
        gantt_row, memory_row = 2 * k + 1, 2 * k + 2
        for trace in gantt_traces(timeline, show_legend=k == 0):
            fig.add_trace(trace, row=gantt_row, col=1)
        fig.update_yaxes(row=gantt_row, col=1, **_device_axis(timeline.problem.num_devices))
        for trace in memory_traces(timeline, show_legend=k == 0):
            fig.add_trace(trace, row=memory_row, col=1)
        budget = timeline.problem.budget
        if budget is not None:
            budget_lines(fig, [(memory_row, level, f"budget {level:g}") for level in sorted(set(budget))])
        fig.update_yaxes(title=memory_unit, rangemode="tozero", row=memory_row, col=1)
    fig.update_xaxes(title=f"time ({time_unit})", row=2 * len(timelines), col=1)
    fig.update_layout(
        title=title,
        barmode="overlay",
        uniformtext={"minsize": 7, "mode": "hide"},
        height=200 + len(timelines) * (40 * num_devices + 200),
        width=1400,
    )
    return fig


# Schedule -> line colour in figures that overlay schedules; "optimal" always gets the first.
SCHEDULE_COLOURS = ("#1B7F3B", "#4C78A8", "#E45756", "#B279A2", "#F58518", "#72B7B2", "#9D755D", "#FF9DA6")


def schedule_colours(names: Sequence[str]) -> dict[str, str]:
    """A fixed colour per schedule name: the optimizer's first, then the others in the order given."""
    ordered = sorted(names, key=lambda name: name != "optimal")
    return {name: SCHEDULE_COLOURS[i % len(SCHEDULE_COLOURS)] for i, name in enumerate(ordered)}


def memory_per_device(
    timelines: Sequence[Timeline],
    title: str,
    time_unit: str = "units",
    memory_unit: str = "slots",
) -> go.Figure:
    """Live activation memory over time: a panel per device, a line per schedule, the budget dashed.

    All timelines must be of the same problem; each is named by its schedule.
    """
    assert timelines
    problem = timelines[0].problem
    num_devices = problem.num_devices
    colours = schedule_colours([t.schedule.name for t in timelines])
    fig = make_subplots(rows=num_devices, cols=1, shared_xaxes=True, vertical_spacing=0.25 / num_devices,
                        subplot_titles=[_device_label(d) for d in range(num_devices)])
    budget = problem.budget
    # The optimizer's line goes last, on top: it often coincides with a named schedule's.
    for timeline in sorted(timelines, key=lambda t: t.schedule.name == "optimal"):
        name = timeline.schedule.name
        for device, trace in enumerate(memory_traces(timeline, show_legend=False)):
            trace.update(name=name, legendgroup=name, showlegend=device == 0,
                         line={"shape": "hv", "color": colours[name], "width": 2.5 if name == "optimal" else 1.5},
                         hovertemplate=f"{name}, {_device_label(device)}<br>t %{{x:.4g}}<br>live %{{y:.4g}}"
                         "<extra></extra>")
            fig.add_trace(trace, row=device + 1, col=1)
    if budget is not None:
        budget_lines(fig, [(device + 1, level, f"budget {level:g}") for device, level in enumerate(budget)],
                     font_size=10)
    fig.update_yaxes(title=memory_unit, rangemode="tozero")
    fig.update_xaxes(title=f"time ({time_unit})", row=num_devices, col=1)
    fig.update_layout(title=title, height=160 + 120 * num_devices, legend={"orientation": "h", "y": 1.0,
                      "yanchor": "bottom", "x": 1.0, "xanchor": "right"})
    return fig


def utilization_bars(
    rows: Sequence[dict[str, Any]], chosen: str, title: str = "Utilization per schedule (higher is better)"
) -> go.Figure:
    """A bar per schedule of a ``solve`` summary: its utilization; the chosen one highlighted, those over budget
    hatched and grey."""
    names = [str(row["schedule"]) for row in rows]
    values = [100 * float(row["utilization"]) for row in rows]
    feasible = [bool(row["feasible"]) for row in rows]
    colours = ["#1B7F3B" if name == chosen else ("#4C78A8" if ok else "#BBBBBB") for name, ok in zip(names, feasible)]
    texts = [f"{v:.1f} %" + ("" if ok else " (over budget)") + (" chosen" if name == chosen else "")
             for name, v, ok in zip(names, values, feasible)]
    fig = go.Figure(go.Bar(
        x=names, y=values, text=texts, textposition="outside",
        marker={"color": colours, "pattern": {"shape": ["" if ok else "/" for ok in feasible]}},
        hovertemplate="%{x}<br>utilization %{y:.2f} %<extra></extra>",
    ))
    fig.update_layout(title=title, yaxis={"title": "utilization (%)", "range": [0, 110]}, xaxis={"title": None},
                      height=420, showlegend=False)
    return fig


def frontier_figure(
    rows: Sequence[FrontierRow], objective: str, title: str, time_unit: str = "units", memory_unit: str = "slots"
) -> go.Figure:
    """The memory-time frontier: objective against budget, a line per schedule (points within the budget only),
    the optimizer's in bold with its proven lower bound dotted. Lines are steps: a value holds from its budget
    up to the next one swept."""
    names = list(dict.fromkeys(row.schedule for row in rows))
    colours = schedule_colours(names)
    fig = go.Figure()
    never: list[str] = []  # schedules over every budget swept: no point to draw (plotly leaves them out)
    for name in sorted(names, key=lambda n: n == "optimal"):
        points = [row for row in rows if row.schedule == name and row.feasible and row.objective is not None]
        optimal = name == "optimal"
        if not points and not optimal:
            never.append(name)
        fig.add_trace(go.Scatter(
            x=[row.budget for row in points], y=[row.objective for row in points],
            mode="lines+markers", name=name,
            line={"color": colours[name], "width": 3.5 if optimal else 1.5, "shape": "hv"},
            marker={"size": 9 if optimal else 6},
            customdata=[[row.status or "", row.peak_memory] for row in points],
            hovertemplate=f"{name}<br>budget %{{x:g}} {memory_unit}<br>{objective} %{{y:.4g}} {time_unit}"
            f"<br>peak %{{customdata[1]:.4g}} {memory_unit} %{{customdata[0]}}<extra></extra>",
        ))
        if optimal:
            fig.add_trace(go.Scatter(
                x=[row.budget for row in points], y=[row.lower_bound for row in points], mode="lines",
                name="optimizer's lower bound", line={"color": colours[name], "dash": "dot", "width": 1.5,
                                                      "shape": "hv"},
                hovertemplate=f"lower bound %{{y:.4g}} {time_unit}<extra></extra>",
            ))
    fig.update_layout(
        title=title,
        xaxis={"title": f"activation memory budget per device ({memory_unit})"},
        yaxis={"title": f"{objective.replace('_', ' ')} ({time_unit}), lower is better"},
        height=560, width=1000,
    )
    if never:
        fig.add_annotation(text=f"not drawn, over every budget swept: {', '.join(never)}", xref="paper",
                           yref="paper", x=0, y=1, xanchor="left", yanchor="bottom", showarrow=False,
                           font={"size": 12, "color": "#555"})
    return fig


# What to do when static export finds no browser: the system's package works offline (plotly's own hint,
# plotly_get_chrome, downloads Chrome).
NO_BROWSER_FIX = "install the system package (apt-get install chromium) or set BROWSER_PATH to a Chrome or Chromium"


def browser_path() -> str | None:
    """The Chrome or Chromium for PNG export: ``$BROWSER_PATH`` if set, else the system's Chromium, else None
    (kaleido then searches on its own)."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    for candidate in (shutil.which("chromium"), shutil.which("chromium-browser"), str(SYSTEM_CHROMIUM)):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def write_png(fig: go.Figure, path: Path) -> None:
    """Write ``fig`` as a PNG at its layout's size with kaleido, in the browser :func:`browser_path` names.

    The browser is passed to kaleido directly; the process environment is left alone. MathJax is off (no
    figure here uses it, and kaleido would fetch it from a CDN).
    """
    import kaleido

    browser = browser_path()
    options = {"format": "png", "width": fig.layout.width or 1400, "height": fig.layout.height or 800, "scale": 1}
    kaleido_options: dict[str, Any] = {"mathjax": False}
    if browser is not None:
        kaleido_options["path"] = browser
    path.write_bytes(kaleido.calc_fig_sync(fig, opts=options, kopts=kaleido_options))


PNG_ATTEMPTS = 3
"""How often a PNG export is tried before giving up. On a loaded machine kaleido now and then calls into its page
before the page's script has loaded (``ReferenceError: kaleido_scopes is not defined``); a second try in a fresh
browser succeeds."""


def _write_png_retrying(fig: go.Figure, path: Path) -> None:
    """:func:`write_png`, tried up to :data:`PNG_ATTEMPTS` times; a missing browser or package is not retried, nor
    a timeout (kaleido waits 90 s for a figure: a hanging browser would hold the command for minutes)."""
    for attempt in range(1, PNG_ATTEMPTS + 1):
        try:
            write_png(fig, path)
            return
        except (ImportError, TimeoutError):  # kaleido not installed; kaleido gave up waiting for its page
            raise
        except Exception as exc:
            if type(exc).__name__ == "ChromeNotFoundError" or attempt == PNG_ATTEMPTS:
                raise
            log.info("PNG export of %s failed on try %d of %d (%s); trying again", path.name, attempt,
                     PNG_ATTEMPTS, type(exc).__name__)


def save(
    fig: go.Figure, path: str | os.PathLike[str], png: bool = True, self_contained: bool = True, below: str = ""
) -> list[Path]:
    """Write ``fig`` to ``path`` with suffix .html (``below``, HTML, under the figure) and, if ``png`` and static
    export works, .png.

    The HTML embeds plotly.js (about 5 MB) so that it works offline; with ``self_contained=False`` it loads
    plotly.js from its CDN instead (small, but blank without a network). PNG export needs kaleido and a Chrome or
    Chromium (see :func:`browser_path`); when it fails the HTML is kept and a warning naming the fix is logged.
    Returns the paths written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    html = target.with_suffix(".html")
    # The figure's div named after the file, not a random id: the same figure writes the same file every time.
    page = fig.to_html(include_plotlyjs=True if self_contained else "cdn", div_id=slug(target.stem))
    html.write_text(page.replace("</body>", below + "</body>", 1) if below else page, encoding="utf-8")
    written = [html]
    if not png:
        return written
    image = target.with_suffix(".png")
    # Files are named without their folder: it may be a temporary one that is renamed when the result is done.
    try:
        _write_png_retrying(fig, image)
    except Exception as exc:  # kaleido raises several kinds (no browser, timeout, missing package)
        image.unlink(missing_ok=True)
        if type(exc).__name__ == "ChromeNotFoundError":
            browser = browser_path()
            where = "no Chrome or Chromium found" if browser is None else f"no browser at {browser!r}"
            log.warning("PNG export of %s skipped: %s; %s, or pass --no-png. %s has the same figure",
                        image.name, where, NO_BROWSER_FIX, html.name)
        else:
            reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            log.warning("PNG export of %s failed (%s: %s); %s has the same figure", image.name,
                        type(exc).__name__, reason, html.name)
    else:
        written.append(image)
    return written
