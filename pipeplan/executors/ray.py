"""The Ray executor: tasks on a Ray cluster (``pip install 'pipeplan[ray]'``).

Each task asks Ray for as many CPUs as it uses (``num_cpus`` of :meth:`RayExecutor.map`: the CP-SAT workers of a
solve), so Ray runs as many at once as the cluster has cores for. pipeplan itself is shipped to the cluster with
the job (Ray's ``py_modules``), so the workers run the same code as the driver; the cluster needs pipeplan's
dependencies installed.
"""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pipeplan
from pipeplan.executors import ExecutorError, ShouldStop, TaskResult, call_in_worker, check_jobs

# Seconds to wait for a TCP connection to a given cluster address before calling it unreachable.
_CONNECT_TIMEOUT_S = 3.0
# How often (s) a wait for the next result looks at ``should_stop``.
_POLL_S = 0.1


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError("--ray needs Ray, which is not installed: pip install 'pipeplan[ray]' (or drop --ray "
                            "to run on this machine)") from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail fast on an address nothing listens at (ray.init would retry for a minute)."""
    host_port = address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--ray {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379, the head node's address that "
                            "'ray start --head' prints); or use --ray auto, or --ray local")
    try:
        with socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ExecutorError(f"cannot reach a Ray cluster at {address!r} ({exc.strerror or exc}); check the head "
                            "node's address and that it is running ('ray status' there), or use --ray local") from None


def _is_signal(exc: BaseException) -> bool:
    """Whether ``exc`` is what a signal handler raised (KeyboardInterrupt, the command line's SIGTERM): a
    BaseException that is not an Exception, nor the GeneratorExit of a generator closed early."""
    return not isinstance(exc, (Exception, GeneratorExit))


def _signal_in(exc: Exception) -> BaseException | None:
    """The signal handler's exception that ``exc`` wraps, or None: one raised while Ray's compiled code ran (its
    wait, its get) comes out of it as a SystemError ("returned a result with an exception set") caused by it."""
    cause = exc.__cause__
    return cause if isinstance(exc, SystemError) and cause is not None and _is_signal(cause) else None


@contextmanager
def _signals_as_themselves() -> Iterator[None]:
    """Around a call into Ray's compiled code (its wait, its get): a signal's exception raised while it runs is
    raised as itself (see :func:`_signal_in`), so that an abort is an abort and not an internal error or a failed
    task; any other exception passes unchanged."""
    try:
        yield
    except SystemError as exc:
        if (signalled := _signal_in(exc)) is not None:
            raise signalled from None
        raise


class RayExecutor:
    """Tasks on Ray: ``address`` "auto" joins the cluster running on this machine, "local" starts a private one
    (of ``num_cpus`` cores, default all), anything else is a cluster's address. When Ray is already initialised
    in this process (e.g. by a test's ``ray.init``), that session is used and left running."""

    name = "ray"

    def __init__(self, address: str = "local", num_cpus: int | None = None) -> None:
        check_jobs(num_cpus, "jobs (the Ray cluster's CPUs)")  # 0 started a cluster on which every task waited for ever
        self.address = address
        self.num_cpus = num_cpus
        self._ray: Any = None
        self._owned = False
        self._remote: dict[int, Any] = {}  # keyed by CPUs per task: the remote wrapper of call_in_worker()

    def __enter__(self) -> RayExecutor:
        ray = _import_ray()
        self._ray = ray
        if self.address not in ("auto", "local"):
            _check_reachable(self.address)
        if ray.is_initialized():
            return self
        runtime_env = {"py_modules": [pipeplan]}
        if self.address == "local":
            # address "local": a new cluster even when one runs here or RAY_ADDRESS names one (without it, ray.init
            # joined them, and with num_cpus failed: "num_cpus ... must not be provided")
            kwargs: dict[str, Any] = {"address": "local", "num_cpus": self.num_cpus, "include_dashboard": False}
        elif self.address == "auto":
            kwargs = {"address": "auto"}
        else:
            kwargs = {"address": self.address}
        # Ray's driver puts in its own SIGTERM handler (sys.exit with the signal's number); the caller's (the command
        # line's: abort, exit 143) stays, so that SIGTERM during the sweep or Ray's shutdown is not a silent exit 15.
        on_sigterm = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        try:
            ray.init(runtime_env=runtime_env, log_to_driver=False, configure_logging=False, **kwargs)
        except ConnectionError as exc:
            fix = ("start one with 'ray start --head', or use --ray local to start a private one"
                   if self.address == "auto" else "check the address, or use --ray local")
            raise ExecutorError(f"no Ray cluster at --ray {self.address} ({exc}); {fix}") from None
        except BaseException:
            # Stopped while it started (SIGTERM, Ctrl-C): what started is shut down here, not left to Ray's exit hook.
            if ray.is_initialized():
                ray.shutdown()
            raise
        finally:
            if on_sigterm is not None:
                signal.signal(signal.SIGTERM, on_sigterm)
        self._owned = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned and self._ray is not None:
            self._ray.shutdown()
            self._owned = False

    def map(self, function: Callable[[Any], Any], inputs: Sequence[Any], *, num_cpus: int = 1,
            should_stop: ShouldStop | None = None) -> Iterator[TaskResult]:
        if self._ray is None:  # not entered (or closed): no connection to run the tasks on
            raise RuntimeError("a RayExecutor connects to Ray when entered: use it in a with block, e.g. "
                               "'with make_executor(ray=\"local\") as executor: sweep(..., executor=executor)'")
        ray = self._ray
        # A task asking for more CPUs than a node has would wait forever: ask for at most the largest node's.
        largest = max((node.get("Resources", {}).get("CPU", 0.0) for node in ray.nodes() if node.get("Alive")),
                      default=1.0)
        num_cpus = max(1, min(num_cpus, int(largest)))
        if num_cpus not in self._remote:
            self._remote[num_cpus] = ray.remote(num_cpus=num_cpus, max_retries=0)(call_in_worker)
        remote = self._remote[num_cpus]
        shared = ray.put(function)
        refs = {remote.remote(shared, index, item): index for index, item in enumerate(inputs)}
        waiting = list(refs)
        aborted = False
        try:
            while waiting:
                if should_stop is not None and should_stop():
                    return
                with _signals_as_themselves():
                    done, waiting = ray.wait(waiting, num_returns=1, timeout=_POLL_S)
                for ref in done:
                    try:
                        with _signals_as_themselves():
                            result: TaskResult = ray.get(ref)
                    except Exception as exc:  # the worker died (out of memory, node lost): that task failed
                        result = TaskResult(refs[ref], error=f"{type(exc).__name__}: {exc}".splitlines()[0])
                    yield result
        except BaseException as exc:
            aborted = _is_signal(exc)
            raise
        finally:
            # A stopped sweep (or a caller done early) cancels what is left. An abort (SIGTERM, a second Ctrl-C)
            # leaves it to Ray: this driver's tasks end with it, and cancelling them then could crash Ray's core
            # worker (Ray 2.60: a failed check in its task manager, "Tried to complete task that was not pending",
            # exit 1, 15 or 139 instead of the abort's status). Nor when Ray is shut down already (a generator
            # closed after its caller's abort went past the executor).
            if not aborted and ray.is_initialized():
                for ref in waiting:
                    ray.cancel(ref, force=True)
