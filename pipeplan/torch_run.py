"""Run a pipeplan schedule in PyTorch: one process per rank on CPU (gloo), a tiny model, one training step.

This is the proof that torch executes what pipeplan planned. Each job's schedule is exported to torch's
compute-only CSV (:mod:`pipeplan.torch_csv`) and loaded into ``_PipelineScheduleRuntime``, whose stages are
torch ``PipelineStage`` objects over a stack of linear layers (float64), split into the problem's model stages
and placed as the problem says (loop or V). Every rank records the compute actions it actually ran, in order,
and their start and end times, by wrapping its stages' forward, backward and weight-gradient methods; optionally
each action is stretched (by sleeping) to the problem's cost, so that measured times can be held against the
simulator's. :func:`reference_step` runs the same model in one process for the loss and gradients to compare.

torch is optional (``pip install 'pipeplan[torch]'``) and imported only when a run starts; without it
:class:`TorchMissing` (a ``ConfigError``) says what to install.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pipeplan.problem import A_PROBLEM, ConfigError, Op, OpKind, Problem, expect
from pipeplan.schedule import Schedule
from pipeplan.simulate import simulate
from pipeplan.torch_csv import to_torch_csv

# The torch release whose private pipelining API this module is written against.
TORCH_VERSION = "2.13.0"


class TorchMissing(ConfigError):
    """torch (or NumPy, which torch's stage shape inference needs) is not installed."""


def import_torch() -> Any:
    """Import torch, or raise :class:`TorchMissing` saying what to install."""
    try:
        import numpy  # noqa: F401  (torch's pipelining needs it at run time)
        import torch
    except ImportError as exc:
        raise TorchMissing(
            f"running a schedule in PyTorch needs torch {TORCH_VERSION} and NumPy ({exc.name or exc} is missing); "
            "install them with: pip install 'pipeplan[torch]'"
        ) from None
    return torch


@dataclass(frozen=True)
class TorchJob:
    """One training step to run: a problem (layout, microbatches, costs), the schedule, the model's size.

    ``time_scale`` > 0 stretches every action to its cost in the problem times ``time_scale`` seconds (the
    action sleeps out the rest of its time after computing); 0 runs the actions as fast as they go.
    """

    problem: Problem
    schedule: Schedule
    width: int = 8
    """Features of every linear layer."""
    rows_per_microbatch: int = 2
    """Samples in one microbatch; the batch is N times this."""
    seed: int = 0
    time_scale: float = 0.0

    def __post_init__(self) -> None:
        """Refuse a job torch could only fail on later, in its ranks (a hang until gloo's timeout, or an
        assertion): sizes below 1, a seed or time scale that is not a number >= 0, a schedule that is not one of
        this problem's."""
        for name, least in (("width", 1), ("rows_per_microbatch", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"TorchJob.{name} must be a whole number >= {least}, got {value!r}")
        scale = self.time_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 <= scale < float("inf"):
            raise ConfigError(f"TorchJob.time_scale must be a number >= 0 (0: as fast as it goes), got {scale!r}")
        expect("problem", self.problem, Problem, A_PROBLEM)
        simulate(self.problem, self.schedule)  # a ScheduleError names what does not fit the problem


@dataclass
class TorchRun:
    """What torch did with one job.

    ``orders[r]`` is the ops rank r ran, in the order it ran them (an input-gradient action is pipeplan's B, a
    full backward in a split problem is B then W); ``start`` and ``end`` map each op to seconds from the step's
    start (the earliest start on any rank); ``loss`` is the mean of the microbatch losses; ``grads`` maps
    ``"{stage}.{parameter}"`` to its gradient, flattened.
    """

    job: TorchJob
    orders: list[list[Op]]
    start: dict[Op, float]
    end: dict[Op, float]
    loss: float
    grads: dict[str, list[float]]
    step_time: float
    """Seconds from the first action's start to the last action's end, on any rank."""
    torch_version: str = ""


def _build_stages(torch: Any, job: TorchJob) -> list[Any]:
    """The model: one ``Linear(width, width) + Tanh`` per model stage, in model order, float64, seeded."""
    torch.manual_seed(job.seed)
    return [
        torch.nn.Sequential(torch.nn.Linear(job.width, job.width), torch.nn.Tanh()).double()
        for _ in range(job.problem.num_model_stages)
    ]


def _batch(torch: Any, job: TorchJob) -> tuple[Any, Any]:
    """The step's inputs and targets (seeded apart from the weights)."""
    generator = torch.Generator().manual_seed(job.seed + 1)
    rows = job.problem.num_microbatches * job.rows_per_microbatch
    inputs = torch.randn(rows, job.width, generator=generator, dtype=torch.float64)
    targets = torch.randn(rows, job.width, generator=generator, dtype=torch.float64)
    return inputs, targets


def reference_step(job: TorchJob) -> tuple[float, dict[str, list[float]]]:
    """Loss and gradients of the same step in one process: the whole batch, mean squared error.

    The pipeline averages the microbatch losses (equal sizes) and scales the summed gradients by 1/N, which is
    the same mean over the batch.
    """
    torch = import_torch()
    modules = _build_stages(torch, job)
    inputs, targets = _batch(torch, job)
    output = inputs
    for module in modules:
        output = module(output)
    loss = torch.nn.functional.mse_loss(output, targets)
    loss.backward()
    grads = {f"{s}.{name}": p.grad.flatten().tolist() for s, module in enumerate(modules)
             for name, p in module.named_parameters()}
    return float(loss.detach()), grads


def _record(stage: Any, stage_index: int, log: list[tuple[str, int, int, float, float]],
            costs: dict[str, float]) -> None:
    """Wrap ``stage``'s compute methods so each call appends (action, stage, microbatch, start, end) to ``log``.

    With a cost for the action's type, the call sleeps until ``start + cost`` after computing.
    """
    forward, backward, weight = stage.forward_one_chunk, stage.backward_one_chunk, stage.backward_weight_one_chunk

    def timed(kind: str, microbatch: int, call: Any) -> Any:
        start = time.perf_counter()
        result = call()
        remaining = start + costs.get(kind, 0.0) - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        log.append((kind, stage_index, microbatch, start, time.perf_counter()))
        return result

    def forward_one_chunk(fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        return timed("F", fwd_chunk_id, lambda: forward(fwd_chunk_id, *args, **kwargs))

    def backward_one_chunk(bwd_chunk_id: int, loss: Any = None, full_backward: bool = True,
                           last_backward: bool = False) -> Any:
        return timed("B" if full_backward else "I", bwd_chunk_id,
                     lambda: backward(bwd_chunk_id, loss=loss, full_backward=full_backward,
                                      last_backward=last_backward))

    def backward_weight_one_chunk(bwd_chunk_id: int, last_backward: bool = False) -> Any:
        return timed("W", bwd_chunk_id, lambda: weight(bwd_chunk_id, last_backward=last_backward))

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk
    stage.backward_weight_one_chunk = backward_weight_one_chunk


def _run_job(torch: Any, rank: int, job: TorchJob, folder: Path, index: int) -> dict[str, Any]:
    """One training step of ``job`` on this rank; returns what the rank saw (plain Python values)."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    problem = job.problem
    modules = _build_stages(torch, job)
    inputs, targets = _batch(torch, job)
    log: list[tuple[str, int, int, float, float]] = []
    stages = []
    for s in problem.stages_on_device(rank):
        example = torch.zeros(job.rows_per_microbatch, job.width, dtype=torch.float64, requires_grad=s > 0)
        stage = PipelineStage(modules[s], stage_index=s, num_stages=problem.num_model_stages,
                              device=torch.device("cpu"), input_args=(example,))
        costs = {}
        if job.time_scale > 0:
            b, w = problem.backward[s], problem.backward_weight[s]
            costs = {"F": problem.forward[s] * job.time_scale, "I": b * job.time_scale,
                     "W": w * job.time_scale, "B": (b + w) * job.time_scale}
        _record(stage, s, log, costs)
        stages.append(stage)
    runtime = _PipelineScheduleRuntime(stages, problem.num_microbatches, loss_fn=torch.nn.functional.mse_loss)
    path = folder / f"job{index}.csv"
    if rank == 0:
        path.write_text(to_torch_csv(problem, job.schedule), encoding="utf-8")
    torch.distributed.barrier()
    runtime._load_csv(str(path), format="compute_only")
    has_first = 0 in problem.stages_on_device(rank)
    has_last = problem.num_model_stages - 1 in problem.stages_on_device(rank)
    losses: list[Any] = []
    torch.distributed.barrier()
    if has_first:
        runtime.step(inputs, target=targets if has_last else None, losses=losses)
    else:
        runtime.step(target=targets if has_last else None, losses=losses)
    grads = {f"{s}.{name}": p.grad.flatten().tolist() for s in problem.stages_on_device(rank)
             for name, p in modules[s].named_parameters()}
    return {"log": log, "losses": [float(x.detach()) for x in losses], "grads": grads}


def _worker(rank: int, num_ranks: int, port: int, jobs: Sequence[TorchJob], folder: str) -> None:
    """One rank: join the process group, run every job in turn, write what it saw to ``folder``."""
    torch = import_torch()
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                         world_size=num_ranks, timeout=timedelta(seconds=120))
    try:
        seen = [_run_job(torch, rank, job, Path(folder), i) for i, job in enumerate(jobs)]
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()
    with open(Path(folder) / f"rank{rank}.pickle", "wb") as file:
        pickle.dump(seen, file)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ops_of(problem: Problem, kind: str, stage: int, microbatch: int) -> list[Op]:
    """pipeplan's ops for one torch action: I is B; a full backward is B, plus W when the backward is split."""
    if kind == "F":
        return [problem.op(OpKind.F, stage, microbatch)]
    if kind == "I":
        return [problem.op(OpKind.B, stage, microbatch)]
    if kind == "W":
        return [problem.op(OpKind.W, stage, microbatch)]
    full = [problem.op(OpKind.B, stage, microbatch)]
    return full + [problem.op(OpKind.W, stage, microbatch)] if problem.split_backward else full


def run_in_torch(jobs: Sequence[TorchJob]) -> list[TorchRun]:
    """Run every job, in turn, in one process group of as many CPU processes as the jobs have ranks.

    All jobs must have the same ``num_devices``. Raises :class:`TorchMissing` without torch, and
    ``RuntimeError`` (torch's) when a rank fails.
    """
    expect("jobs", jobs, (list, tuple), "a list of TorchJob, e.g. [TorchJob(problem, schedule)]")
    for job in jobs:
        expect("each of jobs", job, TorchJob, "a TorchJob(problem, schedule)")
    torch = import_torch()
    if not jobs:
        return []
    num_ranks = jobs[0].problem.num_devices
    if any(job.problem.num_devices != num_ranks for job in jobs):
        raise ConfigError("every job of one run needs the same pipeline.num_stages (one process per rank)")
    import multiprocessing

    import torch.multiprocessing as mp

    # A fork server imports torch once and forks every rank from it (also for later runs of this process);
    # spawning would import torch in every rank, which dominates a short run.
    multiprocessing.set_forkserver_preload(["torch", "torch.distributed.pipelining", __name__])
    with tempfile.TemporaryDirectory(prefix="pipeplan-torch-") as folder:
        env_threads = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            mp.start_processes(_worker, args=(num_ranks, _free_port(), list(jobs), folder), nprocs=num_ranks,
                               join=True, start_method="forkserver")
        finally:
            if env_threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = env_threads
        per_rank = []
        for rank in range(num_ranks):
            with open(Path(folder) / f"rank{rank}.pickle", "rb") as file:
                per_rank.append(pickle.load(file))
    runs = []
    for index, job in enumerate(jobs):
        problem = job.problem
        orders: list[list[Op]] = [[] for _ in range(num_ranks)]
        start: dict[Op, float] = {}
        end: dict[Op, float] = {}
        losses: list[float] = []
        grads: dict[str, list[float]] = {}
        for rank in range(num_ranks):
            seen = per_rank[rank][index]
            losses += seen["losses"]
            grads.update(seen["grads"])
            for kind, stage, microbatch, t0, t1 in seen["log"]:
                for op in _ops_of(problem, kind, stage, microbatch):
                    orders[rank].append(op)
                    start[op], end[op] = t0, t1
        origin = min(start.values())
        start = {op: t - origin for op, t in start.items()}
        end = {op: t - origin for op, t in end.items()}
        runs.append(TorchRun(job, orders, start, end, sum(losses) / len(losses), grads, max(end.values()),
                             torch_version=str(torch.__version__)))
    return runs
