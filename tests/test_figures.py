"""Figures read the timeline faithfully: one bar per op at its start and length, memory lines as the steps."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from pipeplan import OpKind, Problem, generate, memory_timeline, simulate
from pipeplan.report import figures
from pipeplan.report.figures import KIND_COLOURS, compare, gantt, memory_figure, memory_per_device, save

SPLIT = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=1.5, backward_weight=0.5, comm=0.25,
                activation=2.0, weight_activation=0.5, budget=5)


def test_gantt_has_a_bar_per_op_at_its_time() -> None:
    timeline = simulate(SPLIT, generate("1f1b", SPLIT))
    fig = gantt(timeline, title="trace")
    assert [trace.name[0] for trace in fig.data] == ["F", "B", "W"]
    assert len({trace.marker.color for trace in fig.data}) == 3
    bars = {}
    for trace in fig.data:
        for y, base, width, text, custom in zip(trace.y, trace.base, trace.x, trace.text, trace.customdata):
            bars[custom[0]] = (y, base, width, text, custom[1], custom[2], custom[3])
    assert len(bars) == len(timeline.ops) == 3 * 4 * 3
    for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
        y, base, width, text, hover_start, hover_end, action = bars[op.label]
        assert y == f"device {device}"
        assert (base, base + width) == (start, end)
        assert text == str(op.microbatch)
        assert (hover_start, hover_end) == (start, end)
        # as the exported CSV writes it: a split backward's B is I there (B1@s2 is 2I1)
        assert action == f"{op.stage}{'I' if op.kind is OpKind.B else op.kind.value}{op.microbatch}"
    assert "start" in fig.data[0].hovertemplate and "end" in fig.data[0].hovertemplate
    assert fig.data[0].marker.color == KIND_COLOURS[OpKind.F]


def test_memory_figure_follows_the_memory_timeline() -> None:
    timeline = simulate(SPLIT, generate("gpipe", SPLIT))
    fig = memory_figure(timeline)
    steps = memory_timeline(timeline)
    assert len(fig.data) == SPLIT.num_devices
    for device, trace in enumerate(fig.data):
        assert list(trace.x[:-1]) == [t for t, _ in steps[device]]
        assert list(trace.y[:-1]) == [level for _, level in steps[device]]
        assert trace.x[-1] == max(timeline.end)
        assert trace.line.shape == "hv"
    # GPipe fits 2 microbatches of 2 per flush in a budget of 5: the peak is 4 on every device.
    assert [max(trace.y) for trace in fig.data] == [4, 4, 4]
    budget_lines = [shape for shape in fig.layout.shapes if shape.y0 == shape.y1 == 5]
    assert len(budget_lines) == SPLIT.num_devices
    # Scaled (the size report shows its bytes in GiB): every level and the budget divided, the axis named.
    scaled = memory_figure(timeline, memory_unit="halves", scale=0.5)
    assert [max(trace.y) for trace in scaled.data] == [8, 8, 8]
    assert len([shape for shape in scaled.layout.shapes if shape.y0 == shape.y1 == 10]) == SPLIT.num_devices
    assert scaled.layout.yaxis.title.text == "halves"


def test_each_device_panel_has_its_own_budget_line() -> None:
    problem = Problem.build(num_stages=3, num_microbatches=4, forward=1.0, backward=1.5, backward_weight=0.5,
                            activation=2.0, weight_activation=0.5, budget=[7, 5, 6])
    timelines = [simulate(problem, generate(name, problem)) for name in ("gpipe", "1f1b")]
    for fig in (memory_figure(timelines[0]), memory_per_device(timelines, title="memory")):
        # The line sits on the axis of the panel that shows the device's memory, at the device's budget.
        panel_axes = [trace.yaxis for trace in fig.data[:problem.num_devices]]
        lines = {shape.yref: shape.y0 for shape in fig.layout.shapes}
        assert lines == {axis: budget for axis, budget in zip(panel_axes, problem.budget)}
        assert all(shape.y0 == shape.y1 and shape.line.dash == "dash" for shape in fig.layout.shapes)
    labels = {note.yref: note.text for note in fig.layout.annotations if note.text.startswith("budget")}
    assert labels == {axis: f"budget {budget:g}" for axis, budget in zip(panel_axes, problem.budget)}


def test_compare_stacks_gantt_and_memory_rows(tmp_path: Path) -> None:
    problem = Problem.build(num_stages=4, num_microbatches=8)
    timelines = [simulate(problem, generate(name, problem)) for name in ("gpipe", "1f1b")]
    fig = compare(timelines, ["GPipe", "1F1B"], title="two schedules")
    kinds_per_row = 2  # F and B, unsplit
    assert len(fig.data) == 2 * (kinds_per_row + problem.num_devices)
    peaks = [max(max(trace.y) for trace in fig.data[start:start + 4]) for start in (2, 8)]
    assert peaks == [8, 4]
    written = save(fig, tmp_path / "sub" / "cmp", png=False)
    assert written == [tmp_path / "sub" / "cmp.html"]
    assert "plotly" in written[0].read_text(encoding="utf-8").lower()


def test_large_gantt_drops_microbatch_labels() -> None:
    problem = Problem.build(num_stages=2, num_microbatches=40)
    fig = gantt(simulate(problem, generate("1f1b", problem)))
    assert all(trace.text is None for trace in fig.data)


def test_png_export_without_a_browser_points_at_the_system_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    with caplog.at_level(logging.WARNING, logger="pipeplan.report.figures"):
        written = save(fig, tmp_path / "out" / "gantt")
    assert written == [tmp_path / "out" / "gantt.html"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gantt.html"]
    (message,) = [record.getMessage() for record in _ours(caplog)]
    assert message.startswith(f"PNG export of gantt.png skipped: no browser at '{tmp_path / 'no-chromium-here'}'")
    assert "apt-get install chromium" in message and "set BROWSER_PATH" in message
    assert "plotly_get_chrome" not in message and "kaleido_get_chrome" not in message
    assert str(tmp_path / "out") not in message  # the folder may be a temporary one that is gone by then
    assert os.environ["BROWSER_PATH"] == str(tmp_path / "no-chromium-here")


def test_png_export_passes_the_browser_to_kaleido_and_leaves_the_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kaleido

    calls: list[dict[str, object]] = []

    def fake_calc_fig_sync(fig: object, opts: dict[str, object], kopts: dict[str, object]) -> bytes:
        calls.append({"opts": opts, "kopts": kopts})
        return b"\x89PNG\r\n\x1a\n"

    monkeypatch.setattr(kaleido, "calc_fig_sync", fake_calc_fig_sync)
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    chromium = tmp_path / "chromium"
    chromium.write_text("", encoding="utf-8")
    monkeypatch.setattr(figures, "SYSTEM_CHROMIUM", chromium)
    monkeypatch.setattr(figures.shutil, "which", lambda name: None)
    before = dict(os.environ)
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    written = save(fig, tmp_path / "gantt")
    assert written == [tmp_path / "gantt.html", tmp_path / "gantt.png"]
    assert calls == [{"opts": {"format": "png", "width": 1400, "height": fig.layout.height, "scale": 1},
                      "kopts": {"mathjax": False, "path": str(chromium)}}]
    assert dict(os.environ) == before
    monkeypatch.setenv("BROWSER_PATH", "/opt/chrome/chrome")
    save(fig, tmp_path / "gantt2")
    assert calls[-1]["kopts"] == {"mathjax": False, "path": "/opt/chrome/chrome"}


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of pipeplan's figures module: kaleido logs at DEBUG the first time a process uses it."""
    return [record for record in caplog.records if record.name == figures.log.name]


class FlakyPage(Exception):
    """Stands in for kaleido's JavascriptError when its page script has not loaded yet."""


def test_png_export_tries_again_after_a_failure_and_gives_up_after_the_last_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import kaleido

    failures = [FlakyPage("ReferenceError: kaleido_scopes is not defined")]
    tries: list[int] = []

    def calc_fig_sync(fig: object, opts: dict[str, object], kopts: dict[str, object]) -> bytes:
        tries.append(1)
        if failures:
            raise failures.pop()
        return b"\x89PNG\r\n\x1a\n"

    monkeypatch.setattr(kaleido, "calc_fig_sync", calc_fig_sync)
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    with caplog.at_level(logging.INFO, logger="pipeplan.report.figures"):
        written = save(fig, tmp_path / "once" / "gantt")
    assert written == [tmp_path / "once" / "gantt.html", tmp_path / "once" / "gantt.png"]
    assert len(tries) == 2
    assert [r.levelno for r in _ours(caplog)] == [logging.INFO]  # a retry that worked is no warning

    failures.extend(FlakyPage("ReferenceError: kaleido_scopes is not defined") for _ in range(figures.PNG_ATTEMPTS))
    tries.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeplan.report.figures"):
        written = save(fig, tmp_path / "never" / "gantt")
    assert written == [tmp_path / "never" / "gantt.html"]
    assert len(tries) == figures.PNG_ATTEMPTS
    assert sorted(p.name for p in (tmp_path / "never").iterdir()) == ["gantt.html"]
    (message,) = [record.getMessage() for record in _ours(caplog)]
    assert message.startswith("PNG export of gantt.png failed (FlakyPage: ReferenceError: kaleido_scopes")

    # A timeout has already waited kaleido's whole limit: no second try.
    failures.extend(TimeoutError() for _ in range(figures.PNG_ATTEMPTS))
    tries.clear()
    assert save(fig, tmp_path / "slow" / "gantt") == [tmp_path / "slow" / "gantt.html"]
    assert len(tries) == 1


@pytest.mark.skipif(figures.browser_path() is None, reason="no Chromium (apt-get install chromium)")
def test_png_export_draws_the_figure(tmp_path: Path) -> None:
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    written = save(fig, tmp_path / "gantt")
    assert written[-1] == tmp_path / "gantt.png"
    header = written[-1].read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == (1400, fig.layout.height)


def test_saved_html_embeds_plotly_unless_asked_not_to(tmp_path: Path) -> None:
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    (html,) = save(fig, tmp_path / "embedded", png=False)
    text = html.read_text(encoding="utf-8")
    assert "* plotly.js v" in text and "<script src" not in text
    (html,) = save(fig, tmp_path / "cdn", png=False, self_contained=False)
    assert 'src="https://cdn.plot.ly/plotly-' in html.read_text(encoding="utf-8")


def test_a_figure_saved_twice_writes_the_same_file(tmp_path: Path) -> None:
    # plotly names a figure's div by a random id: every run of the figure scripts changed the tracked HTML.
    fig = gantt(simulate(SPLIT, generate("1f1b", SPLIT)))
    first = save(fig, tmp_path / "a" / "gantt", png=False, self_contained=False)[0].read_bytes()
    second = save(fig, tmp_path / "b" / "gantt", png=False, self_contained=False)[0].read_bytes()
    assert first == second and b'id="gantt"' in first
