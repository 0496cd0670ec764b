"""One configuration: build its pipeline problem, replay (or optimize) its schedule, and report throughput.

Sizing has no timing code of its own: the step's pipeline part is the simulator's makespan of the named
schedule (or of the CP-SAT optimum), to which the data-parallel gradient sync that is not hidden and the
optimizer step are added.
"""

from __future__ import annotations

import logging
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from pipeplan.metrics import Metrics, compute_metrics
from pipeplan.problem import PLACEMENTS, ConfigError, expect
from pipeplan.schedule import NotApplicable, Schedule
from pipeplan.schedules import generate, get
from pipeplan.simulate import Timeline, simulate
from pipeplan.sizing import costs
from pipeplan.sizing.build import VARIANTS, SizedProblem, build_problem, optimizer_variant
from pipeplan.sizing.hardware import GIB, Hardware, load_hardware
from pipeplan.sizing.models import Model, load_model
from pipeplan.sizing.setup import Setup, check_switches, constraint_violation
from pipeplan.solver import NOT_WHOLE_TICKS, InfeasibleBudget, StopRequest, solve

log = logging.getLogger(__name__)

OPTIMAL = "optimal"


def check_schedule(name: str) -> None:
    """Raise :class:`ConfigError` listing the valid names unless ``name`` is a registered schedule or
    "optimal"."""
    if name != OPTIMAL:
        try:
            get(name)
        except ConfigError as exc:
            raise ConfigError(f"{exc}, {OPTIMAL}") from None


def check_placement(placement: str | None, num_chunks: int) -> None:
    """Raise :class:`ConfigError` unless ``placement`` is None, "loop", or "v" with 2 chunks per device."""
    if placement is not None and placement not in PLACEMENTS:
        raise ConfigError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if placement == "v" and num_chunks != 2:
        raise ConfigError(f"V placement needs num_chunks = 2 (two chunks per device), got {num_chunks}")


def place_named(schedule: str, num_chunks: int, build: Callable[[bool, str], SizedProblem],
                placement: str | None = None) -> tuple[SizedProblem, Schedule]:
    """The problem a named schedule runs on and its orders, generated as a framework runs it.

    Tries the :data:`~pipeplan.sizing.build.VARIANTS` in order (only ``placement`` when given) and keeps the
    first the generator accepts; ``build(split_backward, placement)`` makes each. The schedule is generated
    without the budget (Megatron-LM's 1F1B warms up P - r - 1 microbatches whatever the memory). Raises the
    last variant's :class:`NotApplicable` when none applies (it has the split backward, which a sizing caller
    does not choose, so its reason is the layout's: the first variant's said "needs a split backward" of a
    zero-bubble schedule on the wrong number of chunks), and :class:`ConfigError` for a placement that is not
    "loop" or "v" (V with 2 chunks per device only).
    """
    check_placement(placement, num_chunks)
    last: NotApplicable | None = None
    for split, where in VARIANTS:
        if (placement is not None and where != placement) or (where == "v" and num_chunks != 2):
            continue
        sized = build(split, where)
        try:
            return sized, generate(schedule, sized.problem.with_budget(None))
        except NotApplicable as exc:
            last = exc
    assert last is not None, "every schedule applies to some variant"
    raise last


def run_named(sized: SizedProblem, schedule: Schedule) -> tuple[Timeline, Metrics]:
    """Replay a named schedule's orders under the budget: it fits when its peaks are within it."""
    timeline = simulate(sized.problem, schedule)
    return timeline, compute_metrics(timeline)


class OptimalRun(NamedTuple):
    """What :func:`run_optimal` found: the schedule's timeline and metrics, the solver's status and gap, and
    whether a stop request ended the search before its time limit."""

    timeline: Timeline
    metrics: Metrics
    status: str
    gap: float | None
    interrupted: bool = False


def run_optimal(sized: SizedProblem, time_limit_s: float, num_workers: int | None,
                random_seed: int, stop: StopRequest | None = None) -> OptimalRun:
    """The optimizer on the problem, searching within the budget (``stop`` can end the search early)."""
    problem = sized.problem
    if not sized.fits_one_microbatch:
        timeline = simulate(problem, generate("gpipe", problem))
        return OptimalRun(timeline, compute_metrics(timeline), "not solved (does not fit)", None)
    solver_log = logging.getLogger("pipeplan.solver")
    solver_log.addFilter(_without_tick_warning)
    try:
        result = solve(problem, time_limit_s=time_limit_s, num_workers=num_workers, random_seed=random_seed,
                       stop=stop)
    except InfeasibleBudget as exc:
        log.info("optimizer: %s", exc)
        timeline = simulate(problem, generate("gpipe", problem))
        return OptimalRun(timeline, compute_metrics(timeline), "infeasible", None)
    finally:
        solver_log.removeFilter(_without_tick_warning)
    return OptimalRun(result.timeline, result.metrics, result.status, result.gap, result.interrupted)


def _without_tick_warning(record: logging.LogRecord) -> bool:
    """Leaves out the solver's warning that costs or memory are not whole ticks: a sized problem's never are (times
    in seconds beside memory in bytes), and its advice, fewer digits in a config's values, is not a study's to
    follow. The optimizer's status and gap still say what it proved."""
    return record.msg is not NOT_WHOLE_TICKS


def estimate(
    *,
    model: object,
    hardware: object,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    data_parallel: int = 1,
    microbatch_size: int = 1,
    global_batch_size: int,
    seq_len: int,
    num_chunks: int = 1,
    recompute: str = "selective",
    sequence_parallel: bool = True,
    schedule: str = "1f1b",
    flash_attention: bool = True,
    distributed_optimizer: bool = True,
    overlap_grad_sync: bool = True,
    layers_per_stage: Sequence[int] | None = None,
    balanced: bool = False,
    placement: str | None = None,
    time_limit_s: float = 10.0,
    num_workers: int | None = None,
    random_seed: int = 0,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Estimate one training configuration: step time, throughput, MFU and memory per GPU.

    ``model`` and ``hardware`` are preset names, mappings or YAML files (see :func:`load_model`,
    :func:`load_hardware`). ``schedule`` is a registered schedule name or "optimal" (CP-SAT within
    ``time_limit_s`` seconds). A named schedule runs as frameworks run it (its warm-up does not shrink to fit
    the memory; if its peak is over the budget, ``fits`` is false); the optimizer searches within the budget.
    A named schedule runs on the fused backward when its generator accepts it (as Megatron-LM runs 1F1B), else
    on a split backward (B, W) in loop placement, else in V placement; ``placement`` restricts that choice. The
    optimizer runs a split backward, in V placement with 2 chunks.

    Returns a dict with ``step_time_s``, ``tokens_per_s``, ``tflops_per_gpu`` (model FLOPs as Megatron-LM counts
    them, no recompute), ``mfu``, ``bubble`` (of the pipeline), ``memory_gib`` (peak per GPU: static state,
    workspace and live activations), ``static_memory_gib``, ``activation_memory_gib``, ``fits`` (within the
    GPU's capacity minus its reserve), the parallel sizes, ``num_microbatches``, ``status`` and ``gap`` (for
    "optimal"), ``note`` (why it does not fit), ``interrupted`` (``stop`` was requested during the optimizer's
    search, which then ended early with the best schedule found so far), and the ``problem``, ``timeline`` and
    ``sized`` records.
    Raises :class:`ConfigError` (a ``ValueError``) for input that cannot run, naming the constraint.
    """
    model_rec = load_model(model)
    hardware_rec = load_hardware(hardware)
    check_schedule(schedule)
    check_optimizer_options(time_limit_s, num_workers)
    check_switches(balanced=balanced)  # the others are checked with the setup
    setup = Setup(
        tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, data_parallel=data_parallel,
        microbatch_size=microbatch_size, global_batch_size=global_batch_size, seq_len=seq_len,
        num_chunks=num_chunks, recompute=recompute, sequence_parallel=sequence_parallel,
        flash_attention=flash_attention, distributed_optimizer=distributed_optimizer,
        overlap_grad_sync=overlap_grad_sync,
    )
    reason = constraint_violation(model_rec, hardware_rec, setup,
                                  even_split=layers_per_stage is None and not balanced)
    if reason is not None:
        raise ConfigError(f"this configuration cannot run: {reason}")

    def build(split: bool, where: str) -> SizedProblem:
        return build_problem(model_rec, hardware_rec, setup, split_backward=split, placement=where,
                             layers_per_stage=layers_per_stage, balanced=balanced)

    check_placement(placement, num_chunks)
    expect("stop", stop, (StopRequest, type(None)), "a pipeplan.solver.StopRequest or None")
    if schedule == OPTIMAL:
        split, where = optimizer_variant(num_chunks)
        sized = build(split, placement or where)
        timeline, metrics, status, gap, interrupted = run_optimal(sized, time_limit_s, num_workers, random_seed,
                                                                  stop)
    else:
        try:
            sized, orders = place_named(schedule, num_chunks, build, placement)
        except NotApplicable as exc:
            raise ConfigError(f"schedule {schedule!r} does not apply to this layout: {without_advice(exc)}; pass "
                              "num_chunks= and placement= to match") from None
        timeline, metrics = run_named(sized, orders)
        status, gap, interrupted = "", None, False
    record = summarize(sized, setup, model_rec, hardware_rec, schedule, timeline, metrics, status, gap)
    return {**record, "interrupted": interrupted}


def check_optimizer_options(time_limit_s: object, num_workers: object) -> None:
    """:class:`ConfigError` naming ``time_limit_s`` or ``num_workers`` when out of range (checked whether the
    optimizer runs or not, so that a bad value is not found only when it does)."""
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, numbers.Real) \
            or not math.isfinite(time_limit_s) or time_limit_s <= 0:
        raise ConfigError(f"time_limit_s must be a number of seconds > 0, got {time_limit_s!r}")
    check_count("num_workers", num_workers, optional=True)


def check_count(name: str, value: object, optional: bool) -> None:
    """:class:`ConfigError` unless ``value`` is a whole number >= 1 (or None when ``optional``)."""
    if (value is not None or not optional) and (
            isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        none = " (or None)" if optional else ""
        raise ConfigError(f"{name} must be a whole number >= 1{none}, got {value!r}")


def without_advice(exc: Exception) -> str:
    """A generator's or the problem's error without its advice ("; set ...", "; with ..."), which names config
    keys and other schedules: sizing picks the backward and placement itself."""
    return str(exc).split("; set ")[0].split("; with ")[0]


def summarize(sized: SizedProblem, setup: Setup, model: Model, hardware: Hardware, schedule: str,
              timeline: Timeline, metrics: Metrics, status: str, gap: float | None) -> dict[str, Any]:
    """The result record of one configuration and schedule (see :func:`estimate`)."""
    devices = range(setup.pipeline_parallel)
    exposed = [
        max(0.0, sized.grad_sync_s[d] - (sized.last_backward_s[d] if setup.overlap_grad_sync else 0.0))
        for d in devices
    ]
    step = metrics.makespan + max(exposed) + max(sized.optimizer_s)
    totals = [sized.static_bytes[d] + sized.workspace_bytes[d] + metrics.peak_memory_per_device[d] for d in devices]
    worst = max(devices, key=lambda d: totals[d])
    tokens = setup.global_batch_size * setup.seq_len
    tflops = costs.model_flops_per_step(model, setup) / (step * setup.num_gpus) / 1e12
    fits = sized.fits_one_microbatch and metrics.feasible
    note = sized.note
    if not note and not metrics.feasible:
        live, left = metrics.peak_memory / GIB, min(sized.budget_bytes) / GIB
        digits = next((n for n in range(1, 4) if f"{live:.{n}f}" != f"{left:.{n}f}"), 3)  # never "22.2 over 22.2"
        note = f"{schedule} keeps {live:.{digits}f} GiB of activations live, over the {left:.{digits}f} GiB left"
    return {
        "schedule": schedule,
        "tensor_parallel": setup.tensor_parallel,
        "pipeline_parallel": setup.pipeline_parallel,
        "data_parallel": setup.data_parallel,
        "num_gpus": setup.num_gpus,
        "microbatch_size": setup.microbatch_size,
        "num_microbatches": setup.num_microbatches,
        "num_chunks": setup.num_chunks,
        "recompute": setup.recompute,
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tflops_per_gpu": tflops,
        "mfu": tflops * 1e12 / (hardware.peak_tflops * 1e12),
        "bubble": metrics.bubble,
        "pipeline_time_s": metrics.makespan,
        "grad_sync_exposed_s": max(exposed),
        "optimizer_s": max(sized.optimizer_s),
        "memory_gib": totals[worst] / GIB,
        "static_memory_gib": (sized.static_bytes[worst] + sized.workspace_bytes[worst]) / GIB,
        "activation_memory_gib": metrics.peak_memory_per_device[worst] / GIB,
        "capacity_gib": sized.capacity_bytes / GIB,
        "reserve_gib": sized.reserve_bytes / GIB,
        "fits": fits,
        "status": status,
        "gap": gap,
        "note": note,
        "problem": sized.problem,
        "timeline": timeline,
        "sized": sized,
    }
