"""Sizing speed: one estimate of a 405B model (16 pipeline stages, 128 microbatches, a named schedule) and a
sweep of at least 500 configurations with named schedules only.

Writes results/bench_sizing.csv (also printed): wall-clock seconds (best of --repeat for the estimate) and
CPU seconds, since a shared machine's wall clock also counts other processes. Goals: the estimate under 50 ms,
the sweep under a minute on a 2-core machine (it replays in 2 worker processes).

    python scripts/bench_sizing.py [--repeat 5] [--out results]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import time
from pathlib import Path
from typing import Any

from pipeplan.sizing import estimate, sweep

ROOT = Path(__file__).resolve().parent.parent

# 405B on 1024 H100s: TP 8, PP 16, DP 8; 1024 sequences of 8192 tokens in microbatches of 1 -> 128 per pipeline.
ESTIMATE: dict[str, Any] = {
    "model": "llama3.1-405b", "hardware": "h100-80gb", "tensor_parallel": 8, "pipeline_parallel": 16,
    "data_parallel": 8, "microbatch_size": 1, "global_batch_size": 1024, "seq_len": 8192, "recompute": "full",
    "balanced": True,
}
# Llama 3.1 70B on 64 to 1024 H100s: every parallel layout, microbatch size, chunk count and recompute mode.
SWEEP: dict[str, Any] = {
    "model": "llama3.1-70b", "hardware": "h100-80gb", "num_gpus": [64, 128, 256, 512, 1024],
    "global_batch_size": 1024, "seq_len": 8192, "tensor_parallel": [1, 2, 4, 8],
    "pipeline_parallel": [1, 2, 4, 5, 8, 10, 16], "microbatch_size": [1, 2], "num_chunks": [1, 2],
    "recompute": ["selective", "full"], "schedules": ["1f1b", "zb-h1", "interleaved-1f1b", "zb-v"],
    "processes": 2,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs of the single estimate; the best is kept")
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="folder for bench_sizing.csv")
    args = parser.parse_args()

    for schedule in ("1f1b", "zb-h1"):
        estimate(**ESTIMATE, schedule=schedule)  # warm caches (presets, imports)
    rows = []
    for schedule in ("1f1b", "zb-h1"):
        best = cpu = float("inf")
        for _ in range(args.repeat):
            started, started_cpu = time.perf_counter(), time.process_time()
            result = estimate(**ESTIMATE, schedule=schedule)
            best = min(best, time.perf_counter() - started)
            cpu = min(cpu, time.process_time() - started_cpu)
        ops = result["problem"].num_model_stages * result["num_microbatches"] * len(result["problem"].kinds)
        rows.append({"benchmark": f"estimate 405B, 16 stages, 128 microbatches, {schedule}", "configurations": 1,
                     "rows": 1, "ops": ops, "seconds": round(best, 4), "cpu_seconds": round(cpu, 4),
                     "goal_seconds": 0.05})
    started, started_cpu = time.perf_counter(), time.process_time()
    frame = sweep(**SWEEP)
    elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - started_cpu
    ran = frame[frame["skipped"].isna()]
    configurations = len(ran.drop_duplicates(["num_gpus", "tensor_parallel", "pipeline_parallel", "microbatch_size",
                                              "num_chunks", "recompute"]))
    rows.append({"benchmark": "sweep 70B on 64-1024 GPUs, named schedules", "configurations": configurations,
                 "rows": len(ran), "ops": "", "seconds": round(elapsed, 2),
                 "cpu_seconds": f"{elapsed_cpu:.2f} (main process)", "goal_seconds": 60})

    buffer = io.StringIO()
    columns = ["benchmark", "configurations", "rows", "ops", "seconds", "cpu_seconds", "goal_seconds", "cpus",
               "python"]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "cpus": os.cpu_count(), "python": platform.python_version()})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_sizing.csv").write_text(buffer.getvalue(), encoding="utf-8")
    print(buffer.getvalue(), end="")


if __name__ == "__main__":
    main()
