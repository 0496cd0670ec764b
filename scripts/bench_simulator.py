"""Simulator speed: a 64-stage, 1024-microbatch 1F1B with a split backward (196,608 ops).

Times schedule generation, the replay and the metrics separately, best of 3 runs each, and writes
results/bench_simulator.csv (also printed). The goal is a replay under 2 s on a 2-core machine.

    python scripts/bench_simulator.py [--repeat 3] [--out results]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pipeplan import Problem, compute_metrics, generate, simulate

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def best_of(repeat: int, step: Callable[[], T]) -> tuple[float, T]:
    """The fastest of ``repeat`` runs of ``step``, in seconds, and the last run's result."""
    best = float("inf")
    result: T | None = None
    for _ in range(repeat):
        began = time.perf_counter()
        result = step()
        best = min(best, time.perf_counter() - began)
    assert result is not None
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per step; the fastest counts")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for bench_simulator.csv")
    args = parser.parse_args(argv)

    problem = Problem.build(num_stages=64, num_microbatches=1024, forward=1.0, backward=1.0, backward_weight=0.5,
                      comm=0.03, activation=1.0, weight_activation=0.35)
    generate_s, schedule = best_of(args.repeat, lambda: generate("1f1b", problem))
    simulate_s, timeline = best_of(args.repeat, lambda: simulate(problem, schedule))
    metrics_s, metrics = best_of(args.repeat, lambda: compute_metrics(timeline))

    row = {
        "schedule": schedule.name,
        "num_stages": problem.num_devices,
        "num_microbatches": problem.num_microbatches,
        "ops": schedule.num_ops,
        "generate_s": f"{generate_s:.3f}",
        "simulate_s": f"{simulate_s:.3f}",
        "metrics_s": f"{metrics_s:.3f}",
        "simulate_ops_per_s": f"{schedule.num_ops / simulate_s:.0f}",
        "makespan": f"{metrics.makespan:.2f}",
        "peak_memory": f"{metrics.peak_memory:g}",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeat": args.repeat,
    }
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(row), lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_simulator.csv").write_text(text.getvalue(), encoding="utf-8")
    print(text.getvalue(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
