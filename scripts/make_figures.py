"""Figures for people: solve every model in models/ and draw what `pipeplan solve --out` reports, as PNG.

For each config it runs the same comparison as `pipeplan solve` (every named schedule and the CP-SAT optimum)
and writes into results/<model>/:

- summary.json and metrics.csv, as `pipeplan solve --out` writes them;
- schedules.png (+ .html): the Gantt chart and live memory per device of the report's baseline (1F1B, or the
  best named schedule within the budget when 1F1B does not apply) above the optimizer's schedule, on one axis;
- utilization.png (+ .html): utilization per schedule, the chosen one highlighted.

- report.png: a screenshot of the report.html that `pipeplan solve --out` writes (the page itself, 5 MB with
  plotly.js embedded, is not kept), taken with headless Chromium.

Then it sweeps the budget of one model (default split-8x32) like `pipeplan frontier` and writes
results/frontier-<model>.csv and .png. PNGs need plotly's static export (kaleido and Chrome or Chromium, e.g.
Debian's chromium) and /usr/bin/chromium for the screenshot; without them the HTML files are written and a
warning is logged.

    python scripts/make_figures.py [--models seed-8x64 ...] [--out results] [--time-limit S] [--no-png]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from pipeplan.config import Config, load_config
from pipeplan.frontier import frontier
from pipeplan.planner import compare
from pipeplan.problem import ConfigError
from pipeplan.report import figures
from pipeplan.report.figures import frontier_figure, save, utilization_bars
from pipeplan.report.files import config_record, frontier_frame, metrics_frame, write_folder, write_results
from pipeplan.report.html import REPORT_NAME, baseline, render_folder

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
FRONTIER_BUDGETS = {"split-8x32": [4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Files in models/ that are sizing studies, not pipeline configs.
SIZING_PREFIX = "size-"
log = logging.getLogger("make_figures")


def screenshot(page: Path, png: Path, height: int) -> bool:
    """A 1400-pixel-wide screenshot of ``page`` with headless Chromium, offline; False when it cannot be made."""
    if not Path(CHROMIUM).exists():
        log.warning("no chromium: skipping the screenshot %s", png)
        return False
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars",
             "--virtual-time-budget=20000", f"--window-size=1400,{height}", f"--screenshot={png}",
             page.resolve().as_uri()],
            capture_output=True, timeout=300, check=False,
        )
    if proc.returncode != 0 or not png.exists():
        log.warning("the screenshot %s failed: %s", png, proc.stderr.decode(errors="replace")[-500:])
        return False
    return True


def solve_model(config: Config, out: Path, png: bool, time_limit: float | None) -> str:
    """Compare the schedules of one model, write its folder, and return a one-line description."""
    settings = config.solver if time_limit is None else replace(config.solver, time_limit_s=time_limit)
    comparison = compare(config.problem, settings)
    summary = comparison.summary(config.name)
    summary["config"] = config_record(config.name, config.problem, settings, config.units)
    timelines = comparison.timelines()
    base = baseline(summary)
    drawn = ["optimal"] if base is None else [base, "optimal"]
    rows = {row["schedule"]: row for row in summary["schedules"]}
    unit = config.units.time
    objective = comparison.objective

    def describe(name: str) -> str:
        row = rows[name]
        return f"{name} {row[objective]:.4g} {unit}" + ("" if row["feasible"] else " (over budget)")

    def fill(folder: Path) -> None:
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        metrics_frame(summary["schedules"]).to_csv(folder / "metrics.csv", index=False)
        titles = [f"{name}: {objective.replace('_', ' ')} {rows[name][objective]:.4g} {unit}, bubble "
                  f"{100 * rows[name]['bubble']:.1f} %, peak memory {rows[name]['peak_memory']:g} {config.units.memory}"
                  for name in drawn]
        figure = figures.compare([timelines[name] for name in drawn], titles,
                                 title=f"{config.name}: {' and '.join(drawn)} (the optimizer's schedule)",
                                 time_unit=unit, memory_unit=config.units.memory)
        save(figure, folder / "schedules", png=png, self_contained=False)
        bars = utilization_bars(summary["schedules"], summary["chosen"],
                                title=f"{config.name}: utilization per schedule (higher is better)")
        bars.update_layout(width=900)
        save(bars, folder / "utilization", png=png, self_contained=False)
        if png:
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(tmp) / "run"

                def add_report(f: Path) -> None:
                    (f / REPORT_NAME).write_text(render_folder(f), encoding="utf-8")

                write_results(run, summary, timelines, extra=add_report)
                devices = config.problem.num_devices
                height = 1250 + 2 * (190 + 40 * devices) + (200 + 120 * devices) + 500
                screenshot(run / REPORT_NAME, folder / "report.png", height)

    write_folder(out, force=True, fill=fill)
    opt = comparison.optimal
    others = ", ".join(describe(name) for name in rows if name != "optimal")
    return (f"{config.name}: chosen {summary['chosen']}; optimal {opt.objective:.4g} {unit} {opt.status} "
            f"(bound {opt.lower_bound:.4g}, {opt.solve_time_s:.1f} s); {others}")


def sweep_model(config: Config, budgets: list[float], out: Path, png: bool, time_limit: float | None) -> str:
    """The memory-time frontier of one model: CSV and figure."""
    settings = config.solver if time_limit is None else replace(config.solver, time_limit_s=time_limit)
    rows = frontier(config.problem, budgets, settings)
    frontier_frame(rows).to_csv(out.with_suffix(".csv"), index=False)
    figure = frontier_figure(rows, settings.objective,
                             title=f"{config.name}: {settings.objective} against activation memory budget",
                             time_unit=config.units.time, memory_unit=config.units.memory)
    save(figure, out, png=png, self_contained=False)
    points = ", ".join(f"{row.budget:g}: {row.objective:.4g}" for row in rows
                       if row.schedule == "optimal" and row.objective is not None)
    return f"{config.name} frontier (budget: optimal {settings.objective}): {points}"


def pipeline_configs() -> list[str]:
    """The names of the pipeline configs in models/: every models/*.yaml but the sizing studies (size-*.yaml, for
    `pipeplan size`)."""
    return sorted(p.stem for p in MODELS.glob("*.yaml") if not p.name.startswith(SIZING_PREFIX))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=None,
                        help="model names in models/ (default: every models/*.yaml but the size-*.yaml studies)")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for the results")
    parser.add_argument("--time-limit", type=float, default=None, help="solver limit per solve (default: config)")
    parser.add_argument("--frontier", default="split-8x32", help="model whose budget is swept ('' for none)")
    parser.add_argument("--no-png", action="store_true", help="write the figures as HTML only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    names = args.models if args.models is not None else pipeline_configs()
    try:
        configs = [load_config(MODELS / f"{name}.yaml") for name in names]
        frontier_config = load_config(MODELS / f"{args.frontier}.yaml") if args.frontier else None
    except ConfigError as exc:
        print(f"make_figures.py: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, config in zip(names, configs):
        print(solve_model(config, out / name, not args.no_png, args.time_limit))
    if frontier_config is not None:
        budgets = FRONTIER_BUDGETS.get(args.frontier) or [
            frontier_config.problem.budget[0] * k / 4 for k in range(2, 9)]  # type: ignore[index]
        print(sweep_model(frontier_config, budgets, out / f"frontier-{args.frontier}", not args.no_png,
                          args.time_limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
