"""The optimizer over 2 chunks per device: how far interleaved 1F1B and ZB-V are from the optimum.

On the split-backward family (F:B:W = 1 : 1 : 0.5, comm 0.03, weight_activation 0.35) with P in {4, 8} and
N in {2P, 4P}, budgets P and 2P activations, it solves with 2 chunks per device in loop placement (beside
interleaved-1f1b) and in V placement (beside zb-v), for both objectives, and writes
results/solver_chunks_bench.csv.

    python scripts/bench_chunks.py [--time-limit 60] [--out results]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from bench_solver import family_problem

from pipeplan import NotApplicable, compute_metrics, generate, simulate
from pipeplan.solver import objective_of, solve

ROOT = Path(__file__).resolve().parent.parent
# placement -> the named schedule built for it.
NAMED = {"loop": "interleaved-1f1b", "v": "zb-v"}
COLUMNS = ("P", "N", "budget", "placement", "objective", "named", "named_value", "named_feasible",
           "optimizer_value", "lower_bound", "gap", "status", "source", "solve_time_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    path = args.out / "solver_chunks_bench.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for p in (4, 8):
            for n in (2 * p, 4 * p):
                for budget in (p, 2 * p):
                    for placement, name in NAMED.items():
                        problem = family_problem(p, n, budget).with_layout(2, placement)
                        try:
                            named = compute_metrics(simulate(problem, generate(name, problem)))
                        except NotApplicable:
                            continue
                        for objective in ("makespan", "stage_span"):
                            result = solve(problem, objective=objective, time_limit_s=args.time_limit)
                            row = {
                                "P": p, "N": n, "budget": budget, "placement": placement, "objective": objective,
                                "named": name, "named_value": round(objective_of(named, objective), 4),
                                "named_feasible": named.feasible, "optimizer_value": round(result.objective, 4),
                                "lower_bound": round(result.lower_bound, 4), "gap": round(result.gap, 6),
                                "status": result.status, "source": result.source,
                                "solve_time_s": round(result.solve_time_s, 2),
                            }
                            writer.writerow(row)
                            handle.flush()
                            print(", ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr, flush=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
