"""Sweep speed on executors: a sweep of at least 200 configurations, every one solved by the optimizer with a
short time limit, on the local executor with 1 and 2 processes and on a local Ray cluster of 2 CPUs; then the
same sweep again entirely from the result store.

Writes results/bench_sweeps.csv (also printed): wall-clock seconds of each run, its speed-up over 1 process,
and how many rows came from the store. The machine may be shared: the load average before each run is in the
CSV, and speed-ups on 2 cores are at most 2. Goal: the re-run from the store under 2 s.

    python scripts/bench_sweeps.py [--time-limit 0.2] [--out results] [--no-ray]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeplan.executors.local import LocalExecutor
from pipeplan.sizing.sweep import sweep_with_stats
from pipeplan.store import Store

ROOT = Path(__file__).resolve().parent.parent

# A small model (8 layers) on 16 to 64 H100s: 216 layouts, microbatch sizes, chunk counts and recompute modes
# (all of them run), each solved by CP-SAT (one worker, fixed seed).
TINY = {"num_layers": 8, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8, "num_kv_heads": 4,
        "vocab_size": 1000, "gated_mlp": True}
SWEEP: dict[str, Any] = {
    "model": TINY, "hardware": "h100-80gb", "num_gpus": [16, 32, 64], "global_batch_size": 64, "seq_len": 128,
    "tensor_parallel": [1, 2, 4], "pipeline_parallel": [2, 4], "microbatch_size": [1, 2], "num_chunks": [1, 2],
    "recompute": ["none", "selective", "full"], "schedules": ["optimal"], "num_workers": 1, "random_seed": 0,
}


def _timed(**kwargs: Any) -> tuple[float, Any, Any]:
    started = time.perf_counter()
    frame, stats = sweep_with_stats(**SWEEP, **kwargs)
    return time.perf_counter() - started, frame, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=0.2, help="optimizer seconds per configuration")
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="folder for bench_sweeps.csv")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    args = parser.parse_args()
    limit = {"time_limit_s": args.time_limit}

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        store_path = Path(folder) / "store.sqlite"
        runs: list[tuple[str, str, int, Any]] = [("local", "1 process", 1, None), ("local", "2 processes", 2, None)]
        if not args.no_ray:
            runs.append(("ray", "local cluster, 2 CPUs", 2, "ray"))
        baseline = None
        for executor_name, detail, jobs, kind in runs:
            load = os.getloadavg()[0]
            if kind == "ray":
                from pipeplan.executors.ray import RayExecutor

                started = time.perf_counter()
                with RayExecutor("local", num_cpus=jobs) as ray_executor:
                    startup = time.perf_counter() - started
                    seconds, frame, stats = _timed(**limit, executor=ray_executor)
                note = f"plus {startup:.1f} s to start Ray"
            else:
                with LocalExecutor(jobs) as executor, Store(store_path) as store:
                    # The 1-process run fills the store (its writes are in the time); the others only run.
                    seconds, frame, stats = _timed(**limit, executor=executor,
                                                   store=store if jobs == 1 else None)
                note = "writes the store" if jobs == 1 else ""
            baseline = baseline or seconds
            rows.append({"run": f"{executor_name}, {detail}", "configurations": stats.total, "ran": stats.ran,
                         "reused": stats.reused, "failed": len(stats.failures), "seconds": round(seconds, 2),
                         "speedup": round(baseline / seconds, 2), "load_before": round(load, 1), "note": note})
        with Store(store_path) as store:
            load = os.getloadavg()[0]
            seconds, frame, stats = _timed(**limit, store=store)
        rows.append({"run": "re-run from the store", "configurations": stats.total, "ran": stats.ran,
                     "reused": stats.reused, "failed": len(stats.failures), "seconds": round(seconds, 3),
                     "speedup": round(baseline / seconds, 1) if baseline else "", "load_before": round(load, 1),
                     "note": "goal under 2 s"})

    buffer = io.StringIO()
    columns = ["run", "configurations", "ran", "reused", "failed", "seconds", "speedup", "load_before", "note",
               "time_limit_s", "cpus", "python"]
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "time_limit_s": args.time_limit, "cpus": os.cpu_count(),
                         "python": platform.python_version()})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_sweeps.csv").write_text(buffer.getvalue(), encoding="utf-8")
    print(buffer.getvalue(), end="")


if __name__ == "__main__":
    main()
