"""The local executor: a pool of worker processes on this machine (or this process, with one job)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeplan.executors import ShouldStop, TaskResult, call, call_in_worker, check_jobs, describe

log = logging.getLogger(__name__)

# How often (s) a wait for the next result looks at ``should_stop``.
_POLL_S = 0.1


# Tasks sent to a worker at once, at most: small tasks (a replay of a few milliseconds) cost less in batches.
_MAX_BATCH = 16


def _call_batch(function: Callable[[Any], Any], batch: list[tuple[int, Any]]) -> list[TaskResult]:
    return [call_in_worker(function, index, item) for index, item in batch]


def _start_worker(parent: int) -> None:
    """A worker's set-up: it leaves Ctrl-C to the parent, which decides whether to stop them (the terminal sends
    it to all), and ends itself when the parent, process ``parent``, is gone (:func:`_end_with_parent`; the
    parent's pid is passed in, since a parent killed while the worker started has been replaced already).

    The worker was started with Ctrl-C blocked (:func:`_ctrl_c_held`), so one that came while it imported is
    pending: ignored first, then unblocked, it is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) blocked in this thread while worker processes start from it: they inherit the block, so
    the terminal's Ctrl-C cannot interrupt them while they import, before they ignore it (:func:`_start_worker`);
    such a worker printed its KeyboardInterrupt and died. This process loses nothing: the signal goes to another
    of its threads, or waits until the block ends, and its handler runs in the main thread either way."""
    if not hasattr(signal, "pthread_sigmask"):  # not on Windows
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _end_with_parent(parent: int) -> None:
    """Exit once this process's parent is no longer ``parent``: a parent killed with SIGKILL cannot stop its
    workers, which then waited for tasks for ever (about 150 MB each), adopted by init."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(1)


# Seconds between a worker's checks that its parent is alive.
_PARENT_CHECK_S = 1.0


# What a Python script that starts worker processes needs: each worker imports the script again.
_GUARD = "under `if __name__ == \"__main__\":`, since each worker process imports the script again"
SCRIPT_GUARD = ("worker processes were started while a worker was importing the script that started them: put the "
                f"script's calls (sweep or run_study with more than one process, anything given a LocalExecutor) "
                f"{_GUARD}")


def worker_died() -> str:
    """A task's error when the pool broke under it; from a Python script (not the ``pipeplan`` command, whose
    workers cannot start more), with a word on the ``__main__`` guard."""
    main = sys.modules.get("__main__")
    package = (getattr(getattr(main, "__spec__", None), "name", None) or "").split(".")[0]  # python -m NAME
    path = getattr(main, "__file__", None)
    script = package != "pipeplan" and path is not None and Path(path).name != "pipeplan"
    guard = f"; from a Python script, see that its calls are {_GUARD}" if script else ""
    return ("BrokenProcessPool: a worker process died before this task finished (killed, out of memory or "
            f"crashed{guard})")


# The most worker processes a local pool may start: more than one a core only shares the cores, and each
# process takes about 150 MB with OR-Tools loaded (100,000 asked for on 2 cores used to start one per task).
MAX_JOBS = max(8, 4 * (os.cpu_count() or 1))


class LocalExecutor:
    """``jobs`` worker processes (started fresh, "spawn", so no thread or lock of the parent is copied); with one
    job, tasks run one after another in this process. Default: the machine's cores.

    Many tasks go to the workers in batches (up to 16 tasks, and at least 32 batches per worker, so that the load
    evens out); a batch's results come back together. A worker that dies (killed, out of memory, a crash in native
    code) fails the tasks it and the pool had not finished, with an error saying so; the pool is then started
    afresh for the next :meth:`map`.
    """

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        check_jobs(jobs)
        if jobs is not None and jobs > MAX_JOBS:
            # "at most": a pool starts a process only for a batch no other one is free to take (2 tasks, 2 processes)
            log.warning("%d local worker processes asked for, at most %d started: no more than 4 a core on this "
                        "machine (%s cores; each process takes about 150 MB, and more than one a core only shares it)",
                        jobs, MAX_JOBS, os.cpu_count())
            jobs = MAX_JOBS
        self.jobs = jobs if jobs is not None else (os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_pool()

    def _stop_pool(self) -> None:
        """Cancel queued tasks and end the workers now, running tasks included (their results would be late)."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        # The standard library ends workers only after their task (terminate_workers() comes in Python 3.14).
        processes = dict(getattr(pool, "_processes", None) or {})  # keyed by pid
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes.values():
            if process.is_alive():
                process.terminate()
        for process in processes.values():
            process.join(timeout=5)

    def map(self, function: Callable[[Any], Any], inputs: Sequence[Any], *, num_cpus: int = 1,
            should_stop: ShouldStop | None = None) -> Iterator[TaskResult]:
        if self.jobs == 1 or len(inputs) <= 1:
            for index, item in enumerate(inputs):
                if should_stop is not None and should_stop():
                    return
                yield call(function, index, item)
            return
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # This process is a worker still importing the parent's script ("spawn" imports it again): the script
            # starts workers at import, so each worker would start more. Python's own error says it less plainly.
            # The worker ends with the message alone: a traceback of the import machinery would bury it.
            raise SystemExit(f"pipeplan: {SCRIPT_GUARD}")
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_worker, initargs=(os.getpid(),))
        size = max(1, min(_MAX_BATCH, len(inputs) // (self.jobs * 32)))
        batches = [list(enumerate(inputs))[start:start + size] for start in range(0, len(inputs), size)]
        with _ctrl_c_held():  # a submit starts a worker process when none is free, up to the pool's size
            futures: dict[Future[list[TaskResult]], list[int]] = {  # keyed by future: the indices of its inputs
                self._pool.submit(_call_batch, function, batch): [index for index, _ in batch] for batch in batches}
        waiting = set(futures)
        while waiting:
            if should_stop is not None and should_stop():
                self._stop_pool()
                return
            done, waiting = wait(waiting, timeout=_POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    results = future.result()
                except BrokenProcessPool:
                    self._pool = None  # broken for good: the next map starts a new one
                    if should_stop is not None and should_stop():
                        # A Ctrl-C from the terminal reaches the workers too, and kills those still starting
                        # (before they ignore it): its tasks did not fail, the sweep was stopped. The signal's
                        # handler has run by now, in this process's main thread, before this one went on.
                        continue
                    error = worker_died()
                    results = [TaskResult(index, error=error) for index in futures[future]]
                except Exception as exc:  # e.g. an input or a result that cannot be pickled
                    results = [TaskResult(index, error=describe(exc)) for index in futures[future]]
                yield from results
