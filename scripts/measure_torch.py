"""Measured against simulated: run schedules in PyTorch on CPU with known per-op costs and compare timelines.

Each action of the exported schedule runs in torch's ``_PipelineScheduleRuntime`` (one process per rank, gloo)
and is stretched by sleeping to its cost in the problem times ``--unit-ms`` milliseconds, so the per-op costs are
known; sleeping leaves the CPU to the other ranks, so a 2-core machine can hold 4 ranks. Every op's start and end
are measured and held against pipeplan's simulator: the step time error and the per-op start error. Each
schedule runs ``--repeats`` times; the figures are the median step.

The problem: 4 ranks, 8 microbatches, a split backward with an LM-head-like heavier last stage, budget of 4
activations; the schedules are 1F1B and the optimizer's (CP-SAT) for that budget. Writes
results/measure_torch.csv (one row per schedule), results/measure_torch_ops.csv (every op of the median step)
and results/measure_torch_profile.csv (the measured per-stage times, a profile ``costs: {profile: ...}`` reads).

    python scripts/measure_torch.py [--ranks 4] [--microbatches 8] [--unit-ms 20] [--repeats 3] [--out results]

Needs torch (pip install 'pipeplan[torch]'); without it, exits with status 2 and says so.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from pipeplan import ConfigError, OpKind, Problem, Schedule, compute_metrics, generate, simulate, solve
from pipeplan.report.files import check_creatable

ROOT = Path(__file__).resolve().parent.parent


def build_problem(ranks: int, microbatches: int) -> Problem:
    """Per-device F, B, W in the config's unit (1 unit = --unit-ms); the last stage carries the head and loss."""
    forward = [1.0] * ranks
    backward = [1.0] * ranks
    forward[-1], backward[-1] = 1.4, 1.3
    return Problem.build(ranks, microbatches, forward=forward, backward=backward, backward_weight=0.6,
                         activation=1.0, weight_activation=0.3, budget=ranks)


def schedules(problem: Problem, time_limit: float) -> list[Schedule]:
    return [generate("1f1b", problem), solve(problem, time_limit_s=time_limit, num_workers=1).schedule]


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0 (finite), else a usage error naming the value."""
    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be finite and above 0, got {text!r}")
        return value
    return convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=_positive(int), default=4)
    parser.add_argument("--microbatches", type=_positive(int), default=8)
    parser.add_argument("--unit-ms", type=_positive(float), default=20.0,
                        help="Milliseconds of one time unit of the costs.")
    parser.add_argument("--repeats", type=_positive(int), default=3, help="Steps per schedule; the median is reported.")
    parser.add_argument("--time-limit", type=_positive(float), default=5.0, help="CP-SAT time limit in seconds.")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args(argv)
    if not args.out.is_dir():
        try:
            check_creatable(args.out)  # a probe: nothing is left behind when the run stops early
        except ConfigError as exc:
            parser.error(str(exc))

    try:
        from pipeplan.torch_run import TorchJob, import_torch, run_in_torch

        torch = import_torch()
    except ConfigError as exc:
        print(f"measure_torch: error: {exc}", file=sys.stderr)
        return 2

    problem = build_problem(args.ranks, args.microbatches)
    scale = args.unit_ms / 1000.0
    plans = schedules(problem, args.time_limit)
    jobs = [TorchJob(problem, schedule, time_scale=scale) for schedule in plans for _ in range(args.repeats)]
    runs = run_in_torch(jobs)

    rows = []
    op_rows = []
    per_stage: dict[tuple[int, str], list[float]] = defaultdict(list)  # keyed by (stage, kind): durations, ms
    for i, schedule in enumerate(plans):
        timeline = simulate(problem, schedule)
        metrics = compute_metrics(timeline)
        attempts = runs[i * args.repeats:(i + 1) * args.repeats]
        assert all(run.orders == [list(order) for order in schedule.orders] for run in attempts), "order differs"
        run = sorted(attempts, key=lambda r: r.step_time)[len(attempts) // 2]  # the median step
        simulated_ms = metrics.makespan * args.unit_ms
        measured_ms = run.step_time * 1000
        errors = []
        for op, device, start, end in zip(timeline.ops, timeline.device, timeline.start, timeline.end):
            measured_start, measured_end = run.start[op] * 1000, run.end[op] * 1000
            errors.append(measured_start - start * args.unit_ms)
            op_rows.append({"schedule": schedule.name, "device": device, "op": op.label,
                            "simulated_start_ms": round(start * args.unit_ms, 3),
                            "measured_start_ms": round(measured_start, 3),
                            "simulated_end_ms": round(end * args.unit_ms, 3),
                            "measured_end_ms": round(measured_end, 3)})
            per_stage[(op.stage, op.kind.value)].append(measured_end - measured_start)
        rows.append({
            "schedule": schedule.name, "ranks": problem.num_devices, "microbatches": problem.num_microbatches,
            "unit_ms": args.unit_ms, "peak_memory": metrics.peak_memory,
            "simulated_step_ms": round(simulated_ms, 2), "measured_step_ms": round(measured_ms, 2),
            "step_error_pct": round(100 * (measured_ms - simulated_ms) / simulated_ms, 2),
            "mean_abs_start_error_ms": round(statistics.fmean(abs(e) for e in errors), 2),
            "max_abs_start_error_ms": round(max(abs(e) for e in errors), 2),
            "steps": args.repeats, "torch": run.torch_version,
        })

    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "measure_torch.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with (args.out / "measure_torch_ops.csv").open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(op_rows[0]))
        writer.writeheader()
        writer.writerows(op_rows)
    with (args.out / "measure_torch_profile.csv").open("w", newline="", encoding="utf-8") as file:
        file.write("stage,forward,backward,backward_weight\n")
        for s in range(problem.num_model_stages):
            means = [statistics.fmean(per_stage[(s, kind.value)]) / args.unit_ms
                     for kind in (OpKind.F, OpKind.B, OpKind.W)]
            file.write(f"{s}," + ",".join(f"{m:.4f}" for m in means) + "\n")

    print(f"torch {torch.__version__}, {problem.num_devices} ranks (gloo, CPU), {problem.num_microbatches} "
          f"microbatches, 1 unit = {args.unit_ms:g} ms, median of {args.repeats} steps")
    for row in rows:
        print(f"{row['schedule']:>8}: simulated {row['simulated_step_ms']:8.1f} ms, measured "
              f"{row['measured_step_ms']:8.1f} ms, step error {row['step_error_pct']:+.1f} %, op start error "
              f"mean {row['mean_abs_start_error_ms']:.1f} ms, max {row['max_abs_start_error_ms']:.1f} ms")
    shown = args.out.resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    print(f"wrote {shown}/measure_torch.csv, measure_torch_ops.csv, measure_torch_profile.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
