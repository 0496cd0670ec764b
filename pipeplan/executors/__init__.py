"""Executors: map a picklable function over a list of inputs and yield the results as they finish.

An executor knows nothing of schedules or sweeps. It runs ``function(input)`` for every input, each call a
task, and yields a :class:`TaskResult` per input in the order tasks finish, with the input's index. An
exception in one task is caught and returned as that task's ``error``; the others go on. Implementations:
:class:`~pipeplan.executors.local.LocalExecutor` (a process pool on this machine, the default) and
:class:`~pipeplan.executors.ray.RayExecutor` (a Ray cluster; the optional extra ``pipeplan[ray]``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pipeplan.problem import ConfigError, shown

# Called between results: True asks the executor to start no more tasks and stop the running ones.
ShouldStop = Callable[[], bool]


class ExecutorError(ConfigError):
    """An executor cannot start (e.g. no Ray cluster at the address given); the message names the fix."""


@dataclass(frozen=True)
class TaskResult:
    """The outcome of one task: ``value`` when it returned, else ``error`` (the exception, one line)."""

    index: int
    """Position of the task's input in the list given to :meth:`Executor.map`."""
    value: Any = None
    error: str | None = None
    warnings: tuple[tuple[str, int, str], ...] = ()
    """What the task logged at WARNING and above on pipeplan's loggers, when it ran in a worker process
    (:func:`call_in_worker`): each record's logger name, level and text, for the caller to log again where the
    user sees it."""

    @property
    def ok(self) -> bool:
        return self.error is None


def check_executor(executor: object) -> None:
    """A :class:`ConfigError` unless ``executor`` is None or has an :meth:`Executor.map` (a wrong value, e.g. the
    name "local", failed deep inside with "'str' object has no attribute 'map'")."""
    if executor is not None and not callable(getattr(executor, "map", None)):
        raise ConfigError("executor must be an executor or None: LocalExecutor(processes) from "
                          "pipeplan.executors.local, or RayExecutor(address) from pipeplan.executors.ray, used "
                          f"as a context manager; got {type(executor).__name__} {shown(executor, 60)}")


class Executor(Protocol):
    """Runs tasks somewhere; use as a context manager so that workers are released."""

    name: str

    def map(self, function: Callable[[Any], Any], inputs: Sequence[Any], *, num_cpus: int = 1,
            should_stop: ShouldStop | None = None) -> Iterator[TaskResult]:
        """``function`` over ``inputs``, each result as its task finishes. ``num_cpus`` is how many cores one
        task uses (a scheduler such as Ray reserves them). When ``should_stop()`` turns true the iteration
        ends after the results already in; tasks still running are cancelled."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...


def describe(exc: BaseException) -> str:
    """An exception as one line: its type, message and where it was raised (last frame)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def call(function: Callable[[Any], Any], index: int, item: Any) -> TaskResult:
    """Run one task, catching its exception (not KeyboardInterrupt or SystemExit) into the result."""
    try:
        return TaskResult(index, function(item))
    except Exception as exc:
        return TaskResult(index, error=describe(exc))


class _Kept(logging.Handler):
    """Keeps each record it is given as (logger name, level, text)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append((record.name, record.levelno, record.getMessage()))
        except Exception:  # a malformed log call: reported as logging reports it, never failing the task
            self.handleError(record)


def call_in_worker(function: Callable[[Any], Any], index: int, item: Any) -> TaskResult:
    """:func:`call` in a worker process (a local pool's or Ray's): the task's warnings on pipeplan's loggers go
    back with its result (:attr:`TaskResult.warnings`), to be logged again by the caller. In a local worker they
    were lost (pipeplan's loggers print nothing unless the application configures logging, which a worker never
    does); on Ray they are kept from the worker's own handlers, which would print them as raw worker output."""
    kept = _Kept()
    logger = logging.getLogger("pipeplan")
    logger.addHandler(kept)
    propagate, logger.propagate = logger.propagate, False
    try:
        result = call(function, index, item)
    finally:
        logger.removeHandler(kept)
        logger.propagate = propagate
    return replace(result, warnings=tuple(kept.records))


def check_jobs(jobs: object, what: str = "jobs") -> None:
    """Raise :class:`ConfigError` unless ``jobs`` (named ``what``) is None or a whole number >= 1."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ConfigError(f"{what} must be a whole number >= 1, got {jobs!r}")


def make_executor(jobs: int | None = None, ray: str | None = None) -> Executor:
    """The executor the command line asks for: Ray at ``ray`` ("auto", "local" or an address) when given, else
    a local pool of ``jobs`` processes (default: the machine's cores)."""
    if ray is not None:
        from pipeplan.executors.ray import RayExecutor

        return RayExecutor(ray, num_cpus=jobs)
    from pipeplan.executors.local import LocalExecutor

    return LocalExecutor(jobs)
