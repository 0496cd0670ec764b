"""The ``pipeplan`` command's entry point: loads the command line with Ctrl-C held back.

Loading the command line (click, rich, OR-Tools, pandas) takes about a second. A Ctrl-C raised inside one of
those imports can end in a traceback, or be swallowed by the library it hit (the command then runs on). This
module imports nothing heavy itself (the package loads the solver on first use), records a Ctrl-C that comes
during the load, and then answers it as every command does: one line, status 130.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

# Exit status after Ctrl-C (128 + SIGINT), as the command line's own.
_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Load the command line and run it (see :func:`pipeplan.cli.main`); 130 when Ctrl-C came during the load."""
    interrupted: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        interrupted.append(signum)

    try:
        previous = signal.signal(signal.SIGINT, hold)
        held = True
    except ValueError:  # not the main thread: signals are not this thread's to handle
        previous, held = None, False
    try:
        from pipeplan.cli import main as run
    finally:
        if held:
            signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
    if interrupted:
        print("pipeplan: interrupted", file=sys.stderr)
        return _INTERRUPTED
    return run(argv)


def console() -> None:
    """The ``pipeplan`` command: :func:`main`, then exit with its status. The run is over and has said what it did,
    so Ctrl-C is ignored from then on: one while the interpreter shuts down (unloading OR-Tools' threads takes a
    moment) would end the process by the signal, status 130 without a word."""
    code = main()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
