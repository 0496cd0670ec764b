"""The optimizer beside the published schedules built for tight memory, each at that schedule's own peak memory.

Cases (8 devices, 2 chunks per device, F = B = W = 1 per chunk, no comm, 1 activation per chunk):

- loop placement, N = 16 and 32, budget = the peak of ``interleaved-zb`` (PyTorch's
  ``ScheduleInterleavedZeroBubble``): 16 chunk-activations;
- V placement, N = 16, budget = the peak of ``v-min``, then of ``v-half``;
- V placement, N = 16, budget 8 chunk-activations: the peak of the Zero Bubble authors' own V-Min implementation,
  whose makespan there is 123 (their published figure; pipeplan's ``v-min`` is a re-implementation with a lower
  peak).

For each: the named schedule's makespan and peak, and the optimizer's makespan, status and bound within that
budget. The optimizer must never be slower than the schedule whose peak sets the budget. Writes
results/wall_examples.csv.

    python scripts/wall_examples.py [--time-limit 20] [--workers 2] [--out results]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from pipeplan import Problem, compute_metrics, generate, simulate, solve

ROOT = Path(__file__).resolve().parent.parent


def cases() -> list[tuple[str, Problem, str]]:
    """(label, problem without a budget, the named schedule whose peak is the budget)."""
    found = []
    for n in (16, 32):
        loop = Problem.build(8, n, num_chunks=2, placement="loop", forward=2, backward=2, backward_weight=2,
                             activation=2)
        found.append((f"loop N={n}", loop, "interleaved-zb"))
    v = Problem.build(8, 16, num_chunks=2, placement="v", forward=2, backward=2, backward_weight=2, activation=2)
    found.extend([("V N=16", v, "v-min"), ("V N=16", v, "v-half")])
    return found


# (label, problem with its budget, reference name, reference makespan): published figures, not generated here.
PUBLISHED = [
    ("V N=16", Problem.build(8, 16, num_chunks=2, placement="v", forward=2, backward=2, backward_weight=2,
                             activation=2, budget=8), "authors' V-Min", 123.0),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    rows = []
    for label, problem, name in cases():
        named = compute_metrics(simulate(problem, generate(name, problem)))
        at_peak = problem.with_budget(named.peak_memory)
        result = solve(at_peak, time_limit_s=args.time_limit, num_workers=args.workers)
        row = {"case": label, "schedule": name, "schedule_makespan": named.makespan,
               "budget_chunk_activations": named.peak_memory, "optimal_makespan": round(result.objective, 6),
               "status": result.status, "lower_bound": round(result.lower_bound, 6), "source": result.source,
               "never_slower": result.objective <= named.makespan + 1e-9}
        rows.append(row)
        print(f"{label}: {name} {named.makespan:g} at peak {named.peak_memory:g}; optimizer {result.objective:g} "
              f"{result.status} (bound {result.lower_bound:g}, from {result.source})", flush=True)
    for label, problem, name, makespan in PUBLISHED:
        assert problem.budget is not None
        result = solve(problem, time_limit_s=args.time_limit, num_workers=args.workers)
        rows.append({"case": label, "schedule": name, "schedule_makespan": makespan,
                     "budget_chunk_activations": problem.budget[0], "optimal_makespan": round(result.objective, 6),
                     "status": result.status, "lower_bound": round(result.lower_bound, 6), "source": result.source,
                     "never_slower": result.objective <= makespan + 1e-9})
        print(f"{label}: {name} {makespan:g} (published) at peak {problem.budget[0]:g}; optimizer "
              f"{result.objective:g} {result.status} (bound {result.lower_bound:g}, from {result.source})", flush=True)
    out = Path(args.out) / "wall_examples.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
