"""A sweep over parallel sizes, microbatch sizes, chunks, recompute modes and schedules: a pandas DataFrame.

One row per configuration and schedule. Combinations that cannot run keep a row with the reason in
``skipped`` (and no metrics), so a user sees which constraint removed each candidate. Rows are sorted by
tokens/s among those that fit, then those that do not fit, then the skipped ones.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeplan.problem import ConfigError
from pipeplan.schedule import NotApplicable
from pipeplan.sizing.build import SizedProblem, build_problem, optimizer_variant
from pipeplan.sizing.estimate import OPTIMAL, check_schedule, place_named, run_named, run_optimal, summarize
from pipeplan.sizing.hardware import Hardware, load_hardware
from pipeplan.sizing.models import Model, load_model
from pipeplan.sizing.setup import RECOMPUTE_MODES, Setup, constraint_violation

log = logging.getLogger(__name__)

# Columns of the sweep's DataFrame, in order.
COLUMNS = (
    "num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size", "num_microbatches",
    "num_chunks", "recompute", "schedule", "fits", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
    "bubble", "memory_gib", "static_memory_gib", "activation_memory_gib", "capacity_gib", "pipeline_time_s",
    "grad_sync_exposed_s", "optimizer_s", "status", "gap", "note", "skipped",
)


@dataclass(frozen=True)
class SweepProgress:
    """How far a sweep is: configurations done out of the total, and the one just finished."""

    done: int
    total: int
    label: str


def _as_list(name: str, value: object) -> list[Any]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ConfigError(f"{name} is empty; give at least one value")
    return values


def _label(setup: Setup) -> str:
    return (f"tp{setup.tensor_parallel} pp{setup.pipeline_parallel} dp{setup.data_parallel} "
            f"mbs{setup.microbatch_size} v{setup.num_chunks} {setup.recompute}")


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
    schedules: str | Sequence[str] = "1f1b",
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
    progress: Callable[[SweepProgress], None] | None = None,
) -> pd.DataFrame:
    """Estimate every combination of the search space; one row per configuration and schedule.

    Each list also accepts a single value; ``num_gpus`` an int or a list, and the data-parallel size is
    num_gpus / (tensor_parallel x pipeline_parallel). "optimal" among ``schedules`` runs CP-SAT for
    ``time_limit_s`` seconds per configuration, on every configuration or, with ``optimal_top=K``, on the K
    configurations whose best named schedule is fastest. ``processes`` > 1 replays the named schedules in that
    many worker processes. Columns are :data:`COLUMNS`.
    """
    model_rec = load_model(model)
    hardware_rec = load_hardware(hardware)
    names = [str(s) for s in _as_list("schedules", schedules)]
    for name in names:
        check_schedule(name)
    modes = [str(m) for m in _as_list("recompute", recompute)]
    for mode in modes:
        if mode not in RECOMPUTE_MODES:
            raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {mode!r}")
    space = list(itertools.product(
        _as_list("num_gpus", num_gpus), _as_list("tensor_parallel", tensor_parallel),
        _as_list("pipeline_parallel", pipeline_parallel), _as_list("microbatch_size", microbatch_size),
        _as_list("num_chunks", num_chunks), modes,
    ))
    rows: list[dict[str, Any]] = []
    built: list[tuple[Setup, list[str]]] = []  # configurations to replay, with their schedules
    for gpus, tp, pp, mbs, chunks, mode in space:
        base = {"num_gpus": gpus, "tensor_parallel": tp, "pipeline_parallel": pp, "microbatch_size": mbs,
                "num_chunks": chunks, "recompute": mode}
        reason, setup = _setup(model_rec, hardware_rec, gpus, tp, pp, mbs, chunks, mode, global_batch_size,
                               seq_len, sequence_parallel, flash_attention, distributed_optimizer,
                               overlap_grad_sync, balanced)
        if setup is None:
            rows.extend({**base, "schedule": name, "skipped": reason} for name in names)
            continue
        base.update(data_parallel=setup.data_parallel, num_microbatches=setup.num_microbatches)
        built.append((setup, names))
    total = len(built)
    jobs = [(model_rec, hardware_rec, setup, [n for n in runnable if n != OPTIMAL], balanced)
            for setup, runnable in built]
    named_results: list[tuple[Setup, list[dict[str, Any]]]] = []
    with contextlib.ExitStack() as stack:
        if processes > 1 and total > 1:
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=processes))
            results_iter: Iterable[list[dict[str, Any]]] = pool.map(_run_named_job, jobs, chunksize=4)
        else:
            results_iter = map(_run_named_job, jobs)
        for index, ((setup, _), results) in enumerate(zip(built, results_iter)):
            named_results.append((setup, results))
            if progress is not None:
                progress(SweepProgress(index + 1, total, _label(setup)))
    chosen = _optimal_targets(named_results, optimal_top, [r for _, r in built])
    solved = 0
    for (setup, results), (_, runnable) in zip(named_results, built):
        if OPTIMAL in runnable:
            if id(setup) in chosen:
                solved += 1
                if progress is not None:
                    progress(SweepProgress(solved, len(chosen), f"optimizer on {_label(setup)}"))
                results.append(_run_optimal(model_rec, hardware_rec, setup, balanced, time_limit_s, num_workers,
                                            random_seed))
            else:
                results.append({**_setup_columns(setup), "schedule": OPTIMAL,
                                "skipped": f"not among the top {optimal_top} configurations for the optimizer"})
        rows.extend(results)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["fits"] = frame["fits"].astype("boolean").fillna(False).astype(bool)
    ran = frame["skipped"].isna()
    order = frame.assign(_ran=ran, _fits=frame["fits"], _tps=frame["tokens_per_s"].fillna(-1.0))
    order = order.sort_values(["_fits", "_ran", "_tps"], ascending=[False, False, False], kind="stable")
    return order.drop(columns=["_ran", "_fits", "_tps"]).reset_index(drop=True)


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


def _setup_columns(setup: Setup) -> dict[str, Any]:
    return {"num_gpus": setup.num_gpus, "tensor_parallel": setup.tensor_parallel,
            "pipeline_parallel": setup.pipeline_parallel, "data_parallel": setup.data_parallel,
            "microbatch_size": setup.microbatch_size, "num_microbatches": setup.num_microbatches,
            "num_chunks": setup.num_chunks, "recompute": setup.recompute}


def _row(result: dict[str, Any]) -> dict[str, Any]:
    return {key: result[key] for key in COLUMNS if key in result}


def _run_named_job(job: tuple[Model, Hardware, Setup, list[str], bool]) -> list[dict[str, Any]]:
    """:func:`_run_named` on one packed job (a module-level function, so worker processes can run it)."""
    return _run_named(*job)


def _run_named(model: Model, hardware: Hardware, setup: Setup, names: Iterable[str], balanced: bool) -> list[
        dict[str, Any]]:
    """Rows of the named schedules on one configuration; each problem variant built once."""
    problems: dict[tuple[bool, str], SizedProblem] = {}  # keyed by (split backward, placement)

    def build(split: bool, where: str) -> SizedProblem:
        if (split, where) not in problems:
            problems[(split, where)] = build_problem(model, hardware, setup, split_backward=split, placement=where,
                                                     balanced=balanced)
        return problems[(split, where)]

    rows = []
    for name in names:
        try:
            sized, orders = place_named(name, setup.num_chunks, build)
        except (NotApplicable, ConfigError) as exc:
            # The generators' hints name config keys; sizing picks the backward and placement itself.
            reason = str(exc).split("; set ")[0].split("; with chunks")[0]
            rows.append({**_setup_columns(setup), "schedule": name, "skipped": reason})
            continue
        timeline, metrics = run_named(sized, orders)
        rows.append(_row(summarize(sized, setup, model, hardware, name, timeline, metrics, "", None)))
    return rows


def _run_optimal(model: Model, hardware: Hardware, setup: Setup, balanced: bool, time_limit_s: float,
                 num_workers: int | None, random_seed: int) -> dict[str, Any]:
    split, where = optimizer_variant(setup.num_chunks)
    try:
        sized = build_problem(model, hardware, setup, split_backward=split, placement=where, balanced=balanced)
        timeline, metrics, status, gap = run_optimal(sized, time_limit_s, num_workers, random_seed)
    except ConfigError as exc:
        return {**_setup_columns(setup), "schedule": OPTIMAL, "skipped": str(exc)}
    return _row(summarize(sized, setup, model, hardware, OPTIMAL, timeline, metrics, status, gap))


def _optimal_targets(named: list[tuple[Setup, list[dict[str, Any]]]], top: int | None,
                     runnable: list[list[str]]) -> set[int]:
    """ids of the setups the optimizer runs on: all with "optimal" requested, or the ``top`` whose best fitting
    named schedule has the most tokens/s."""
    wanted = [(setup, rows) for (setup, rows), names in zip(named, runnable) if OPTIMAL in names]
    if top is None:
        return {id(setup) for setup, _ in wanted}

    def best(rows: list[dict[str, Any]]) -> float:
        return max((r["tokens_per_s"] for r in rows if r.get("fits")), default=-1.0)

    ranked = sorted(wanted, key=lambda item: best(item[1]), reverse=True)
    return {id(setup) for setup, rows in ranked[:top] if best(rows) > 0}


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
    raise ConfigError(f"no configuration of the search space runs within memory ({len(reasons)} candidates): "
                      f"{listed}{more}")


def best_row(frame: pd.DataFrame) -> dict[str, Any]:
    """The fastest fitting row of a sweep (the first, as sweeps are sorted), as a dict."""
    require_fitting(frame)
    return dict(frame.iloc[0])
