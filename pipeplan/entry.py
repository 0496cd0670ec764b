"""The ``pipeplan`` command's entry point: loads the command line with Ctrl-C held back.

Loading the command line (click, rich, OR-Tools, pandas) takes about a second. A Ctrl-C raised inside one of
those imports can end in a traceback, or be swallowed by the library it hit (the command then runs on). This
module imports nothing heavy itself (the package loads the solver on first use), records a Ctrl-C that comes
during the load, and then answers it as every command does: one line, status 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

# Exit statuses after Ctrl-C (128 + SIGINT) and SIGTERM (128 + SIGTERM), as the command line's own.
_INTERRUPTED = 130
_TERMINATED = 143
# After an abort, the most seconds the interpreter's shutdown may take before the process ends without it.
EXIT_GRACE_S = 5.0


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
    if code in (_INTERRUPTED, _TERMINATED):
        aborted(code)
    sys.exit(code)


def aborted(code: int) -> None:
    """Exit with ``code`` after an abort (Ctrl-C or SIGTERM), which has said what it did: the interpreter's shutdown
    runs as usual, but no longer than :data:`EXIT_GRACE_S`, and says nothing more. A signal can interrupt a
    worker pool's thread while it holds a lock (about one SIGTERM in 60 during a sweep with worker processes), and
    the standard library's shutdown, which joins that pool's threads, then waited for ever, or printed a traceback
    of a pipe it found closed."""
    sys.unraisablehook = lambda _unraisable: None  # e.g. "Exception ignored in: <module 'threading'>"
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    threading.Thread(target=_exit_after, args=(code, EXIT_GRACE_S), name="exit-grace", daemon=True).start()
    sys.exit(code)


def _exit_after(code: int, seconds: float) -> None:
    """End the process with ``code`` after ``seconds`` (a daemon thread: it runs while the shutdown waits)."""
    time.sleep(seconds)
    os._exit(code)
