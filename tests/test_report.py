"""report.html: built from the result folder alone, self-contained, and drawn by a real browser.

The browser test opens the page in Debian's headless Chromium with every host unresolvable (so a page that
needed a CDN would draw nothing), dumps the DOM after the scripts ran, and checks that plotly drew each figure.
The screenshot is kept in tests/artifacts/report.png for people to look at.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from bad_configs import CONFIGS

from pipeplan.cli import USER_ERROR, main
from pipeplan.config import load_config
from pipeplan.report.files import read_results
from pipeplan.report.html import REPORT_NAME, figure_ids

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts"
# Four devices, unequal stages, split backward, comm latency, a per-device budget, units ms and GiB.
CONFIG = CONFIGS / "good-per-stage-split.yaml"
CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
SCREEN = (1400, 3000)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "run"
    code = main(["solve", str(CONFIG), "--out", str(out), "--time-limit", "2", "--workers", "1", "--quiet"])
    assert code == 0
    return out


def page(folder: Path) -> str:
    return (folder / REPORT_NAME).read_text(encoding="utf-8")


def test_report_is_one_self_contained_page(folder: Path) -> None:
    text = page(folder)
    assert text.count("* plotly.js v") == 1  # the library's banner: embedded exactly once
    assert "<script src" not in text and "<link" not in text  # nothing fetched from anywhere
    assert text.count("Plotly.newPlot(") == len(figure_ids(read_results(folder)))


def test_report_shows_the_problem_and_every_schedule(folder: Path) -> None:
    text = page(folder)
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert "<title>pipeplan report: uneven-4x12</title>" in text
    glance = text[text.index('<table class="glance">'):]
    glance = glance[:glance.index("</table>")]
    for cell in ("<th>devices (pipeline stages)</th><td>4</td>", "<th>microbatches per step</th><td>12</td>",
                 "<th>forward F (ms, per stage)</th><td>1.2, 1, 1, 1.4</td>",
                 "<th>weight gradient W (ms)</th><td>0.9, 0.8, 0.8, 1</td>",
                 "<th>comm latency (ms)</th><td>0.05</td>", "<th>budget per device (GiB)</th><td>8, 8, 6, 5</td>",
                 "<th>objective</th><td>makespan (lower is better)</td>"):
        assert cell in glance
    table = text[text.index('<table class="comparison">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r'<tr class="([a-z]*)"><td>([^<]*)</td>', table)
    assert [name.replace("&#9733; ", "").replace(" (chosen)", "") for _, name in rows] == [
        row["schedule"] for row in summary["schedules"]]
    chosen = [(css, name) for css, name in rows if css == "chosen"]
    assert chosen == [("chosen", f"&#9733; {summary['chosen']} (chosen)")]
    optimal = next(row for row in summary["schedules"] if row["schedule"] == "optimal")
    assert f">{optimal['status']}<" in table
    for header in ("makespan (ms)", "stage span (ms)", "bubble", "utilization", "peak memory (GiB)",
                   "fits budget", "optimizer status", "lower bound (ms)", "gap"):
        assert f"<th>{header}</th>" in table
    # The schedules that do not apply, one item per reason (as the terminal's "skipped" lines).
    assert "<li><b>zb-v, dualpipe-v, v-half, v-min</b>: need num_chunks 2 in V placement" in text
    assert "stopped early" not in text  # said only of a solve Ctrl-C cut short (tests/test_interrupts.py)


def test_report_command_rebuilds_the_same_page_from_the_files(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / REPORT_NAME).unlink()
    (copy / "metrics.csv").unlink()  # not needed: summary.json and schedules/ are enough
    assert main(["report", str(copy)]) == 0
    assert (copy / REPORT_NAME).read_bytes() == (folder / REPORT_NAME).read_bytes()
    assert main(["report", str(copy)]) == USER_ERROR  # never clobbered without --force
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["report", str(copy), "--force"]) == 0
    assert main(["report", str(copy), "--out", str(tmp_path / "elsewhere.html")]) == 0
    assert (tmp_path / "elsewhere.html").read_bytes() == (folder / REPORT_NAME).read_bytes()
    capsys.readouterr()
    assert main(["report", str(copy), "--out", str(tmp_path / "new" / "page.html")]) == 0  # folders made
    assert (tmp_path / "new" / "page.html").read_bytes() == (folder / REPORT_NAME).read_bytes()
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["page.html"]
    capsys.readouterr()
    assert main(["report", str(copy), "--out", "-"]) == 0
    assert capsys.readouterr().out.encode("utf-8") == (folder / REPORT_NAME).read_bytes()
    assert main(["report", str(copy), "--out", str(tmp_path)]) == USER_ERROR
    assert f"'{tmp_path}' is a folder; give the name of a file to write" in capsys.readouterr().err
    assert main(["report", str(copy), "--out", ""]) == USER_ERROR
    assert "Invalid value for '--out': is empty; give a file name" in capsys.readouterr().err
    # A name ending in '/' names a folder (a new user's trial: 'reports/' was written as a file named reports).
    assert main(["report", str(copy), "--out", f"{tmp_path / 'reports'}/"]) == USER_ERROR
    assert "ends in '/', so it names a folder, not a file; add the file's name after it" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()
    assert main(["export", str(copy), "--out", f"{tmp_path / 'csv'}/"]) == USER_ERROR
    assert "names a folder, not a file" in capsys.readouterr().err and not (tmp_path / "csv").exists()


def _tamper_op(folder: Path) -> None:
    path = folder / "schedules" / "1f1b.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    record["ops"][3]["end"] += 1.0
    path.write_text(json.dumps(record), encoding="utf-8")


def _drop_config(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    del summary["config"]
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def _edit_summary(folder: Path, key: str, value: object) -> None:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary[key] = value
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


def _edit_row(folder: Path, schedule: str, **fields: object) -> None:
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    row = next(row for row in summary["schedules"] if row["schedule"] == schedule)
    row.update(fields)
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")


# Edits of summary.json that a replay of schedules/ contradicts, each with the message naming the schedule,
# the field, the stored and the replayed value.
EDITED_SUMMARIES = [
    (lambda f: _edit_row(f, "1f1b", makespan=50), "schedule '1f1b': 'makespan' is 50 but the replay gives 50.9"),
    (lambda f: _edit_row(f, "zb-h2", feasible=True, peak_memory=3),
     "schedule 'zb-h2': 'feasible' is True but the replay gives False"),
    (lambda f: _edit_row(f, "zb-h2", peak_memory=3), "schedule 'zb-h2': 'peak_memory' is 3 but the replay gives 14"),
    (lambda f: _edit_row(f, "gpipe", utilization=0.9, bubble=0.1), "schedule 'gpipe': 'utilization' is 0.9"),
    (lambda f: _edit_row(f, "optimal", busy_per_device=[1, 2, 3, 4]), "schedule 'optimal': 'busy_per_device' is"),
    (lambda f: _edit_row(f, "zb-h1", peak_memory_per_device=[8, 6.5, 5]), "'peak_memory_per_device' is [8, 6.5, 5]"),
    (lambda f: _edit_row(f, "1f1b", stage_span=1), "schedule '1f1b': 'stage_span' is 1"),
    (lambda f: _edit_row(f, "optimal", gap=0.25), "schedule 'optimal': 'gap' is 0.25 but the replay gives 0;"),
    (lambda f: _edit_row(f, "optimal", lower_bound=99.0),
     "'lower_bound' (a bound never above the schedule) is 99 but the replay gives at most 47.75"),
    (lambda f: _edit_row(f, "optimal", status="FEASIBLE"), "schedule 'optimal': 'status' is 'FEASIBLE'"),
    (lambda f: _edit_summary(f, "chosen", "zb-h2"),
     "'chosen' is 'zb-h2', which its replay puts over the budget (a chosen schedule always fits it)"),
    (lambda f: _edit_summary(f, "chosen", "gpipe"), "'chosen' is 'gpipe', whose replay gives makespan 83.4, but "
     "'optimal' in the folder gives "),
    (lambda f: _edit_summary(f, "memory_budget", 80), "'memory_budget' is 80 but its 'config' record gives "),
    (lambda f: _edit_summary(f, "num_microbatches", 13), "'num_microbatches' is 13 but its 'config' record gives 12"),
]


@pytest.mark.parametrize(("edit", "message"), EDITED_SUMMARIES, ids=[m.split(":")[0][:40] for _, m in EDITED_SUMMARIES])
def test_report_rejects_a_summary_the_replay_contradicts(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path, edit: object, message: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    edit(copy)  # type: ignore[operator]
    code = main(["report", str(copy), "--out", str(tmp_path / "page.html")])
    err = capsys.readouterr().err
    assert code == USER_ERROR
    assert message in err, err
    assert "run 'pipeplan solve' again" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "page.html").exists()


def _replace_with_link(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def _replace_with_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: shutil.rmtree(f), "does not exist; give a folder written by 'pipeplan solve --out'"),
        (lambda f: (f / "summary.json").unlink(), "has no summary.json"),
        (lambda f: (f / "schedules" / "optimal.json").unlink(), "has no schedules/optimal.json"),
        (lambda f: (f / "summary.json").write_text("{", encoding="utf-8"), "summary.json is not valid JSON"),
        (_drop_config, "has no 'config' record"),
        (_tamper_op, "but its order replays to"),
        (lambda f: _edit_summary(f, "chosen", "nope"), "'chosen' is 'nope', not a schedule in the folder"),
        # These were internal errors (exit 1), or read /dev/zero until memory ran out.
        (lambda f: (f / "summary.json").write_bytes(b"\xff\xfe{"), "summary.json' is not UTF-8 text"),
        (lambda f: (f / "summary.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8"),
         "summary.json cannot be read (maximum recursion depth"),
        (lambda f: (f / "summary.json").write_text('{"a": ' + "9" * 10_000 + "}", encoding="utf-8"),
         "summary.json cannot be read (Exceeds the limit"),
        (lambda f: _replace_with_link(f / "summary.json", Path("/dev/zero")), "is larger than 400000000 bytes"),
        (lambda f: _replace_with_folder(f / "schedules" / "optimal.json"), "optimal.json' is a folder, not a file"),
    ],
    ids=["no-folder", "no-summary", "no-schedule", "bad-json", "no-config", "edited-times", "edited-chosen",
         "not-utf8", "nested", "huge-number", "dev-zero", "folder"],
)
def test_report_of_a_damaged_folder_exits_2(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path, damage: object, message: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    damage(copy)  # type: ignore[operator]
    code = main(["report", str(copy), "--out", str(tmp_path / "page.html")])
    err = capsys.readouterr().err
    assert code == USER_ERROR
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "page.html").exists()


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--virtual-time-budget=20000", "--hide-scrollbars",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, timeout=180, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_chromium_draws_every_figure_offline(folder: Path, tmp_path: Path) -> None:
    results = read_results(folder)
    url = (folder / REPORT_NAME).resolve().as_uri()
    proc = _chromium(tmp_path, "--dump-dom", url)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    dom = proc.stdout.decode()

    ids = figure_ids(results)
    assert ids[:2] == ["gantt-optimal", "gantt-1f1b"] and ids[-2:] == ["memory", "utilization"]
    starts = [dom.index(f'<div id="{fid}"') for fid in ids]
    assert starts == sorted(starts)
    segments = {fid: dom[start:end] for fid, start, end in zip(ids, starts, [*starts[1:], len(dom)])}
    for fid, segment in segments.items():
        opening = segment[:segment.index(">")]
        assert "js-plotly-plot" in opening, f"{fid} was not plotted"
        assert segment.count('class="main-svg"') >= 2, f"{fid} has no drawn svg"
    problem = results.config.problem
    num_ops = problem.num_devices * problem.num_microbatches * len(problem.kinds)
    for name in ("optimal", "1f1b"):  # a drawn bar per op
        assert segments[f"gantt-{name}"].count('class="point"') == num_ops
    # One memory line per device for each schedule drawn in full, and a bar per schedule.
    shown = sum(fid.startswith("gantt-") for fid in ids)
    assert segments["memory"].count('class="trace scatter') == shown * problem.num_devices
    assert segments["utilization"].count('class="point"') == len(results.summary["schedules"])

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    proc = _chromium(tmp_path, f"--screenshot={shot}", f"--window-size={SCREEN[0]},{SCREEN[1]}", url)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == SCREEN
    assert shot.stat().st_size > 100_000  # a blank or text-only page compresses to far less


def test_make_figures_script_writes_a_folder_per_model(tmp_path: Path) -> None:
    for _ in range(2):  # the second run replaces the first one's folder (it refused to, taking its figures as foreign)
        proc = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_figures.py"), "--models", "seed-8x64", "--frontier", "",
             "--no-png", "--out", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        )
        assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"seed-8x64: chosen 1f1b; optimal 213 units OPTIMAL \(bound 213, [0-9.]+ s\); "
                        r"gpipe 360 units, 1f1b 213 units\n", proc.stdout), proc.stdout
    folder = tmp_path / "seed-8x64"
    assert sorted(p.name for p in folder.iterdir()) == [
        "metrics.csv", "schedules.html", "summary.json", "utilization.html"]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["chosen"] == "1f1b" and summary["config"]["name"] == "seed-8x64"


def test_make_figures_by_default_takes_every_pipeline_config_and_no_sizing_study() -> None:
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "scripts" / "make_figures.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    names = script.pipeline_configs()
    studies = [p.stem for p in (ROOT / "models").glob("size-*.yaml")]
    assert studies and not set(studies) & set(names)
    assert len(names) + len(studies) == len(list((ROOT / "models").glob("*.yaml")))
    for name in names:  # each one loads as a pipeline config
        assert load_config(ROOT / "models" / f"{name}.yaml").problem.num_devices >= 1


def test_without_1f1b_the_report_sets_the_best_named_schedule_beside_the_optimizer(tmp_path: Path) -> None:
    config = tmp_path / "v.yaml"
    config.write_text("name: v-2x4\npipeline: {num_stages: 2, num_microbatches: 4, num_chunks: 2, placement: v}\n"
                      "costs: {forward: 1.0, backward: 1.0, backward_weight: 0.5, comm: 0.03}\n"
                      "memory: {activation: 1, weight_activation: 0.35, budget: 3}\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["solve", str(config), "--out", str(out), "--time-limit", "2", "--workers", "1", "--quiet"]) == 0
    results = read_results(out)
    assert "1f1b" in results.summary["skipped"]
    assert figure_ids(results) == ["gantt-optimal", "gantt-zb-v", "memory", "utilization"]
    text = page(out)
    assert "<th>chunks per device</th><td>2 (v placement)</td>" in text
    assert "<th>forward F (ms, per model stage)</th>" not in text  # units default to 'units'
    assert "<th>forward F (units, per model stage)</th><td>0.5</td>" in text  # 1.0 per device, over 2 chunks
    # With room for 3 activations the optimizer beats ZB-V (which peaks at 2): the headline says by how much.
    rows = {row["schedule"]: row for row in results.summary["schedules"]}
    assert results.summary["chosen"] == "optimal"
    faster = 100 * (1 - rows["optimal"]["makespan"] / rows["zb-v"]["makespan"])
    assert f"{faster:.1f} % faster than zb-v ({rows['zb-v']['makespan']:.6g})" in text


def test_the_headline_also_names_the_best_named_schedule_within_the_budget() -> None:
    """Under a budget 1F1B is fitted with a shorter warm-up and GPipe in more flushes can beat it: the headline
    compared only with 1F1B ("35.8 % faster than 1f1b (163.9)") although GPipe (155.4) was the better named plan."""
    from pipeplan.config import Units
    from pipeplan.report.html import _headline

    def row(name: str, makespan: float, **extra: object) -> dict[str, object]:
        return {"schedule": name, "makespan": makespan, "bubble": 0.1, "peak_memory": 4, "feasible": True, **extra}

    summary = {"objective": "makespan", "chosen": "optimal", "memory_budget": 4,
               "schedules": [row("gpipe", 155.4), row("1f1b", 163.9), row("zb-h1", 170.0, feasible=False),
                             row("optimal", 105.3, status="FEASIBLE", lower_bound=96.97, gap=0.079)]}
    text = _headline(summary, Units(time="ms", memory="GiB"))
    assert "35.8 % faster than 1f1b (163.9) and 32.2 % faster than the best named schedule within the budget, " \
           "gpipe (155.4)." in text, text
    summary["schedules"][0]["feasible"] = False  # 1F1B is the best that fits: named once
    assert "than 1f1b (163.9). The optimizer" in _headline(summary, Units(time="ms", memory="GiB"))
    # A chosen named schedule is the best named one: only the baseline is set beside it (a tie on the objective,
    # broken by memory, read "0.0 % faster than gpipe").
    summary |= {"chosen": "1f1b", "memory_budget": None}
    summary["schedules"][0] |= {"feasible": True, "makespan": 163.9}
    assert "faster than" not in _headline(summary, Units(time="ms", memory="GiB"))
    # A tie with the baseline when another schedule is chosen reads as one, not "0.0 % faster than 1f1b".
    summary["chosen"] = "gpipe"
    tie = _headline(summary, Units(time="ms", memory="GiB"))
    assert "; as fast as 1f1b (163.9)" in tie and "0.0 % faster" not in tie, tie


def _damage_everywhere(summary: dict[str, object]) -> list[tuple[str, dict[str, object]]]:
    """Every field of a summary (and of its first schedule and skipped entry) deleted or given a wrong type."""
    import copy

    damaged = []
    for key in summary:
        for value in (None, "x", [], {}):
            if key in ("config",):
                continue
            edited = copy.deepcopy(summary)
            edited[key] = value
            damaged.append((f"{key}={value!r}", edited))
        edited = copy.deepcopy(summary)
        del edited[key]
        damaged.append((f"no {key}", edited))
    for key in summary["schedules"][0]:  # type: ignore[index]
        for value in (None, "x", []):
            edited = copy.deepcopy(summary)
            edited["schedules"][0][key] = value  # type: ignore[index]
            damaged.append((f"schedules[0].{key}={value!r}", edited))
    return damaged


def test_report_of_any_structurally_damaged_summary_is_a_user_error(
    capsys: pytest.CaptureFixture[str], folder: Path, tmp_path: Path
) -> None:
    """A summary.json with any field missing or of the wrong type exits 2 with one line, never a traceback or
    an internal error (the report reads only fields it has checked)."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for label, edited in _damage_everywhere(summary):
        (copy / "summary.json").write_text(json.dumps(edited), encoding="utf-8")
        code = main(["report", str(copy), "--out", str(tmp_path / "page.html"), "--force"])
        err = capsys.readouterr().err
        if code == 0:  # a field the report does not need (e.g. 'skipped' emptied) may still render
            continue
        assert code == USER_ERROR, (label, err)
        assert err.count("\n") == 1 and "internal error" not in err, (label, err)
