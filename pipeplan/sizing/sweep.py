"""A sweep over parallel sizes, microbatch sizes, chunks, recompute modes and schedules: a pandas DataFrame.

One row per configuration and schedule. Combinations that cannot run keep a row with the reason in
``skipped`` (and no metrics), so a user sees which constraint removed each candidate. Rows are sorted by
tokens/s among those that fit, then those that do not fit, then the skipped ones.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeplan.executors import Executor, ShouldStop, check_executor
from pipeplan.executors.local import LocalExecutor
from pipeplan.problem import ConfigError, counted
from pipeplan.schedule import NotApplicable
from pipeplan.sizing.build import SizedProblem, build_problem, optimizer_variant
from pipeplan.sizing.estimate import (
    OPTIMAL,
    check_count,
    check_optimizer_options,
    check_schedule,
    place_named,
    run_named,
    run_optimal,
    summarize,
    without_advice,
)
from pipeplan.sizing.hardware import Hardware, load_hardware
from pipeplan.sizing.models import Model, load_model
from pipeplan.sizing.records import positive_number
from pipeplan.sizing.setup import RECOMPUTE_MODES, Setup, check_switches, constraint_violation
from pipeplan.solver import StopRequest, check_hooks
from pipeplan.store import (
    Outcome,
    Progress,
    Store,
    StoredRow,
    Task,
    TaskOutput,
    check_store,
    record_of,
    require_fields,
    run_tasks,
    task_key,
)

log = logging.getLogger(__name__)

# The columns that say which configuration a row is (:func:`_setup_columns`).
SETUP_FIELDS = ("num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size",
                "num_microbatches", "num_chunks", "recompute")
# Columns of the sweep's DataFrame, in order.
COLUMNS = (
    *SETUP_FIELDS, "schedule", "fits", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
    "bubble", "memory_gib", "static_memory_gib", "activation_memory_gib", "capacity_gib", "pipeline_time_s",
    "grad_sync_exposed_s", "optimizer_s", "status", "gap", "note", "skipped",
)
# What a stored row holds: a skipped configuration's, its setup, the schedule and why; any other, every column but
# "skipped".
_SKIPPED_FIELDS = (*SETUP_FIELDS, "schedule")
_RAN_FIELDS = tuple(column for column in COLUMNS if column != "skipped")


# Progress of a sweep (done / total, reused, failed, last finished), as the store's task loop reports it.
SweepProgress = Progress


def _as_list(name: str, value: object) -> list[Any]:
    values = list(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)) else [value]
    if not values:
        raise ConfigError(f"{name} is empty; give at least one value")
    return values


def _whole_numbers(name: str, value: object) -> list[int]:
    """A search-space argument (one whole number or a list of them) as a list without repeats; :class:`ConfigError`
    naming ``name`` unless each is a whole number >= 1."""
    values = _as_list(name, value)
    for item in values:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral) or item < 1:
            raise ConfigError(f"{name} must be a whole number >= 1 or a list of them, got {item!r}")
    return list(dict.fromkeys(int(item) for item in values))  # a value given twice would give its rows twice


def _check_options(time_limit_s: object, optimal_top: object, num_workers: object, processes: object) -> None:
    """:class:`ConfigError` naming the first of the sweep's scalar options out of range."""
    check_optimizer_options(time_limit_s, num_workers)
    check_count("optimal_top", optimal_top, optional=True)
    check_count("processes", processes, optional=False)


def _check_hooks(store: object, progress: object, stop: object, executor: object) -> None:
    """:class:`ConfigError` naming ``store``, ``progress``, ``stop`` or ``executor`` when it is not what a sweep can
    use."""
    check_store(store)
    check_hooks(progress, stop)
    check_executor(executor)


def _label(setup: Setup) -> str:
    return (f"tp{setup.tensor_parallel} pp{setup.pipeline_parallel} dp{setup.data_parallel} "
            f"mbs{setup.microbatch_size} v{setup.num_chunks} {setup.recompute}")


# The schedules a sweep runs when its caller names none (a study without search.schedules): 1F1B alone.
DEFAULT_SCHEDULES = "1f1b"


def schedule_names_of(schedules: object = DEFAULT_SCHEDULES) -> list[str]:
    """The names a sweep given ``schedules`` (one name or several) runs, each once, in order."""
    return list(dict.fromkeys(str(s) for s in _as_list("schedules", schedules)))


def sweep(
    *,
    model: object,
    hardware: object,
    num_gpus: int | Sequence[int],
    global_batch_size: int,
    seq_len: int,
    tensor_parallel: int | Sequence[int] = (1, 2, 4, 8),
    pipeline_parallel: int | Sequence[int] = (1, 2, 4, 8),
    microbatch_size: int | Sequence[int] = 1,
    num_chunks: int | Sequence[int] = 1,
    recompute: str | Sequence[str] = "selective",
    schedules: str | Sequence[str] = DEFAULT_SCHEDULES,
    sequence_parallel: bool = True,
    flash_attention: bool = True,
    distributed_optimizer: bool = True,
    overlap_grad_sync: bool = True,
    balanced: bool = False,
    time_limit_s: float = 10.0,
    optimal_top: int | None = None,
    num_workers: int | None = None,
    random_seed: int = 0,
    processes: int = 1,
    executor: Executor | None = None,
    store: Store | None = None,
    refresh: bool = False,
    progress: Callable[[Progress], None] | None = None,
    should_stop: ShouldStop | None = None,
    stop: StopRequest | None = None,
) -> pd.DataFrame:
    """Estimate every combination of the search space; one row per configuration and schedule.

    Each list also accepts a single value; ``num_gpus`` an int or a list, and the data-parallel size is
    num_gpus / (tensor_parallel x pipeline_parallel). "optimal" among ``schedules`` runs CP-SAT for
    ``time_limit_s`` seconds per configuration with ``num_workers`` workers (default: the machine's cores), on
    every configuration or, with ``optimal_top=K``, on the K configurations whose best named schedule is
    fastest (:data:`RANKING_SCHEDULES` among them, run to rank when not asked for and not shown).
    Columns are :data:`COLUMNS`.

    Each (configuration, schedule) is a task. Tasks run on ``executor`` (see :mod:`pipeplan.executors`; it is
    used as given, not entered or closed), else on a local pool of ``processes`` processes (in this process when
    1). With ``store`` (a :class:`~pipeplan.store.Store`), results found there are reused (unless ``refresh``)
    and every finished task is written to it as it finishes. A task that raises gets a row whose ``skipped``
    starts with "failed:"; the others go on. When ``should_stop()`` turns true, or ``stop`` (a
    :class:`~pipeplan.solver.StopRequest`) is requested, the sweep ends early: rows not run say so in
    ``skipped``. ``stop`` also ends an optimizer task that runs in this process at once; that task is then left
    out (not stored, its row "not run"), since its answer is not its time limit's. A task on a worker process or
    on Ray is dropped when the sweep stops (its worker ended), as any unfinished task. :func:`sweep_with_stats`
    also returns the counts.
    """
    return sweep_with_stats(**locals())[0]


@dataclass
class SweepStats:
    """What a sweep did: tasks in all, reused from the store, run, failed (label: error), stopped early."""

    total: int = 0
    reused: int = 0
    ran: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # keyed by task label: the error
    stopped: bool = False

    @property
    def done(self) -> int:
        return self.reused + self.ran

    def add(self, outcome: Outcome, tasks: Sequence[Task]) -> None:
        labels = {task.key: task.label for task in tasks}
        self.total += len(labels)
        self.reused += outcome.reused
        self.ran += outcome.ran
        self.failures.update({labels[key]: error for key, error in outcome.failures.items()})
        self.stopped = self.stopped or outcome.stopped


# ``skipped`` of a row that a stopped sweep did not run.
NOT_RUN = "not run: the sweep was stopped first"
# An optimizer row at most this much faster than a named schedule on its configuration ranks below it.
NEAR_TIE = 0.005
# What ranks the configurations for the optimizer's top K when only "optimal" is asked for: the plain schedule of
# each layout (one chunk, chunks in loop placement, in V).
RANKING_SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-v")


def sweep_with_stats(
    *,
    model: object,
    hardware: object,
    num_gpus: int | Sequence[int],
    global_batch_size: int,
    seq_len: int,
    tensor_parallel: int | Sequence[int] = (1, 2, 4, 8),
    pipeline_parallel: int | Sequence[int] = (1, 2, 4, 8),
    microbatch_size: int | Sequence[int] = 1,
    num_chunks: int | Sequence[int] = 1,
    recompute: str | Sequence[str] = "selective",
    schedules: str | Sequence[str] = DEFAULT_SCHEDULES,
    sequence_parallel: bool = True,
    flash_attention: bool = True,
    distributed_optimizer: bool = True,
    overlap_grad_sync: bool = True,
    balanced: bool = False,
    time_limit_s: float = 10.0,
    optimal_top: int | None = None,
    num_workers: int | None = None,
    random_seed: int = 0,
    processes: int = 1,
    executor: Executor | None = None,
    store: Store | None = None,
    refresh: bool = False,
    progress: Callable[[Progress], None] | None = None,
    should_stop: ShouldStop | None = None,
    stop: StopRequest | None = None,
) -> tuple[pd.DataFrame, SweepStats]:
    """:func:`sweep` (same keywords), returning also what it did: its :class:`SweepStats`."""
    if stop is not None:
        asked = should_stop
        should_stop = (lambda: stop.requested or asked()) if asked is not None else (lambda: stop.requested)
    model_rec = load_model(model)
    hardware_rec = load_hardware(hardware)
    names = schedule_names_of(schedules)
    for name in names:
        check_schedule(name)
    modes = list(dict.fromkeys(str(m) for m in _as_list("recompute", recompute)))
    for mode in modes:
        if mode not in RECOMPUTE_MODES:
            raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {mode!r}")
    _check_options(time_limit_s, optimal_top, num_workers, processes)
    _check_hooks(store, progress, stop, executor)
    # Options of every configuration: a bad one was a skipped row each ("sequence_parallel must be ..."), not an error.
    check_switches(sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                   distributed_optimizer=distributed_optimizer, overlap_grad_sync=overlap_grad_sync, balanced=balanced)
    # One value each for every configuration: a bad one is the caller's typo, not a row that does not fit.
    global_batch_size = int(positive_number("", "global_batch_size", global_batch_size, whole=True))
    seq_len = int(positive_number("", "seq_len", seq_len, whole=True))
    space = list(itertools.product(
        _whole_numbers("num_gpus", num_gpus), _whole_numbers("tensor_parallel", tensor_parallel),
        _whole_numbers("pipeline_parallel", pipeline_parallel), _whole_numbers("microbatch_size", microbatch_size),
        _whole_numbers("num_chunks", num_chunks), modes,
    ))
    rows: list[dict[str, Any]] = []
    built: list[Setup] = []  # configurations that can run
    for gpus, tp, pp, mbs, chunks, mode in space:
        base = {"num_gpus": gpus, "tensor_parallel": tp, "pipeline_parallel": pp, "microbatch_size": mbs,
                "num_chunks": chunks, "recompute": mode}
        reason, setup = _setup(model_rec, hardware_rec, gpus, tp, pp, mbs, chunks, mode, global_batch_size,
                               seq_len, sequence_parallel, flash_attention, distributed_optimizer,
                               overlap_grad_sync, balanced)
        if setup is None:
            rows.extend({**base, "schedule": name, "skipped": reason} for name in names)
            continue
        built.append(setup)
    workers = num_workers if num_workers is not None else (os.cpu_count() or 1)
    named_names = [n for n in names if n != OPTIMAL]
    if OPTIMAL in names and optimal_top is not None:
        # The optimizer's top configurations are those whose best named schedule is fastest: the plain schedules
        # of each layout rank them too (their rows are not shown), so every layout has one that applies.
        named_names += [n for n in RANKING_SCHEDULES if n not in named_names]
    named_tasks = {(id(setup), name): _named_task(model_rec, hardware_rec, setup, name, balanced)
                   for setup in built for name in named_names}  # keyed by (id of the setup, schedule)
    stats = SweepStats()
    with contextlib.ExitStack() as stack:
        if executor is None and processes > 1 and len(built) > 1:
            executor = stack.enter_context(LocalExecutor(processes))
        named = run_tasks(list(named_tasks.values()), _run_named_task, kind="size", executor=executor, store=store,
                          refresh=refresh, progress=progress, should_stop=should_stop, check=_check_stored)
        stats.add(named, list(named_tasks.values()))
        named_rows = [(setup, [record_of(named.records[task.key]) for name in named_names
                               if (task := named_tasks[(id(setup), name)]).key in named.records])
                      for setup in built]
        chosen = set() if named.stopped else _optimal_targets(named_rows, optimal_top,
                                                               [names for _ in built])
        optimal_tasks = {id(setup): _optimal_task(model_rec, hardware_rec, setup, balanced, time_limit_s, workers,
                                                  random_seed, stop)
                         for setup in built if id(setup) in chosen}  # keyed by id of the setup
        optimal = run_tasks(list(optimal_tasks.values()), _run_optimal_task, kind="size", executor=executor,
                            store=store, refresh=refresh, num_cpus=workers, progress=progress,
                            should_stop=should_stop,
                            done_before=(stats.done, stats.total, stats.reused, len(stats.failures)),
                            check=_check_stored)
        stats.add(optimal, list(optimal_tasks.values()))
    for setup, ranking_rows in named_rows:
        for name in names:
            if name == OPTIMAL and id(setup) not in chosen:
                if stats.stopped:
                    reason = NOT_RUN
                elif not any(row.get("fits") or _room_left(row) for row in ranking_rows):
                    none = ("fits in memory here and the static memory alone fills the device"
                            if any(row.get("skipped") is None for row in ranking_rows) else "ran here")
                    reason = (f"no named schedule ({', '.join(named_names)}) {none}, so the optimizer (on the "
                              f"top {optimal_top} configurations by their best named schedule) skipped it")
                else:
                    reason = f"not among the top {optimal_top} configurations for the optimizer"
                rows.append({**_setup_columns(setup), "schedule": OPTIMAL, "skipped": reason})
                continue
            task, outcome = ((optimal_tasks[id(setup)], optimal) if name == OPTIMAL
                             else (named_tasks[(id(setup), name)], named))
            if task.key in outcome.records:
                rows.append(record_of(outcome.records[task.key]))
            elif task.key in outcome.failures:
                rows.append({**_setup_columns(setup), "schedule": name,
                             "skipped": f"failed: {outcome.failures[task.key]}"})
            else:
                rows.append({**_setup_columns(setup), "schedule": name, "skipped": NOT_RUN})
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["fits"] = frame["fits"].astype("boolean").fillna(False).astype(bool)
    return ranked(frame), stats


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """A sweep's rows best first: those that fit, then those that ran, each by tokens/s as
    :func:`_ranking_throughput` counts it; among equals, named schedules before the optimizer."""
    frame = frame.reset_index(drop=True)  # labels as positions: the ranking's speeds are set by label
    order = frame.assign(_ran=frame["skipped"].isna(), _fits=frame["fits"], _tps=_ranking_throughput(frame),
                         _optimal=frame["schedule"] == OPTIMAL)
    order = order.sort_values(["_fits", "_ran", "_tps", "_optimal"], ascending=[False, False, False, True],
                              kind="stable")
    return order.drop(columns=["_ran", "_fits", "_tps", "_optimal"]).reset_index(drop=True)


def _ranking_throughput(frame: pd.DataFrame) -> pd.Series:
    """Each row's tokens/s as the ranking counts it: an optimizer row within :data:`NEAR_TIE` of a named schedule
    that fits on the same configuration counts as that schedule's, so it ranks just below it (a named schedule
    runs in frameworks as it is, and a difference that small is below what the cost model can tell: the best
    plan was once the optimizer's order at 2.7 times ZB-V's memory for 0.04 % more tokens/s)."""
    tps = frame["tokens_per_s"].fillna(-1.0).astype(float)
    named = frame[frame["fits"] & frame["skipped"].isna() & (frame["schedule"] != OPTIMAL)]
    best_named = named.groupby(list(CANDIDATE))["tokens_per_s"].max()
    for index, row in frame[frame["fits"] & (frame["schedule"] == OPTIMAL)].iterrows():
        rival = best_named.get(tuple(row[column] for column in CANDIDATE))
        if rival is not None and rival >= row["tokens_per_s"] * (1 - NEAR_TIE):
            tps[index] = min(float(rival), float(row["tokens_per_s"]))
    return tps


def _setup(model: Model, hardware: Hardware, gpus: int, tp: int, pp: int, mbs: int, chunks: int, mode: str,
           global_batch_size: int, seq_len: int, sequence_parallel: bool, flash_attention: bool,
           distributed_optimizer: bool, overlap_grad_sync: bool, balanced: bool) -> tuple[str, Setup | None]:
    """(reason, None) when the combination cannot run, else ("", setup)."""
    if gpus % (tp * pp):
        return f"{gpus} GPUs not divisible by tensor parallel {tp} x pipeline parallel {pp}", None
    try:
        setup = Setup(tensor_parallel=tp, pipeline_parallel=pp, data_parallel=gpus // (tp * pp),
                      microbatch_size=mbs, global_batch_size=global_batch_size, seq_len=seq_len, num_chunks=chunks,
                      recompute=mode, sequence_parallel=sequence_parallel, flash_attention=flash_attention,
                      distributed_optimizer=distributed_optimizer, overlap_grad_sync=overlap_grad_sync)
    except ConfigError as exc:
        return str(exc), None
    reason = constraint_violation(model, hardware, setup, even_split=not balanced)
    if reason is not None:
        return reason, None
    return "", setup


def _check_stored(row: StoredRow) -> None:
    """Refuse (ValueError) a stored row the sweep cannot read, which then runs again (see
    :meth:`pipeplan.store.Store.get`): a skipped configuration's record has its setup, the schedule and why it
    was skipped; any other has every column but "skipped". (Read as it is, a record edited to ``{}`` made every
    configuration look as if nothing fitted.)"""
    record = row.record or {}
    require_fields(record, _SKIPPED_FIELDS if "skipped" in record else _RAN_FIELDS)


def _setup_columns(setup: Setup) -> dict[str, Any]:
    return {name: getattr(setup, name) for name in SETUP_FIELDS}


def _row(result: dict[str, Any]) -> dict[str, Any]:
    return {key: result[key] for key in COLUMNS if key in result}


def _named_task(model: Model, hardware: Hardware, setup: Setup, name: str, balanced: bool) -> Task:
    inputs = {"model": model, "hardware": hardware, "setup": setup, "schedule": name, "balanced": balanced}
    return Task(task_key("size", inputs), f"{_label(setup)} {name}", (model, hardware, setup, name, balanced))


def _optimal_task(model: Model, hardware: Hardware, setup: Setup, balanced: bool, time_limit_s: float,
                  num_workers: int, random_seed: int, stop: StopRequest | None) -> Task:
    """The optimizer's task on one configuration. ``stop`` rides along with the input (a copy sent to another
    process arrives never requested) but is not part of the key: a stopped task is never stored."""
    solver = {"time_limit_s": time_limit_s, "num_workers": num_workers, "random_seed": random_seed}
    inputs = {"model": model, "hardware": hardware, "setup": setup, "schedule": OPTIMAL, "balanced": balanced,
              "solver": solver}
    return Task(task_key("size", inputs), f"{_label(setup)} {OPTIMAL}",
                (model, hardware, setup, balanced, time_limit_s, num_workers, random_seed, stop))


def _run_named_task(job: tuple[Model, Hardware, Setup, str, bool]) -> TaskOutput:
    """One named schedule on one configuration: its row (or a row saying why it does not apply). A module-level
    function, so that worker processes can run it."""
    model, hardware, setup, name, balanced = job

    def build(split: bool, where: str) -> SizedProblem:
        return build_problem(model, hardware, setup, split_backward=split, placement=where, balanced=balanced)

    try:
        sized, orders = place_named(name, setup.num_chunks, build)
    except (NotApplicable, ConfigError) as exc:  # sizing tries every schedule asked for: a skipped row
        return TaskOutput({**_setup_columns(setup), "schedule": name, "skipped": without_advice(exc)})
    timeline, metrics = run_named(sized, orders)
    row = _row(summarize(sized, setup, model, hardware, name, timeline, metrics, "", None))
    return TaskOutput.of(row)  # the orders are the generator's: the name regenerates them, no need to store


def _run_optimal_task(job: tuple[Model, Hardware, Setup, bool, float, int, int, StopRequest | None]) -> TaskOutput:
    """The optimizer on one configuration: its row, problem and the orders found; cut short when the stop
    request ended its search (the task ran in this process)."""
    model, hardware, setup, balanced, time_limit_s, num_workers, random_seed, stop = job
    split, where = optimizer_variant(setup.num_chunks)
    try:
        sized = build_problem(model, hardware, setup, split_backward=split, placement=where, balanced=balanced)
        timeline, metrics, status, gap, interrupted = run_optimal(sized, time_limit_s, num_workers, random_seed,
                                                                  stop)
    except ConfigError as exc:
        return TaskOutput({**_setup_columns(setup), "schedule": OPTIMAL, "skipped": str(exc)})
    if interrupted:
        return TaskOutput({}, cut_short=True)
    row = _row(summarize(sized, setup, model, hardware, OPTIMAL, timeline, metrics, status, gap))
    return TaskOutput.of(row, sized.problem, timeline.schedule)


def _optimal_targets(named: list[tuple[Setup, list[dict[str, Any]]]], top: int | None,
                     runnable: list[list[str]]) -> set[int]:
    """ids of the setups the optimizer runs on: all with "optimal" requested, or the ``top`` whose best fitting
    named schedule has the most tokens/s, then, while fewer than ``top`` have one that fits, those whose named
    schedules all overflow memory but leave room for activations (:func:`_room_left`), fastest first: the
    optimizer searches within memory and may find a plan there (a new user's study where no named schedule fitted
    was told that nothing could run, the optimizer unasked)."""
    wanted = [(setup, rows) for (setup, rows), names in zip(named, runnable) if OPTIMAL in names]
    if top is None:
        return {id(setup) for setup, _ in wanted}

    def best(rows: list[dict[str, Any]], fitting: bool) -> float:
        speeds = [r.get("tokens_per_s") for r in rows  # none on a skipped row
                  if r.get("fits") or (not fitting and _room_left(r))]
        return max((v for v in speeds if isinstance(v, (int, float)) and math.isfinite(v)), default=-1.0)

    by_speed = sorted(wanted, key=lambda item: (best(item[1], True), best(item[1], False)), reverse=True)
    return {id(setup) for setup, rows in by_speed[:top] if best(rows, False) > 0}


def _room_left(row: Mapping[str, Any]) -> bool:
    """Whether a named schedule's row leaves memory on its fullest device once the static memory (weights,
    gradients, optimizer state, workspace) is in: where it does not, no schedule fits there and the optimizer
    would only say so."""
    static, capacity = row.get("static_memory_gib"), row.get("capacity_gib")
    if not isinstance(static, numbers.Real) or not isinstance(capacity, numbers.Real):
        return False  # a skipped row: no figures
    return bool(static < capacity)


# Configuration columns: one candidate of the search space.
CANDIDATE = ("num_gpus", "tensor_parallel", "pipeline_parallel", "microbatch_size", "num_chunks", "recompute")
# The most candidates an error message lists one by one.
MAX_LISTED = 12


def candidate_label(row: Any) -> str:
    """A configuration as a short label: "64 GPUs tp4 pp8 dp2 mbs1 v2 selective"."""
    dp = row["data_parallel"]
    dp_text = f" dp{int(dp)}" if dp == dp and dp is not None else ""
    return (f"{int(row['num_gpus'])} GPUs tp{int(row['tensor_parallel'])} pp{int(row['pipeline_parallel'])}"
            f"{dp_text} mbs{int(row['microbatch_size'])} v{int(row['num_chunks'])} {row['recompute']}")


def require_fitting(frame: pd.DataFrame) -> None:
    """Raise :class:`ConfigError` when no row of a sweep runs within memory, saying for each candidate which
    constraint removed it (the first schedule's reason, or why the best-running one does not fit)."""
    if bool(frame["fits"].any()):
        return
    reasons: list[str] = []
    for _, group in frame.groupby(list(CANDIDATE), sort=False):
        ran = group[group["skipped"].isna()]
        reason = str(ran.iloc[0]["note"]) if len(ran) else str(group.iloc[0]["skipped"])
        reasons.append(f"{candidate_label(group.iloc[0])}: {reason}")
    listed = "; ".join(reasons[:MAX_LISTED])
    more = f"; and {len(reasons) - MAX_LISTED} more" if len(reasons) > MAX_LISTED else ""
    # When none could run at all (every size skipped: GPU counts, divisibility), memory is not the reason.
    what = "runs within memory" if bool(frame["skipped"].isna().any()) else "can run"
    fixes = []
    if any("out of memory" in reason for reason in reasons):
        # Full recompute is no advice to a search that already tried it.
        full = [] if bool((frame["recompute"] == "full").any()) else ["recompute: full"]
        ways = ["more GPUs", "a larger pipeline_parallel or tensor_parallel (less memory per GPU)", *full]
        fixes.append(f"{', '.join(ways)} or a GPU with more memory")
    if any("not divisible by" in reason and "model stages" in reason for reason in reasons):
        fixes.append("options.balanced: true (balanced=True in Python) for layers that do not divide evenly")
    fix = f"; to fit, try {'; or '.join(fixes)}" if fixes else ""
    count = counted(len(reasons), "candidate")
    raise ConfigError(f"no configuration of the search space {what} ({count}){fix}. Per candidate: {listed}{more}")


def best_row(frame: pd.DataFrame) -> dict[str, Any]:
    """The fastest fitting row of a sweep (the first, as sweeps are sorted), as a dict."""
    require_fitting(frame)
    return dict(frame.iloc[0])
