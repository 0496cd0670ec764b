"""The command line: the only module that touches argv, stdout, stderr and exit codes."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from pipeplan import __version__
from pipeplan.config import OBJECTIVES, load_config
from pipeplan.metrics import compute_metrics
from pipeplan.planner import compare
from pipeplan.problem import ConfigError
from pipeplan.report.files import write_results
from pipeplan.schedules import generate, names
from pipeplan.simulate import simulate
from pipeplan.solver import Progress

F = TypeVar("F", bound=Callable[..., Any])

# Exit status for a user error (bad config, flag or budget), as click uses for usage errors.
USER_ERROR = 2


def _console() -> Console:
    """stdout as rich sees it; when piped, wide enough that tables are not squeezed into 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _debug_option(func: F) -> F:
    return click.option("--debug", is_flag=True, help="Show the full traceback of an error.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pipeplan")
def cli() -> None:
    """Plan pipeline-parallel training schedules: simulate named schedules, find optimal ones."""


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--schedule", "schedule_name", required=True, metavar="NAME",
              help=f"Schedule to simulate: one of {', '.join(names())}.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as a readable table or one JSON object.")
@_debug_option
def simulate_cmd(config: str, schedule_name: str, fmt: str, debug: bool) -> None:
    """Replay one named schedule on CONFIG and print its metrics.

    Example: pipeplan simulate models/seed-8x64.yaml --schedule 1f1b
    """
    cfg = load_config(config)
    schedule = generate(schedule_name, cfg.problem)
    metrics = compute_metrics(simulate(cfg.problem, schedule)).to_dict()
    if fmt == "json":
        click.echo(json.dumps(metrics, indent=2))
        return
    from pipeplan.report.tables import metrics_table

    _console().print(metrics_table(f"{cfg.name}: {schedule_name}", metrics, cfg.units, cfg.problem.budget_per_device))


simulate_cmd.name = "simulate"


class _ProgressLine:
    """Live solver progress on stderr (elapsed, incumbent, bound) when stderr is a terminal and not --quiet."""

    def __init__(self, enabled: bool, unit: str) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.unit = unit
        self.objective: float | None = None
        self.bound: float | None = None
        self.status = self.console.status("solving ...") if self.enabled else None

    def __enter__(self) -> _ProgressLine:
        if self.status is not None:
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)

    def __call__(self, report: Progress) -> None:
        if report.objective is not None:
            self.objective = report.objective
        if report.bound is not None:
            self.bound = report.bound
        if self.status is not None:
            self.status.update(format_progress(report.elapsed_s, self.objective, self.bound, self.unit))


def format_progress(elapsed_s: float, objective: float | None, bound: float | None, unit: str) -> str:
    """One progress line: elapsed time, best objective so far, best bound."""
    best = "-" if objective is None else f"{objective:g} {unit}"
    low = "-" if bound is None else f"{bound:g} {unit}"
    return f"solving: {elapsed_s:6.1f} s elapsed, best {best}, bound {low}"


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Solver time limit in seconds (overrides solver.time_limit_s).")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)), default=None,
              help="What to minimise (overrides solver.objective).")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="CP-SAT search workers (overrides solver.num_workers).")
@click.option("--seed", "random_seed", type=click.IntRange(min=0), default=None,
              help="CP-SAT random seed (overrides solver.random_seed).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as a readable table or one JSON object.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Write summary.json, metrics.csv and schedules/<name>.json to DIR (atomically).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@_debug_option
def solve(config: str, time_limit: float | None, objective: str | None, workers: int | None,
          random_seed: int | None, fmt: str, out: Path | None, force: bool, quiet: bool, debug: bool) -> None:
    """Find the optimal schedule for CONFIG's budget and compare it with every named schedule.

    Example: pipeplan solve models/seed-8x64.yaml --time-limit 30 --out results/seed
    """
    cfg = load_config(config)
    if out is not None and out.exists() and not force:
        raise ConfigError(f"output folder {str(out)!r} already exists; pass --force to replace it or pick another")
    overrides: dict[str, Any] = {"time_limit_s": time_limit, "objective": objective, "num_workers": workers,
                 "random_seed": random_seed}
    settings = replace(cfg.solver, **{k: v for k, v in overrides.items() if v is not None})
    with _ProgressLine(not quiet, cfg.units.time) as progress:
        comparison = compare(cfg.problem, settings, progress=progress)
    summary = comparison.summary(cfg.name)
    if out is not None:
        write_results(out, summary, comparison.timelines(), force=force)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    from pipeplan.report.tables import comparison_table

    console = _console()
    console.print(comparison_table(summary, cfg.units))
    opt = comparison.optimal
    console.print(
        f"optimizer: {opt.status} {opt.objective_name} {opt.objective:g} {cfg.units.time}, "
        f"lower bound {opt.lower_bound:g}, gap {100 * opt.gap:.2f} %, {opt.solve_time_s:.1f} s "
        f"(order from {opt.source}; best warm start {opt.best_heuristic} at {opt.best_heuristic_objective:g})"
    )
    for name, reason in comparison.skipped.items():
        console.print(f"skipped {name}: {reason}", style="dim")
    if out is not None:
        console.print(f"wrote {out}/summary.json, metrics.csv, schedules/")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: sys.argv[1:]) and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        cli.main(args=args, prog_name="pipeplan", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("pipeplan: interrupted", err=True)
        return 130
    except (ValueError, OSError) as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"pipeplan: error: {exc}", err=True)
        return USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
