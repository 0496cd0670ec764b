"""The command line: the only module that touches argv, stdout, stderr and exit codes."""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console

from pipeplan import __version__
from pipeplan.config import load_config
from pipeplan.metrics import compute_metrics
from pipeplan.schedules import generate, names
from pipeplan.simulate import simulate

F = TypeVar("F", bound=Callable[..., Any])

# Exit status for a user error (bad config, flag or budget), as click uses for usage errors.
USER_ERROR = 2


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

    Console().print(metrics_table(f"{cfg.name}: {schedule_name}", metrics, cfg.units, cfg.problem.budget_per_device))


simulate_cmd.name = "simulate"


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
