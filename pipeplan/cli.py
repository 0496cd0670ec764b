"""The command line: the only module that touches argv, stdout, stderr and exit codes."""

from __future__ import annotations

import contextlib
import decimal
import logging
import math
import os
import select
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self, TypeVar

import click
from rich.console import Console
from rich.text import Text

from pipeplan import __version__
from pipeplan.config import MAX_SEED, MAX_WORKERS, OBJECTIVES, Config, SolverSettings, load_config
from pipeplan.frontier import SweepProgress, frontier
from pipeplan.metrics import compute_metrics
from pipeplan.planner import compare
from pipeplan.problem import ConfigError, PipeplanError, counted, did_you_mean, shown
from pipeplan.reading import STDIN
from pipeplan.report.files import (
    CSV_FLOAT_FORMAT,
    WriteInterrupted,
    check_output_file,
    check_output_folder,
    config_record,
    is_unfinished_sweep,
    printed_json,
    summary_json,
    write_file,
    write_folder,
    write_results,
)
from pipeplan.schedules import generate, group_reasons, names
from pipeplan.simulate import simulate
from pipeplan.solver import STALLED, Progress, SolveResult, StopRequest

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# Exit status for a user error (bad config, flag or budget), as click uses for usage errors.
USER_ERROR = 2
# What `solve --out DIR` writes in DIR.
_SOLVE_FILES = "summary.json, metrics.csv, schedules/, report.html"


class OutputClosed(Exception):
    """The reader of the command's output closed it early (``pipeplan solve ... | head -1``)."""


class _Stdout(Console):
    """The console of a command's output. When its reader closes it early rich points stdout at /dev/null and
    ends the process with status 1, the status of a bug here; this raises :class:`OutputClosed` instead, which
    :func:`main` answers (a broken pipe raised by click, or by rich versions before ``on_broken_pipe``, reaches
    :func:`main` as click's status 1, answered there too)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise OutputClosed


class _Stderr(Console):
    """A console for progress and status lines on stderr. If their reader is gone the run goes on without them
    (rich would end the process with status 1 and point stdout, the command's output, at /dev/null)."""

    def __init__(self) -> None:
        super().__init__(stderr=True, markup=False)

    def on_broken_pipe(self) -> None:
        self.quiet = True


def _output_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error, or a hang-up on the BSDs)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured output) or no poll here
        return False


def _console() -> Console:
    """stdout as rich sees it; when piped, as wide as $COLUMNS says, else 160 so tables are not squeezed. Text is
    never read as rich markup: names and units from a config (``name: "run [v2]"``) are printed as written."""
    console = _Stdout(markup=False)
    return console if console.is_terminal or "COLUMNS" in os.environ else _Stdout(width=160, markup=False)


# Exit status for a bug in pipeplan (an exception that is not a user error).
INTERNAL_ERROR = 1
# Exit statuses after Ctrl-C and SIGTERM, as a shell reports a process ended by those signals (128 + signal).
INTERRUPTED = 130
TERMINATED = 143
# Exit status when the reader of the output closed it early, as for a process ended by SIGPIPE (128 + 13).
OUTPUT_CLOSED = 141


class _OnceEach(logging.Filter):
    """Lets each warning's text through once: a frontier or sweep solves one problem per budget, and
    the solver's warning about costs that are not whole ticks came once per budget, word for word. Records below
    WARNING (--debug's) all pass."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        text = record.getMessage()
        if text in self.seen:
            return False
        self.seen.add(text)
        return True


# The filter of the handler :func:`_log_to_stderr` installs; its texts are forgotten at each run of :func:`main`.
_ONCE = _OnceEach()


class _Lines(logging.Formatter):
    """A record as ``pipeplan: warning: text`` (``info``, ``debug`` with --debug), as errors read ``pipeplan: error:
    text``; another library's under its logger's name (``ray: warning: text``)."""

    def __init__(self) -> None:
        super().__init__("%(source)s: %(level)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.level = record.levelname.lower()
        record.source = "pipeplan" if record.name.split(".")[0] in ("pipeplan", "root") else record.name
        return super().format(record)


def _log_to_stderr() -> None:
    """Warnings on stderr as ``pipeplan: warning: text``, each text once a run (:class:`_OnceEach`); the handler is
    installed only when the application (or a test harness) has set up no logging, as :func:`logging.basicConfig`
    would."""
    _ONCE.seen.clear()
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(_Lines())
    handler.addFilter(_ONCE)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


class _Run:
    """State of one command-line run that the error handling in :func:`main` needs."""

    def __init__(self) -> None:
        self.debug = False


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(_Run).debug = True
        logging.getLogger().setLevel(logging.DEBUG)


def _debug_option(func: F) -> F:
    return click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        help="Show the full traceback of an error.")(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pipeplan")
def cli() -> None:
    """Plan pipeline-parallel training schedules: simulate named schedules, find optimal ones.

    \b
    Examples:
      pipeplan simulate models/seed-8x64.yaml --schedule 1f1b
      pipeplan solve models/seed-8x64.yaml --out out/seed
      pipeplan report out/seed --force
      pipeplan export out/seed --out seed.csv
      pipeplan frontier models/split-8x32.yaml --budgets 8:16:2
      pipeplan size models/size-llama3.1-70b.yaml --out llama

    A config or study given as - is read from the standard input. A bad config or flag exits with status 2 and a
    one-line message; add --debug for the traceback.
    """


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--schedule", "schedule_name", default=None, metavar="NAME",
              help=f"Schedule to simulate: one of {', '.join(names())}.")
@click.option("--from-torch-csv", "torch_csv", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              metavar="FILE", help="Instead of a named schedule, replay the per-rank order of a PyTorch "
              "compute-only schedule CSV (torchtitan's --parallelism.pipeline_parallel_schedule_csv file; - for "
              "stdin).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as a readable table or one JSON object.")
@_debug_option
def simulate_cmd(config: str, schedule_name: str | None, torch_csv: str | None, fmt: str) -> None:
    """Replay one named schedule, or a PyTorch schedule CSV, on CONFIG and print its metrics.

    \b
    Examples:
      pipeplan simulate models/seed-8x64.yaml --schedule 1f1b
      pipeplan simulate models/v-4x8.yaml --from-torch-csv models/torch-dualpipev-4x8.csv
    """
    if schedule_name is None and torch_csv is None:
        raise click.UsageError("Missing option '--schedule' NAME, or give '--from-torch-csv' FILE instead (one "
                               "of the two)")
    if schedule_name is not None and torch_csv is not None:
        raise click.UsageError("Give either '--schedule' NAME or '--from-torch-csv' FILE, not both")
    if config == STDIN and torch_csv == STDIN:
        raise click.UsageError("CONFIG and '--from-torch-csv' cannot both be '-' (one standard input); give one "
                               "of them as a file")
    cfg = load_config(_announced(config))
    if torch_csv is not None:
        from pipeplan.reading import TORCH_CSV_BYTES, read_stdin
        from pipeplan.torch_csv import from_torch_csv, read_torch_csv

        if _announced(torch_csv, "the torch CSV") == STDIN:  # "-" as typed (./- is the file of that name)
            text = read_stdin("torch CSV on the standard input", TORCH_CSV_BYTES, keep_mark=True)
            schedule = from_torch_csv(cfg.problem, text, name="stdin", source="the standard input")
        else:
            schedule = read_torch_csv(cfg.problem, Path(torch_csv))
        schedule_name = schedule.name
    else:
        assert schedule_name is not None
        if schedule_name == "optimal":
            raise ConfigError(f"'optimal' is the optimizer's schedule, not a named one: `pipeplan solve {config}` "
                              f"finds it and prints its metrics beside the named schedules' (named schedules: "
                              f"{', '.join(names())})")
        schedule = generate(schedule_name, cfg.problem)
    metrics = compute_metrics(simulate(cfg.problem, schedule)).to_dict()
    if fmt == "json":
        click.echo(printed_json(metrics))
        return
    from pipeplan.report.tables import metrics_table

    _console().print(metrics_table(f"{cfg.name}: {schedule_name}", metrics, cfg.units, cfg.problem.budget))


simulate_cmd.name = "simulate"


class _StatusLine:
    """A rich status line on stderr, shown for the duration of a ``with`` block when ``status`` is set."""

    status: Any = None

    def __enter__(self) -> Self:
        if self.status is not None:
            self.status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)


class _Writing(_StatusLine):
    """A status line, "writing DIR ...", on stderr while a result is written, when stderr is a terminal and not
    --quiet: the report of a large model takes seconds to render."""

    def __init__(self, enabled: bool, what: str) -> None:
        console = _Stderr()
        if enabled and console.is_terminal:
            self.status = console.status(Text(f"writing {what} ..."))  # a Text: never read as markup


class _PlainLines:
    """Progress as plain lines on a stderr that is not a terminal (--progress on a pipe): one a second at most;
    a line the limit held back is printed by :meth:`flush` (at the end, or before a new phase starts)."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.last_line: float | None = None  # when the last line was printed
        self.held: Callable[[], str] | None = None  # the last line offered and not printed, rendered when printed

    def offer(self, render: Callable[[], str], always: bool = False) -> None:
        """Print ``render()`` now if a second has passed since the last line (or ``always``), else hold it."""
        if not self.enabled:
            return
        self.held = render
        if always or self.last_line is None or time.monotonic() - self.last_line >= 1.0:
            self.flush()

    def flush(self) -> None:
        if self.held is not None:
            self.console.print(self.held(), highlight=False, markup=False, soft_wrap=True)
            self.last_line, self.held = time.monotonic(), None


# What the progress line of `solve` says in each step of :func:`pipeplan.planner.compare` ("solving" shows the
# elapsed time and the best objective and bound so far).
_PHASES = {"named": "replaying the named schedules ...", "search": "solving",
           "layouts": "replaying the named schedules on the other layouts ..."}


class _ProgressLine(_StatusLine):
    """Live solver progress on stderr when stderr is a terminal and not --quiet: a line that ticks every
    fraction of a second with the elapsed time, and shows the best objective and bound as the solver reports
    them ("solving:   12.3 s elapsed, best 91.34 ms, bound 87.21 ms").

    Called with a solver :class:`Progress`, or with a :class:`SweepProgress` during a frontier sweep, which
    adds which budget is being solved ("budget 3/7 (12 slots)"). With ``forced`` (--progress) on a stderr that
    is not a terminal, the same line is printed plainly (:class:`_PlainLines`): each budget's start, then one a
    second at most, the last before the next budget and at the end.
    """

    def __init__(self, enabled: bool, unit: str, memory_unit: str = "", forced: bool = False) -> None:
        self.console = _Stderr()
        self.enabled = enabled and self.console.is_terminal
        self.lines = _PlainLines(self.console, forced and not self.console.is_terminal)
        self.unit = unit
        self.memory_unit = memory_unit
        self.prefix = ""
        self.phase = "solving"
        self.started = time.monotonic()
        self.objective: float | None = None
        self.bound: float | None = None
        # rich re-renders the status every refresh, so the elapsed time moves even while the solver is silent.
        self.status = self.console.status(self) if self.enabled else None

    def __rich__(self) -> str:
        if self.phase != "solving":
            line = self.phase
        else:
            line = format_progress(time.monotonic() - self.started, self.objective, self.bound, self.unit)
        return f"{self.prefix}: {line}" if self.prefix else line

    def __call__(self, report: Progress | SweepProgress) -> None:
        if isinstance(report, SweepProgress):
            if report.solve is None:
                self.lines.flush()  # the budget before this one: its last report
                self.prefix = format_sweep(report, self.memory_unit)
                self.objective = self.bound = None
                self.phase = "named schedules ..."
                self.started = time.monotonic()
                self.lines.offer(self.__rich__, always=True)  # each budget's start
                return
            report = report.solve  # the prefix is the budget's, set by its start report (frontier sends one first)
        self.phase = "solving"
        if report.objective is not None:
            self.objective = report.objective
        if report.bound is not None:
            self.bound = report.bound
        self.lines.offer(self.__rich__)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.lines.flush()  # the last report, when the one-a-second limit held it back


_INTERRUPTED_SEARCH = "interrupted: the search was stopped early; the results above are the best found by then"


def _while_writing(exc: BaseException) -> str:
    """What a Ctrl-C that ended the run left unwritten, when it came while a result was written: the write's
    guard raises :class:`WriteInterrupted`, or hands the signal on to the handler before it, whose own
    KeyboardInterrupt then carries the guard's as its context."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, WriteInterrupted):
        seen = seen.__context__
    if seen is None:
        return ""
    return f" while writing {seen.path}: its results were not written; run the command again to write them"


def _interrupted_late(what: str, but: str = "") -> str:
    """The message for a Ctrl-C that came once ``what`` had finished: the results shown are whole (``but`` for
    what they lack)."""
    return f"interrupted after {what} had finished: the results above are complete{' ' + but if but else ''}"


def _exit_if_interrupted(stop: StopRequest, message: str = _INTERRUPTED_SEARCH) -> None:
    """After a run that Ctrl-C cut short (its output written, marked interrupted), say so (``message``) and exit
    130."""
    if stop.requested:
        click.echo(f"pipeplan: {message}", err=True)
        raise click.exceptions.Exit(INTERRUPTED)


class Terminated(BaseException):
    """SIGTERM arrived: abort at once (not an Exception, so that nothing on the way catches it)."""


# A second Ctrl-C this soon after the first is the same one delivered twice: ``timeout -s INT`` signals the
# command and then its whole process group, which holds the command too. No one presses Ctrl-C twice this fast.
SAME_INTERRUPT_S = 0.1


class _Interrupts:
    """Ctrl-C during a search: the first one stops the search, which finishes with the best schedule found so
    far (the run then exits 130); a second one (:data:`SAME_INTERRUPT_S` or more later), or SIGTERM, aborts at
    once. Handlers are restored on exit."""

    def __init__(self, stop: StopRequest, finishing: str = "finishing with the best schedule found so far") -> None:
        self.stop = stop
        self.finishing = finishing
        self.previous: dict[int, Any] = {}  # keyed by signal number: the handler to restore
        self.first = -math.inf  # when the first Ctrl-C came (time.monotonic())

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self.previous = {signal.SIGINT: signal.signal(signal.SIGINT, self._on_interrupt),
                             signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_terminate)}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _on_interrupt(self, _signum: int, _frame: object) -> None:
        now = time.monotonic()
        if self.stop.requested:
            if now - self.first < SAME_INTERRUPT_S:
                return
            raise KeyboardInterrupt
        self.first = now
        self.stop.request()
        if self.finishing:  # empty while a folder is written: its own guard answers the Ctrl-C
            click.echo(f"pipeplan: interrupted: {self.finishing} (Ctrl-C again to abort)", err=True)

    def _on_terminate(self, _signum: int, _frame: object) -> None:
        raise Terminated


def optimizer_notes(result: SolveResult) -> list[str]:
    """What a user should know about an optimizer answer beyond its numbers: why the search did not run or found
    nothing, and why a tiny gap is not a proof."""
    notes = []
    status, _, ended = result.search.partition("; ")
    if ended.startswith(STALLED):  # the whole-model search stalled and gave its time to what follows it
        found = ("the answer is the neighbourhood search's" if result.source == "lns" else
                 "the answer is CP-SAT's" if result.source == "cp-sat" else
                 f"the answer is the best warm start ({result.source})")
        notes.append(f"search: the whole-model search ({status}) {ended}; {found}")
    elif result.search.startswith(("skipped", "stopped")) or result.search == "UNKNOWN":
        if result.search != "UNKNOWN":
            what = result.search
        elif result.interrupted:
            what = "the whole-model search was stopped before it found a schedule"
        else:
            what = "the whole-model search found no schedule in time"
        if result.source == "lns":  # the neighbourhood search ran after it and improved on the warm starts
            notes.append(f"search: {what}; the answer is the neighbourhood search's, which improved on the warm "
                         "starts")
        else:
            notes.append(f"search: {what}; the answer is the best warm start ({result.source})")
    if result.status != "OPTIMAL" and not result.exact_ticks:
        notes.append("costs or memory are not whole ticks (about a millionth of their largest value), so CP-SAT "
                     "solved a rounded-down relaxation: its bound can sit a hair below the optimum, and a gap that "
                     "small does not mean a better schedule exists")
    return notes


def skipped_lines(skipped: dict[str, str]) -> list[str]:
    """A line per reason the named schedules do not apply, each naming every schedule it holds for ("skipped zb-v,
    v-half, v-min: need num_chunks 2 in V placement ..."): eight lines said the same of four V schedules."""
    return [f"skipped {', '.join(schedules)}: {reason}" for schedules, reason in group_reasons(skipped)]


def format_progress(elapsed_s: float, objective: float | None, bound: float | None, unit: str) -> str:
    """One progress line: elapsed time, best objective so far, best bound."""
    best = "-" if objective is None else f"{objective:g} {unit}"
    low = "-" if bound is None else f"{bound:g} {unit}"
    return f"solving: {elapsed_s:6.1f} s elapsed, best {best}, bound {low}"


def format_sweep(report: SweepProgress, memory_unit: str) -> str:
    """Which budget of a frontier sweep is running, e.g. "budget 3/7 (12 slots)"."""
    from pipeplan.report.tables import format_memory

    unit = f" {memory_unit}" if memory_unit else ""
    return f"budget {report.index + 1}/{report.total} ({format_memory(report.budget)}{unit})"


def _settings(cfg: Config, **overrides: Any) -> SolverSettings:
    """The config's solver settings with the command line's flags (those given) on top."""
    return replace(cfg.solver, **{k: v for k, v in overrides.items() if v is not None})


def _announced(path: str, what: str = "the YAML") -> str:
    """``path`` as given; when it is ``-`` and the standard input is a terminal, say first on stderr that ``what``
    is read from there (without it the command would look hung)."""
    isatty = getattr(sys.stdin, "isatty", None)  # a stand-in stdin may not have one
    try:
        terminal = path == STDIN and callable(isatty) and bool(isatty())
    except ValueError:  # a closed standard input: reading it says so
        terminal = False
    if terminal:
        end = "Ctrl-Z then Enter" if os.name == "nt" else "Ctrl-D"
        click.echo(f"pipeplan: reading {what} from the standard input; end it with {end}", err=True)
    return path


def _refuse_existing(out: Path | None, force: bool, kind: str = "solve") -> None:
    """Fail early, before a long solve, when --out may not be replaced or cannot be created (saying so when it is
    another command's unfinished sweep, which --force would lose); warn that --force does nothing without --out.
    ``kind``: the command, as named in the message."""
    if out is not None:
        if not force and is_unfinished_sweep(out):
            _refuse_unfinished(out, kind)
        check_output_folder(out, force)
    elif force:
        log.warning("--force does nothing without --out DIR (it lets pipeplan replace that folder)")


def _refuse_unfinished(out: Path, kind: str) -> None:
    """Refuse ``out`` when it holds an unfinished sweep of a command other than ``kind`` (its store only): only
    that command resumes it, and replacing the folder would lose what it finished."""
    from pipeplan.store import stored_kinds

    others = sorted((stored_kinds(out / STORE_NAME) or frozenset()) - {kind})
    if others:
        raise ConfigError(f"output folder {str(out)!r} holds an unfinished 'pipeplan {others[0]}' run (its "
                          f"store only); run 'pipeplan {others[0]}' with this --out again to resume it, or "
                          f"pick another --out for this {kind} (--force replaces it)")


def _warn_refresh_without_store(refresh: bool, store: Any) -> None:
    if refresh and store is None:
        log.warning("--refresh does nothing without a store (--out DIR or --store FILE): every task runs anyway")


# --out - as the command line gives it (./- is a file of that name: Path("./-") is Path("-") but not this one).
STDOUT = Path(STDIN)


class _OutPath(click.Path):
    """An --out path that is not empty (an empty one would silently mean the current folder). ``-`` is the standard
    output where ``stdout`` says it may be (whatever the working folder holds of that name: ./- is that); elsewhere
    it is refused, not taken as a folder or file named -, as ``-`` reads or writes a stream everywhere else."""

    def __init__(self, what: str, file_okay: bool = True, dir_okay: bool = True, stdout: str = "") -> None:
        super().__init__(file_okay=file_okay, dir_okay=dir_okay, path_type=Path)
        self.what = what
        self.stdout = stdout  # "" when - may not be the standard output, else what to do instead

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail(f"is empty; give a {self.what} name", param, ctx)
        if value == STDIN:
            if not self.stdout:
                return STDOUT
            self.fail(f"'-' (the standard output) cannot hold a {self.what}; {self.stdout}", param, ctx)
        if self.what == "file" and isinstance(value, str) and value.endswith(("/", os.sep)):
            # A path read as a file drops the slash: 'reports/' used to be written as a file named reports.
            self.fail(f"{value!r} ends in '/', so it names a folder, not a file; add the file's name after it", param,
                      ctx)
        if isinstance(value, str) and not self.dir_okay and os.path.isdir(value):
            self.fail(f"{value!r} is a folder; give the name of a {self.what} to write", param, ctx)
        if isinstance(value, str) and not self.file_okay and os.path.exists(value) and not os.path.isdir(value):
            self.fail(f"{value!r} is a file, not a folder; give a new folder name (pipeplan writes several files "
                      "into it)", param, ctx)
        return super().convert(value, param, ctx)


class _ResultsFolder(click.Path):
    """A results folder to read; ``-`` is refused as the standard input, which cannot be one (./- is a folder of
    that name)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == STDIN:
            raise ConfigError("a results folder cannot be read from the standard input ('-'); give a folder "
                              "written by 'pipeplan solve --out'")
        return super().convert(value, param, ctx)


RESULTS_FOLDER = _ResultsFolder()
OUT_FOLDER = _OutPath("folder", file_okay=False, stdout="give a folder name (./- is a folder named -)")
OUT_FILE = _OutPath("file", dir_okay=False)
STORE_FILE = _OutPath("file", stdout="give a file name (./- is a file named -)")


class _Seconds(click.ParamType[float]):
    """A positive, finite number of seconds (click's FloatRange lets 'nan' and 'inf' through)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (math.isfinite(seconds) and seconds > 0):
            self.fail(f"{value!r} is not a positive, finite number of seconds", param, ctx)
        return seconds


_SECONDS = _Seconds()


class _Whole(click.IntRange):
    """A whole number in a range, named so in errors: click's IntRange says "'1.5' is not a valid integer range"."""

    name = "whole number"


def _solver_options(func: F) -> F:
    """The flags every solving command shares; each overrides the config's ``solver`` section."""
    options = [
        click.option("--time-limit", type=_SECONDS, default=None, metavar="S",
                     help="Solver time limit in seconds, per solve (overrides solver.time_limit_s)."),
        click.option("--objective", type=click.Choice(list(OBJECTIVES)), default=None,
                     help="What to minimise (overrides solver.objective)."),
        click.option("--workers", type=_Whole(min=1, max=MAX_WORKERS), default=None, metavar="N",
                     help="CP-SAT search workers (overrides solver.num_workers)."),
        click.option("--seed", "random_seed", type=_Whole(min=0, max=MAX_SEED), default=None, metavar="N",
                     help="CP-SAT random seed (overrides solver.random_seed)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@cli.command(short_help="Find the optimal schedule and compare it with every named one.")
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@_solver_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as a readable table or one JSON object.")
@click.option("--out", type=OUT_FOLDER, default=None, metavar="DIR",
              help="Write summary.json, metrics.csv, schedules/<name>.json and report.html to DIR (atomically).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@_debug_option
def solve(config: str, time_limit: float | None, objective: str | None, workers: int | None,
          random_seed: int | None, fmt: str, out: Path | None, force: bool, quiet: bool) -> None:
    """Find the optimal schedule for CONFIG's budget and compare it with every named schedule.

    Prints every schedule's makespan, stage span, bubble and peak memory, the optimizer's status,
    bound and gap, and marks the chosen schedule. With --out, DIR/report.html shows it all in a browser.

    \b
    Example:
      pipeplan solve models/seed-8x64.yaml --time-limit 30 --out out/seed
    """
    cfg = load_config(_announced(config))
    _refuse_existing(out, force)
    settings = _settings(cfg, time_limit_s=time_limit, objective=objective, num_workers=workers,
                         random_seed=random_seed)
    stop = StopRequest()
    # Ctrl-C after the search: while the other layouts are compared, the schedules not replayed yet are left out;
    # while the folder is written, the write's guard drops it whole (main then names it); while the answer is
    # shown, that finishes (a second Ctrl-C aborts), as during a sweep.
    with _Interrupts(stop) as interrupts:
        def phase(step: str) -> None:
            progress.phase = _PHASES[step]
            if step == "layouts":
                interrupts.finishing = "the search is over: stopping the comparison with the other layouts"

        with _ProgressLine(not quiet, cfg.units.time) as progress:
            comparison = compare(cfg.problem, settings, progress=progress, stop=stop, phase=phase)
        summary = comparison.summary(cfg.name)
        summary["config"] = config_record(cfg.name, cfg.problem, settings, cfg.units)
        if out is not None:
            from pipeplan.report.html import REPORT_NAME, render_folder

            def add_report(folder: Path) -> None:
                (folder / REPORT_NAME).write_text(render_folder(folder), encoding="utf-8")

            interrupts.finishing = ""  # the write's guard drops the folder on a Ctrl-C, and main says so
            with _Writing(not quiet, str(out)):
                write_results(out, summary, comparison.timelines(), force=force, extra=add_report)
        interrupts.finishing = (f"the search is over{' and ' + str(out) + ' written' if out else ''}: showing its "
                                "answer")
        # A Ctrl-C after the search ended (while the other layouts were compared or the folder written, say) left
        # the answer whole.
        message = (_INTERRUPTED_SEARCH if comparison.optimal.interrupted else
                   _interrupted_late("the search", "" if comparison.other_layouts_whole else
                                     "but for the other layouts, whose comparison it cut short"))
        if fmt == "json":
            click.echo(summary_json(summary))
            if out is not None:  # on stderr: stdout is the JSON alone, for a pipe
                click.echo(f"wrote {out}/{_SOLVE_FILES}", err=True)
            _exit_if_interrupted(stop, message)
            return
        from pipeplan.report.tables import comparison_table, format_gap, over_budget_notes

        console = _console()
        console.print(*comparison_table(summary, cfg.units, console.width))
        opt = comparison.optimal
        console.print(
            f"optimizer: {opt.status} {opt.objective_name} {opt.objective:g} {cfg.units.time}, "
            f"bound {opt.lower_bound:g} (gap {format_gap(opt.gap)}), {opt.solve_time_s:.1f} s; order from "
            f"{opt.source}, best warm start {opt.best_heuristic} at {opt.best_heuristic_objective:g}",
            soft_wrap=True,
        )
        for note in optimizer_notes(opt):
            console.print(note, style="yellow", soft_wrap=True)
        for note in over_budget_notes(summary, cfg.units):
            console.print(note, style="dim", soft_wrap=True)
        for line in skipped_lines(comparison.skipped):
            console.print(line, style="dim", soft_wrap=True)
        within = " within the budget" if cfg.problem.budget is not None else ""  # none: no budget to name
        for row in comparison.other_layouts:
            console.print(
                f"other layout: {row['schedule']} with num_chunks: {row['num_chunks']}, placement: "
                f"{row['placement']} reaches {opt.objective_name} {row[opt.objective_name]:g} {cfg.units.time}"
                f"{within}; set them under pipeline: to optimize that layout", soft_wrap=True)
        if out is not None:
            console.print(f"wrote {out}/{_SOLVE_FILES}")
        _exit_if_interrupted(stop, message)


@cli.command(short_help="Re-render report.html from a result folder.")
@click.argument("folder", type=RESULTS_FOLDER, metavar="DIR")
@click.option("--out", type=OUT_FILE, default=None, metavar="FILE",
              help="Where to write the page (default: DIR/report.html; - for stdout).")
@click.option("--force", is_flag=True, help="Replace the page if it exists.")
@_debug_option
def report(folder: Path, out: Path | None, force: bool) -> None:
    """Re-render DIR/report.html from a folder written by 'pipeplan solve --out DIR'.

    The page is rebuilt from DIR/summary.json and DIR/schedules/*.json alone; every schedule is replayed and
    checked against its recorded times. One self-contained file: it works offline.

    \b
    Example:
      pipeplan report out/seed --force
    """
    from pipeplan.report.files import read_summary
    from pipeplan.report.html import REPORT_NAME, render_folder

    read_summary(folder)  # a folder of another command fails here, before its own report.html is in the way
    target = out if out is not None else folder / REPORT_NAME
    if not _is_stdout(target):
        check_output_file(target, force)
    _write_output(target, render_folder(folder), force=True, what="")


@cli.command("export", short_help="Write a schedule of a result folder as PyTorch's schedule CSV.")
@click.argument("folder", type=RESULTS_FOLDER, metavar="DIR")
@click.option("--schedule", "schedule_name", default=None, metavar="NAME",
              help="Which schedule of DIR to export (default: the chosen one).")
@click.option("--format", "fmt", type=click.Choice(["torch-csv"]), default="torch-csv", show_default=True,
              help="File format: PyTorch's compute-only schedule CSV.")
@click.option("--out", type=OUT_FILE, default=None, metavar="FILE",
              help="Where to write it (default: DIR/NAME.torch.csv; - for stdout).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@_debug_option
def export(folder: Path, schedule_name: str | None, fmt: str, out: Path | None, force: bool) -> None:
    """Write a schedule of DIR (from 'pipeplan solve --out DIR') as a PyTorch compute-only schedule CSV.

    One row per rank, one action per cell ({stage}{F|I|B|W}{microbatch}); torch.distributed.pipelining's
    _PipelineScheduleRuntime loads it with _load_csv, and torchtitan with
    --parallelism.pipeline_parallel_schedule_csv FILE. Build the stages in the config's placement (loop or V).

    \b
    Example:
      pipeplan export out/seed --out seed.csv
    """
    from pipeplan.report.files import read_results
    from pipeplan.torch_csv import to_torch_csv

    results = read_results(folder)
    name = schedule_name if schedule_name is not None else str(results.summary.get("chosen", ""))
    if name not in results.timelines:
        raise ConfigError(f"{str(folder)!r} has no schedule {name!r}{_why_not_solved(results.summary, name)}"
                          f"{did_you_mean(name, results.timelines)}; it has {', '.join(results.timelines)} (pick one "
                          "with --schedule)")
    target = out if out is not None else folder / f"{name}.torch.csv"
    problem = results.config.problem
    _write_output(target, to_torch_csv(problem, results.timelines[name].schedule), force=force,
                  what=f": schedule {name}, {counted(problem.num_devices, 'rank')}, "
                  f"{counted(problem.num_model_stages, 'stage')}, "
                  f"{counted(problem.num_microbatches, 'microbatch', 'microbatches')}, {problem.placement} placement")
    fitted = _fitted_note(problem, results.timelines[name].schedule)
    if fitted:
        click.echo(f"note: {fitted}", err=True)
    row = next(row for row in results.summary["schedules"] if row["schedule"] == name)
    if not row["feasible"]:  # read_results replayed it and checked the summary's figures
        from pipeplan.report.tables import over_budget_note

        over = over_budget_note(row, results.summary["memory_budget"], results.config.units)
        click.echo(f"note: {over}; torch holds that much when it runs the file", err=True)


# The named schedules pipeplan fits to a budget, and the torch class each is otherwise the same as.
_FITTED_TORCH = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe"}


def _fitted_note(problem: Any, schedule: Any) -> str:
    """Why an exported 1F1B or GPipe is not torch's class of that name, when the budget fitted it (a shorter
    warm-up; more, smaller flushes); "" for any other schedule, or one the budget left as frameworks run it."""
    torch_class = _FITTED_TORCH.get(schedule.name)
    if torch_class is None or generate(schedule.name, problem.with_budget(None)).orders == schedule.orders:
        return ""
    how = ("a shorter warm-up" if schedule.name == "1f1b"
           else f"{counted(schedule.flushes, 'flush', 'flushes')} instead of one")
    return (f"{schedule.name} is fitted to the budget here ({how}), so this file is not torch's {torch_class}; "
            "torch runs the file's order as written")


def _why_not_solved(summary: dict[str, Any], name: str) -> str:
    """Why a result folder holds no schedule ``name`` when its solve said so: skipped (with the reason) or one
    for another layout, which the solve only named."""
    if name in summary["skipped"]:
        return f": the solve skipped it ({summary['skipped'][name]})"
    for row in summary["other_layouts"]:
        if row.get("schedule") == name:
            return (f": it runs on another layout (num_chunks: {row.get('num_chunks')}, placement: "
                    f"{row.get('placement')}), which the solve only compared; set them under pipeline: and solve "
                    "again to export it")
    return ""


def _is_stdout(target: Path) -> bool:
    return target is STDOUT


def _write_output(target: Path, text: str, force: bool, what: str) -> None:
    """Write ``text`` to the file ``target`` (atomically) and say so, ``what`` after its name; to stdout, and
    nothing else, when ``target`` is "-"."""
    if _is_stdout(target):
        click.echo(text, nl=False)
        return
    write_file(target, text, force=force)
    click.echo(f"wrote {target}{what}")


def _sweep_stopping(out: Path | None, store_path: Path | None) -> str:
    """What the first Ctrl-C of a sweep on tasks says: finished tasks are kept in a store (--out DIR or --store
    FILE), else only shown."""
    kept = "kept" if out is not None or store_path is not None else "shown"
    return f"stopping the sweep; finished tasks are {kept}"


# The store's file name inside --out when --store is not given.
STORE_NAME = "store.sqlite"


def _sweep_options(func: F) -> F:
    """The flags every sweeping command shares: where tasks run, the result store, progress."""
    options = [
        click.option("--jobs", type=_Whole(min=1), default=None, metavar="N",
                     help="Tasks at once: local worker processes (1: in this process), or with '--ray local' the "
                     "CPUs of the Ray cluster it starts."),
        click.option("--ray", "ray_address", default=None, metavar="auto|ADDRESS|local",
                     help="Run the tasks on Ray (pip install 'pipeplan[ray]'): 'auto' joins the cluster running "
                     "here, ADDRESS (HOST:PORT) a given one, 'local' starts a private one."),
        click.option("--store", "store_path", type=STORE_FILE, default=None, metavar="FILE",
                     help=f"Result store (SQLite): finished tasks are written to it and reused by a re-run "
                     f"(default: DIR/{STORE_NAME} with --out, else none)."),
        click.option("--refresh", is_flag=True, help="Run every task again, ignoring the store (still writes it)."),
        click.option("--progress", "show_progress", is_flag=True,
                     help="Show progress even when stderr is not a terminal (one line a second)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


class _TaskProgress:
    """Sweep progress on stderr: a rich bar on a terminal (done / total, reused, failed, elapsed, time left);
    with --progress on a pipe, one plain line a second at most; else nothing."""

    def __init__(self, quiet: bool, forced: bool) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = _Stderr()
        terminal = self.console.is_terminal
        self.bar = (Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[reused]} reused, {task.fields[failed]} failed"),
                             TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=self.console)
                    if terminal and (forced or not quiet) else None)
        self.lines = _PlainLines(self.console, forced and not terminal)
        self.task: Any = None
        self.started = time.monotonic()

    def __enter__(self) -> _TaskProgress:
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=None, reused=0, failed=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
        self.lines.flush()

    def _line(self, report: Any) -> str:
        elapsed = time.monotonic() - self.started
        ran = report.done - report.reused
        left = ""
        if 0 < ran and report.done < report.total:
            left = f", about {elapsed / ran * (report.total - report.done):.0f} s left"
        return (f"progress: {report.done}/{report.total} done, {report.reused} reused, {report.failed} failed, "
                f"{elapsed:.1f} s elapsed{left}")

    def __call__(self, report: Any) -> None:
        if isinstance(report, str):
            if self.bar is not None:
                self.bar.update(self.task, description=report)
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=report.done, total=report.total, reused=report.reused,
                            failed=report.failed, description="sweep")
        else:
            self.lines.offer(lambda: self._line(report))


def _check_store_folder(path: Path) -> None:
    """Refuse a --store FILE whose folder does not exist: only --out creates missing folders (a mistyped --store
    path silently made a tree of them, and the next run, typed right, started over). A folder under a file is
    left to :class:`~pipeplan.store.Store`, which names that file."""
    folder = path.parent
    if not folder.exists() and not any(parent.is_file() for parent in folder.parents):
        raise ConfigError(f"folder {str(folder)!r} of --store does not exist; create it or choose another path")


class _SweepPlace:
    """Where a sweep runs and keeps its results: the executor (entered) and the store (opened), from the flags.

    Without --store, the store is DIR/store.sqlite when --out DIR is given: DIR is created at the start to hold
    it (so a killed run leaves it there), and the finished result folder, written atomically over DIR at the end,
    carries a copy. A folder holding nothing but a store is an unfinished sweep: running again resumes it
    without --force.
    """

    def __init__(self, kind: str, out: Path | None, force: bool, store_path: Path | None, jobs: int | None,
                 ray_address: str | None) -> None:
        self.kind = kind  # the command: "size" or "frontier", as its store's rows say
        self.out = out
        if out is not None and store_path is not None and store_path.resolve().is_relative_to(out.resolve()):
            if store_path.resolve() != (out / STORE_NAME).resolve():
                # the result folder replaces DIR whole: a store elsewhere in it went with it
                raise ConfigError(f"--store {str(store_path)!r} lies inside --out {str(out)!r}, which the result "
                                  f"replaces; omit --store to keep the store there as {STORE_NAME}, or put it "
                                  "outside the folder")
            store_path = None  # --out's own store, named: kept as it is without --store (it was deleted)
        if store_path is not None:
            _check_store_folder(store_path)
        self.asked_force = force  # --force itself; self.force also lets the run replace its own unfinished folder
        self._settle(out)
        self.in_out = store_path is None and out is not None
        self.store_path = out / STORE_NAME if self.in_out and out is not None else store_path
        self.jobs = jobs
        self.ray_address = ray_address
        self.stack = contextlib.ExitStack()
        self.store: Any = None
        self.executor: Any = None
        self.created: Path | None = None  # the first folder of --out's path that this run created
        self.held: int | None = None  # the handle holding --out's lock (:meth:`_make_and_hold`)

    def __enter__(self) -> _SweepPlace:
        from pipeplan.executors import make_executor
        from pipeplan.store import Store

        try:
            # The executor first: a Ray address that cannot be reached then leaves no store behind.
            self.executor = self.stack.enter_context(make_executor(self.jobs, self.ray_address))
            if self.store_path is not None:
                if self.in_out and self.out is not None:
                    self._make_and_hold(self.out)
                self.store = self.stack.enter_context(Store(self.store_path))
                if self.in_out:
                    self.store.own(self.kind)
        except BaseException:
            self.stack.close()
            self._release()
            raise
        return self

    def _make_and_hold(self, out: Path) -> None:
        """Create --out when missing (to hold the store) and hold it for this run: an advisory lock on the folder,
        released when the run ends, so that a sweep started on the same folder meanwhile is refused rather than
        resuming this run's unfinished folder and replacing it with its own result. The folder is locked, not the
        store file: SQLite keeps its own locks on that file, and closing another handle to it would release them.

        The lock is flock(2)'s: it keeps out the sweeps of this machine (on a network file system, maybe not
        those of others), and there is none where the system has no flock. Under the lock the folder is looked
        at again, since another run may have created, finished or replaced it since this one first did."""
        was_missing = not out.exists()
        if was_missing:
            first = out
            while not first.parent.exists():
                first = first.parent
            try:
                out.mkdir(parents=True)
                self.created = first
            except FileExistsError:  # another run made it meanwhile: looked at under the lock below
                pass
        self._lock(out)
        self._settle(out, made=was_missing and not any(out.iterdir()))

    def _lock(self, out: Path) -> None:
        """Take --out's lock (see :meth:`_make_and_hold`), or say why there is none."""
        try:
            import fcntl
        except ImportError:  # not a POSIX system: no lock
            return
        try:
            self.held = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            fcntl.flock(self.held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another pipeplan run is writing {str(out)!r} (a sweep with the same --out); "
                              "wait for it to end, or pick another --out") from None
        except OSError as exc:  # a file system without locks: run unguarded, as without flock
            log.warning("cannot lock %s (%s): a second sweep started on it meanwhile would not be refused", out,
                        exc.strerror or exc)

    def _settle(self, out: Path | None, made: bool = False) -> None:
        """Whether this run may replace --out at the end (``self.force``): with --force, when --out is an
        unfinished sweep (a folder holding only a store: this run resumes it), or when this run has just ``made``
        it; else an existing --out is refused, as by every command (and --force without --out warned about).
        Decided at the start and again under the lock, since another run may have made, finished or replaced
        the folder in between."""
        if made:
            self.force = True
            return
        unfinished = out is not None and is_unfinished_sweep(out)
        if unfinished and out is not None and not self.asked_force:
            # Another command's unfinished sweep is not this one's to resume: replacing it would lose its results.
            _refuse_unfinished(out, self.kind)
        self.force = self.asked_force or unfinished
        _refuse_existing(out, self.force, self.kind)

    def _release(self) -> None:
        if self.held is not None:
            os.close(self.held)
            self.held = None

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.stack.close()
        try:
            if (kind is not None and issubclass(kind, PipeplanError) and self.created is not None
                    and self.out is not None and is_unfinished_sweep(self.out)):
                # Bad input found during the run (e.g. nothing fits): leave no folder behind, as for any bad input,
                # nor the parents of --out this run created. Still under the lock, so no other run is using it.
                shutil.rmtree(self.created, ignore_errors=True)
        finally:
            self._release()

    def add_store_copy(self, folder: Path) -> None:
        """Put a copy of the store in the result folder being written, when the store lives in --out."""
        if self.in_out and self.store is not None:
            self.store.copy_to(folder / STORE_NAME)

    def summary(self, console: Console, total: int, reused: int, ran: int, failures: dict[str, str]) -> None:
        """Say how many results came from the store (and, when the sweep was stopped, how many ran and how many
        did not), and list the tasks that failed."""
        if self.store_path is not None:
            text = f"{reused} of {total} results came from the store {self.store_path}"
            if reused + ran < total:
                text += f"; {ran} ran, {total - reused - ran} did not (stopped)"
            elif not reused:
                text += " (none: all were run)"
            console.print(text, style="dim", soft_wrap=True, highlight=False)
        if failures:
            console.print(f"{len(failures)} task(s) failed (recorded in the store; a re-run tries them again):",
                          style="yellow", highlight=False)
            for label, error in failures.items():
                console.print(f"  {label}: {error}", style="yellow", soft_wrap=True, highlight=False)


def _rerun(written: bool, refresh: bool) -> str:
    """How the same command runs what a stopped sweep left: "again", or "with --force" when its --out folder was
    written (a rerun must replace it); and without --refresh, which would ignore the store and start over."""
    how = "with --force" if written else "again"
    if refresh:
        how += " and without --refresh" if written else " without --refresh"
    return how


def stopped_sweep(done: int, total: int, what: str, store_path: Path | None, written: Path | None = None,
                  during: str = "", refresh: bool = False) -> str:
    """The message after a sweep that Ctrl-C stopped: how many of its ``what`` finished, and whether a rerun
    resumes it (``written``: the --out folder the finished ones were written to, which a rerun must replace;
    ``during``: what the Ctrl-C stopped, when not the sweep's tasks; ``refresh``: the sweep ran with --refresh,
    which the rerun must drop, or it would ignore the store and start over)."""
    if store_path is not None:
        also = "" if written is None else f", and written to {written}"
        kept = f" (kept in {store_path}{also})" if done else ""
        after = f"{kept}; run the same command {_rerun(written is not None, refresh)} to resume"
    else:
        after = "; none was stored (--out DIR or --store FILE keeps finished tasks for the next run)"
    return f"interrupted{during}: {done} of {total} {what} finished{after}"


def parse_budgets(text: str) -> list[float]:
    """Budgets from "A:B:STEP": A, A+STEP, ... up to B inclusive (0 < A <= B, STEP > 0, at most 500 values); or
    from a list "A,B,C" or one number (each finite and > 0), in increasing order, each once."""
    hint = ("give --budgets as A:B:STEP, e.g. 4:16:2 (from A to B inclusive, in the config's memory unit), or as a "
            "list, e.g. 3,4.5,8")
    named = f"--budgets {shown(text, 60)}"
    if ":" not in text:
        return _listed_budgets(text, named, hint)
    parts = text.split(":")
    if len(parts) != 3:
        raise ConfigError(f"{named} is not A:B:STEP; {hint}")
    try:
        # Decimal: A + i STEP exactly as written, at any scale (floats made 0.1 + 0.2 a budget of its own, and
        # rounding them turned budgets in units of 1e-10, or of 13 digits, into others)
        low, high, step = (decimal.Decimal(part.strip()) for part in parts)
    except decimal.InvalidOperation:
        raise ConfigError(f"{named} has a part that is not a number; {hint}") from None
    if not all(v.is_finite() for v in (low, high, step)) or low <= 0 or step <= 0 or high < low:
        raise ConfigError(f"{named} needs 0 < A <= B and STEP > 0; {hint}")
    ratio = (high - low) / step
    if ratio >= MAX_BUDGETS:  # before the exact count, which could have more digits than Decimal holds
        count = f"{int(ratio) + 1}" if ratio < 10**9 else f"about {ratio:.3g}"
        raise ConfigError(f"{named} gives {count} budgets; at most {MAX_BUDGETS}: raise STEP")
    budgets = [float(low + i * step) for i in range(int((high - low) // step) + 1)]
    if budgets[0] <= 0 or not math.isfinite(budgets[-1]):
        raise ConfigError(f"{named} is beyond what a float holds; give budgets in another unit")
    return budgets


def _listed_budgets(text: str, named: str, hint: str) -> list[float]:
    """The budgets of a list "A,B,C" or of one number (see :func:`parse_budgets`); ``named`` names the flag."""
    budgets: set[float] = set()
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            what = "an empty entry" if not part.strip() else f"{shown(part.strip(), 30)}, not a number"
            raise ConfigError(f"{named} has {what}; {hint}") from None
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{named} has {part.strip()}; every budget must be a finite number > 0")
        budgets.add(value)
    if len(budgets) > MAX_BUDGETS:
        raise ConfigError(f"{named} gives {len(budgets)} budgets; at most {MAX_BUDGETS}")
    return sorted(budgets)


# The most budgets one sweep may run (each is a full solve): catches a STEP typo such as 0.001.
MAX_BUDGETS = 500


@cli.command("frontier", short_help="Sweep the memory budget: step time against memory (CSV, plot).")
@click.argument("config", type=click.Path(dir_okay=False, path_type=str))
@click.option("--budgets", required=True, metavar="A:B:STEP|A,B,..",
              help="Budgets per device to sweep, from A to B inclusive (the config's memory unit), or a list "
                   "A,B,C.")
@_solver_options
@click.option("--out", type=OUT_FOLDER, default=None, metavar="DIR",
              help="Write frontier.csv and frontier.html (+ frontier.png) to DIR (atomically).")
@click.option("--no-png", is_flag=True, help="With --out, skip the PNG (which needs kaleido and Chromium).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as readable tables or one JSON object (every row; status lines go to stderr).")
@_sweep_options
@_debug_option
def frontier_cmd(config: str, budgets: str, time_limit: float | None, objective: str | None, workers: int | None,
                 random_seed: int | None, out: Path | None, no_png: bool, force: bool, quiet: bool, fmt: str,
                 jobs: int | None, ray_address: str | None, store_path: Path | None, refresh: bool,
                 show_progress: bool) -> None:
    """Sweep the memory budget: every schedule's objective and the optimizer's at each budget.

    The memory-time frontier: how much step time each extra unit of activation memory buys. The optimizer's
    curve never rises as the budget grows. Budgets that admit no schedule are listed with the reason; if none
    does, the exit status is 2.

    With one job and no store (no --out, --store, --jobs or --ray), budgets are solved one after another, each
    starting from the previous answer. Otherwise each budget is a task: the tasks run at once (--jobs local
    processes, default: cores / CP-SAT workers; or --ray), finished ones are kept in the store and reused by a
    re-run, and an answer worse than a smaller budget's is replaced by that budget's schedule.

    \b
    Examples:
      pipeplan frontier models/split-8x32.yaml --budgets 8:16:2 --time-limit 10 --out results/frontier
      pipeplan frontier models/split-8x32.yaml --budgets 8:16:1 --workers 1 --jobs 2 --store frontier.sqlite
      pipeplan frontier models/split-8x32.yaml --budgets 5,8,12 --time-limit 10
    """
    # The sweep sets the budget, so the file's may be anything.
    cfg = load_config(_announced(config), ignore_budget=True)
    sweep = parse_budgets(budgets)
    settings = _settings(cfg, time_limit_s=time_limit, objective=objective, num_workers=workers,
                         random_seed=random_seed)
    tasks = not (out is None and store_path is None and ray_address is None and (jobs or 1) == 1)
    if jobs is None and ray_address is None:
        jobs = max(1, (os.cpu_count() or 1) // settings.num_workers)
    stop = StopRequest()
    stats: dict[str, Any] = {}
    if tasks:
        with _Interrupts(stop, _sweep_stopping(out, store_path)) as interrupts, \
                _SweepPlace("frontier", out, force, store_path, jobs, ray_address) as place, \
                _TaskProgress(quiet, show_progress) as task_progress:
            _warn_refresh_without_store(refresh, place.store)
            rows = frontier(cfg.problem, sweep, settings, stop=stop, executor=place.executor, store=place.store,
                            refresh=refresh, task_progress=task_progress, stats=stats)
            written = bool(rows) or not stop.requested  # stopped before any budget finished: nothing to write
            if written:
                interrupts.finishing = ""  # a Ctrl-C now stops the write, and main says so
                _write_frontier(out, place.force, rows, cfg, settings, no_png, place.add_store_copy,
                                not_run=_not_run(sweep, rows), refresh=refresh)
    else:
        _refuse_existing(out, force, "frontier")
        _warn_refresh_without_store(refresh, None)
        with _Interrupts(stop), _ProgressLine(not quiet or show_progress, cfg.units.time, cfg.units.memory,
                                              forced=show_progress) as progress:
            rows = frontier(cfg.problem, sweep, settings, progress=progress, stop=stop)
        written = True
        _write_frontier(out, force, rows, cfg, settings, no_png)
    from pipeplan.report.tables import format_memory, frontier_tables

    console = _console()
    if fmt == "json":  # stdout is the JSON alone, for a pipe; what else the command says goes to stderr
        units = {"time": cfg.units.time, "memory": cfg.units.memory}
        finished = not _not_run(sweep, rows)  # a Ctrl-C may have left budgets out
        click.echo(printed_json({"name": cfg.name, "objective": settings.objective, "units": units,
                                 "finished": finished, "rows": [row.to_dict() for row in rows]}))
        console = _Stderr()
    elif rows:  # none when a Ctrl-C came before any budget finished: no empty frame
        console.print(*frontier_tables(cfg.name, rows, settings.objective, cfg.units, console.width))
    for row in rows:
        if row.note and fmt != "json":  # each row's note is in its record
            console.print(f"budget {format_memory(row.budget)}: {row.note}", style="yellow", soft_wrap=True)
    if tasks:
        place.summary(console, stats["total"], stats["reused"], stats["ran"], stats["failures"])
    if out is not None and written:
        console.print(f"wrote {out}/: {', '.join(sorted(p.name for p in out.iterdir()))}", soft_wrap=True)
    message = _stopped_in_process(sweep, rows)
    if tasks:
        done = stats["reused"] + stats["ran"]
        message = (stopped_sweep(done, stats["total"], "budgets", place.store_path, out if written else None,
                                 refresh=refresh)
                   if done < stats["total"] else _interrupted_late("every budget"))
        if done < stats["total"] and (left := _not_run(sweep, rows)):
            message += f" (not run: {_budget_list(left)})"
    _exit_if_interrupted(stop, message)


def _not_run(budgets: Sequence[float], rows: Sequence[Any]) -> list[float]:
    """The budgets asked for that have no row (a Ctrl-C ended the sweep before them), in increasing order."""
    reached = {row.budget for row in rows}
    return [budget for budget in sorted(set(budgets)) if budget not in reached]


def _stopped_in_process(budgets: Sequence[float], rows: Sequence[Any]) -> str:
    """What a Ctrl-C left of an in-process sweep: the budget it cut short (if it cut one short: the stop may
    come between two budgets) and the budgets never run."""
    from pipeplan.frontier import STOPPED_NOTE
    from pipeplan.report.tables import format_memory

    if not rows:
        return _INTERRUPTED_SEARCH
    reached = {row.budget for row in rows}
    left = _not_run(budgets, rows)
    cut = [row.budget for row in rows if row.note == STOPPED_NOTE]
    done = (f"the sweep stopped at budget {format_memory(cut[0])} (its row is the best found by then)" if cut
            else f"the sweep stopped after budget {format_memory(max(reached))} had finished (every row above is "
                 f"whole)")
    if not left:
        return f"interrupted: {done}"
    return (f"interrupted: {done}; {len(left)} of {len(set(budgets))} budgets were not run ({_budget_list(left)}); "
            "with --store FILE a sweep keeps every budget it finishes and the same command again runs only the rest")


def _budget_list(budgets: Sequence[float]) -> str:
    """Budgets as a short list: the first eight, then "..."."""
    from pipeplan.report.tables import format_memory

    return ", ".join(format_memory(budget) for budget in budgets[:8]) + (", ..." if len(budgets) > 8 else "")


def _write_frontier(out: Path | None, force: bool, rows: list[Any], cfg: Config, settings: SolverSettings,
                    no_png: bool, extra: Callable[[Path], None] | None = None, not_run: Sequence[float] = (),
                    refresh: bool = False) -> None:
    """Write DIR/frontier.csv, frontier.html (the chart and the table, with the budgets ``not_run`` an interrupted
    sweep left out said above it, and how to run them: as :func:`stopped_sweep` says, the folder written) and
    frontier.png (unless ``no_png``) atomically."""
    if out is not None:
        from pipeplan.report.figures import frontier_figure, save
        from pipeplan.report.files import frontier_frame
        from pipeplan.report.html import frontier_table

        def fill(folder: Path) -> None:
            frontier_frame(rows).to_csv(folder / "frontier.csv", index=False, float_format=CSV_FLOAT_FORMAT)
            fig = frontier_figure(rows, settings.objective, title=f"{cfg.name}: {settings.objective} against "
                                  "activation memory budget", time_unit=cfg.units.time,
                                  memory_unit=cfg.units.memory)
            # The table under the chart: the page shows what the terminal did.
            save(fig, folder / "frontier", png=not no_png, self_contained=True,
                 below=frontier_table(rows, settings.objective, cfg.units, not_run,
                                      f"run the same command {_rerun(True, refresh)}"))
            if extra is not None:
                extra(folder)

        write_folder(out, force, fill)


@cli.command("size", short_help="Size a cluster: the fastest parallel layout and schedule that fits.")
@click.argument("study", type=click.Path(dir_okay=False, path_type=str))
@click.option("--out", type=OUT_FOLDER, default=None, metavar="DIR",
              help="Write sweep.csv, report.html and best.yaml to DIR (atomically).")
@click.option("--top", type=_Whole(min=1), default=5, show_default=True, metavar="K",
              help="Configurations shown in the table and the report's memory chart.")
@click.option("--time-limit", type=_SECONDS, default=None, metavar="S",
              help="Optimizer time limit in seconds per configuration (overrides optimizer.time_limit_s).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--quiet", is_flag=True, help="No progress display.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output as readable tables or one JSON object (every row; status lines go to stderr).")
@_sweep_options
@_debug_option
def size(study: str, out: Path | None, top: int, time_limit: float | None, force: bool, quiet: bool, fmt: str,
         jobs: int | None, ray_address: str | None, store_path: Path | None, refresh: bool,
         show_progress: bool) -> None:
    """Find the parallel sizes, microbatch size, chunks and schedule with the most tokens/s within memory.

    STUDY names a model and a GPU (presets, see 'pipeplan presets'), GPU counts, batch, sequence length and
    the search space. Prints the top configurations and the optimal schedule's gain over 1F1B on the best
    one's parallel sizes with one chunk per device; with --out, DIR/report.html shows it all and DIR/best.yaml
    is a config for 'pipeplan solve'.

    Each configuration and schedule is a task, run on --jobs local processes (default: the study's
    "processes") or on Ray (--ray). Finished tasks go to a store (DIR/store.sqlite with --out, or --store FILE)
    as they finish; running the same or an overlapping study again reuses them. Ctrl-C stops the sweep: the
    finished rows are shown (and kept in the store) and the exit status is 130; run it again to resume.

    \b
    Examples:
      pipeplan size models/size-llama3.1-70b.yaml --out llama
      pipeplan size models/size-llama3.1-70b.yaml --ray auto --store sizing.sqlite
    """
    from pipeplan.report.sizing import gain_sentence, outside_ranking, per_gpu_count_table, top_table, write_size_folder
    from pipeplan.sizing.study import load_study, run_study

    loaded = load_study(_announced(study))
    if jobs is None and ray_address is None:
        jobs = int(loaded.sweep_kwargs.get("processes", 1))
    stop = StopRequest()
    with _Interrupts(stop, _sweep_stopping(out, store_path)) as interrupts, \
            _SweepPlace("size", out, force, store_path, jobs, ray_address) as place, \
            _TaskProgress(quiet, show_progress) as progress:
        _warn_refresh_without_store(refresh, place.store)
        result = run_study(loaded, time_limit_s=time_limit, progress=progress, executor=place.executor,
                           store=place.store, refresh=refresh, stop=stop)
        # A Ctrl-C after the last task finished still keeps the folder from being written, as one during the sweep
        # does (the same command then writes it from the store); one while it is written stops the write, and main
        # says so.
        written = False
        if out is not None and not stop.requested:
            interrupts.finishing = ""
            write_size_folder(out, place.force, result, top, extra=place.add_store_copy)
            written = True
    console = _console()
    stats = result.stats
    finished = not (stats.stopped or result.interrupted or (out is not None and not written))
    if fmt == "json":  # stdout is the JSON alone, for a pipe; what else the command says goes to stderr
        click.echo(printed_json(_size_record(loaded.name, result, finished), nan_as_null=True))
        console = _Stderr()
    if not finished:
        if fmt != "json":
            console.print(*top_table(f"{loaded.name}: top {top} of the configurations finished", result.frame,
                                     top, console.width))
        place.summary(console, stats.total, stats.reused, stats.ran, stats.failures)
        during = " while the optimizer ran on the best configuration" if result.interrupted else ""
        message = stopped_sweep(stats.done, stats.total, "tasks", place.store_path, during=during, refresh=refresh)
        click.echo(f"pipeplan: {message}", err=True)
        raise click.exceptions.Exit(INTERRUPTED)
    if fmt != "json":
        console.print(*top_table(f"{loaded.name}: top {top} configurations that fit", result.frame, top,
                                 console.width))
        if result.frame["num_gpus"].nunique() > 1:
            console.print(*per_gpu_count_table("the best configuration at each GPU count", result.frame,
                                               console.width))
        console.print(gain_sentence(result.gain_label, result.baseline, result.optimal), soft_wrap=True)
        outside = outside_ranking(result)
        if outside:
            console.print(f"note: {outside}", style="yellow", soft_wrap=True)
    skipped = int(result.frame["skipped"].notna().sum())
    over = int((result.frame["skipped"].isna() & ~result.frame["fits"]).sum())
    rows_at = ("see sweep.csv" if out is not None else "each row's reason is in the JSON" if fmt == "json"
               else "--out DIR writes every row, and why, to DIR/sweep.csv")
    console.print(f"{counted(len(result.frame), 'row')}: "
                  f"{int(result.frame['fits'].sum())} fit, {over} over memory, "
                  f"{skipped} skipped ({rows_at})", style="dim", soft_wrap=True)
    place.summary(console, stats.total, stats.reused, stats.ran, stats.failures)
    if out is not None:
        console.print(f"wrote {out}/sweep.csv, report.html, best.yaml{', ' + STORE_NAME if place.in_out else ''}",
                      soft_wrap=True)
    # A Ctrl-C after the last task finished: with no folder to hold back, or while it was written.
    _exit_if_interrupted(stop, _interrupted_late("every task"))


def _size_record(name: str, result: Any, finished: bool) -> dict[str, Any]:
    """``size --format json``'s object (for :func:`printed_json` with NaN as null): every row of the sweep
    (sweep.csv's columns) and, once the sweep finished, the best plan and the 1F1B and optimizer runs on its sizes
    (their numbers; the problem and timeline records are left out)."""

    def numbers(record: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if record is None else {key: value for key, value in record.items()
                                            if key not in ("problem", "timeline", "sized")}

    return {"name": name, "finished": finished, "rows": result.frame.to_dict("records"),
            "best": numbers(result.best) if finished else None,
            "baseline": numbers(result.baseline) if finished else None,
            "optimal": numbers(result.optimal) if finished else None}


@cli.command("presets", short_help="List the model and hardware presets of 'pipeplan size'.")
@click.argument("study", type=click.Path(dir_okay=False, path_type=str), required=False)
@_debug_option
def presets_cmd(study: str | None) -> None:
    """List the model and hardware presets a study file may name, with their main numbers.

    With STUDY, print instead every field of the model and hardware that study resolves to (presets with their
    overrides), and where the numbers come from.

    \b
    Examples (the list of presets; every number of one study's model and GPU):
      pipeplan presets
      pipeplan presets models/size-llama3.1-70b.yaml
    """
    from dataclasses import asdict

    from pipeplan.sizing import load_hardware, load_model
    from pipeplan.sizing.hardware import hardware_presets
    from pipeplan.sizing.models import model_presets
    from pipeplan.sizing.records import is_file, read_yaml_file

    if study is not None:
        from pipeplan.sizing.study import load_study

        if study in model_presets() or study in hardware_presets():  # `pipeplan presets llama3.1-8b`
            raise ConfigError(f"{study!r} is a preset, not a study file: `pipeplan presets` lists every preset "
                              f"with its main numbers, and `pipeplan presets STUDY.yaml` every field of a study's "
                              f"model and GPU")
        kwargs = load_study(_announced(study)).sweep_kwargs
        for title, load, presets in (("model", load_model, model_presets()),
                                     ("hardware", load_hardware, hardware_presets())):
            raw = kwargs[title]
            record = asdict(load(raw))
            # A preset with the study's overrides (preset: NAME beside the fields it changes, in the study or in the
            # model or hardware file it names): each field changed says so, beside the preset's value. A plain
            # preset name changes nothing; a file without `preset:` is its own.
            if is_file(raw):
                raw = read_yaml_file(Path(raw), title)  # loaded whole by load() above: a mapping
            base = raw.get("preset") if isinstance(raw, dict) else raw if isinstance(raw, str) else None
            preset = asdict(load(base)) if isinstance(base, str) and base in presets else record
            changed = [key for key, value in record.items() if key not in ("name", "source") and value != preset[key]]
            click.echo(f"{title}:")
            for key, value in record.items():
                note = f"  # the study's; the preset has {preset[key]}" if key in changed else ""
                if key == "name" and value != preset["name"]:
                    note = f"  # the study's, from the preset {preset['name']}"
                if key == "source" and changed:
                    note = f"  # the preset's numbers; the study changed {', '.join(changed)}"
                click.echo(f"  {key}: {value}{note}")
        return
    click.echo("models:")
    width = max(len(name) for name in model_presets())
    for name in model_presets():
        m = load_model(name)
        click.echo(f"  {name:{width}s} {m.num_params / 1e9:6.1f}B params, {m.num_layers} layers, "
                   f"hidden {m.hidden_size}, {m.num_attention_heads} heads ({m.num_kv_heads} KV), "
                   f"vocab {m.vocab_size}")
    click.echo("hardware:")
    for name in hardware_presets():
        h = load_hardware(name)
        click.echo(f"  {name:10s} {h.peak_tflops:g} TFLOP/s bf16, {h.memory_gib:g} GiB, HBM {h.memory_bandwidth_gbs:g} "
                   f"GB/s, {h.gpus_per_node} per node, links {h.intra_node_bandwidth_gbs:g}/"
                   f"{h.inter_node_bandwidth_gbs:g} GB/s")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: sys.argv[1:]) and return the exit status.

    The one place that turns exceptions into exit codes: a user error (:class:`PipeplanError`, or an OSError
    such as a missing or unwritable path) prints one line and returns 2; an interrupt returns 130; any other
    exception is a bug in pipeplan: one line asking to report it, the traceback with --debug, status 1.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    run = _Run()
    _log_to_stderr()
    try:
        code = cli.main(args=args, prog_name="pipeplan", standalone_mode=False, obj=run)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # no command: the help
        exc.show()
        return exc.exit_code
    except click.ClickException as exc:  # a bad flag or argument: one line, as for every user error
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        click.echo(f"pipeplan: error: {exc.format_message().rstrip('.')}{hint}", err=True)
        return exc.exit_code
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        click.echo(f"pipeplan: interrupted{_while_writing(exc)}", err=True)
        return INTERRUPTED
    except (Terminated, SystemExit) as exc:
        # SystemExit: Ray's driver handler, in place while a local Ray cluster starts, exits with SIGTERM's number.
        if isinstance(exc, SystemExit) and exc.code == 1 and _output_closed():
            # click's own answer to a broken pipe (its echo, --help, --version): status 1 and nothing said.
            return _closed_output()
        if isinstance(exc, SystemExit) and exc.code != signal.SIGTERM:
            raise
        click.echo("pipeplan: terminated", err=True)
        return TERMINATED
    except OutputClosed:
        return _closed_output()
    except (PipeplanError, OSError) as exc:
        if run.debug:
            traceback.print_exc()
        click.echo(f"pipeplan: error: {exc}", err=True)
        return USER_ERROR
    except Exception as exc:  # the one place where a bug becomes an exit status
        if run.debug:
            traceback.print_exc()
        click.echo(f"pipeplan: internal error ({type(exc).__name__}: {exc}); this is a bug in pipeplan, please "
                   "report it with the output of the same command with --debug", err=True)
        return INTERNAL_ERROR
    # Without standalone mode click returns the exit code of a click.exceptions.Exit raised by a command.
    return code if isinstance(code, int) else 0


def _closed_output() -> int:
    """The status when the reader of the output closed it early. Every result folder is written before the tables
    are printed, so only the rest of the output is lost. stdout now points at /dev/null, so that Python's own
    flush at exit meets no closed pipe either."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stdout with no file descriptor (captured)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return OUTPUT_CLOSED


if __name__ == "__main__":
    sys.exit(main())
