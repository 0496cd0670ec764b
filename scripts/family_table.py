"""Every named schedule beside the optimizer on the solver benchmark's split-backward family.

For P in {4, 8, 16}, N in {P, 2P, 4P, 8P} and budgets P and 2P activations, it replays gpipe, 1f1b, zb-h1 and
zb-h2 (one chunk per device), interleaved-1f1b (2 chunks, loop placement) and zb-v (2 chunks, V placement) on
the same model (a device's costs split evenly over its chunks), and sets the optimizer's makespan and stage span
beside them, read from results/solver_bench.csv (run scripts/bench_solver.py first). Writes
results/family_table.csv and prints a table: each cell is "makespan / stage span", with "(over)" when the
schedule exceeds the budget.

    python scripts/family_table.py [--out results]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from bench_solver import family_problem

from pipeplan import NotApplicable, compute_metrics, generate, simulate

ROOT = Path(__file__).resolve().parent.parent
# (schedule name, num_chunks, placement) in the order of the table's columns.
NAMED = (
    ("gpipe", 1, "loop"),
    ("1f1b", 1, "loop"),
    ("zb-h1", 1, "loop"),
    ("zb-h2", 1, "loop"),
    ("interleaved-1f1b", 2, "loop"),
    ("zb-v", 2, "v"),
)


def optimizer_values(bench: Path) -> dict[tuple[int, int, float, str], float]:
    """Optimizer value per (P, N, budget, objective) from the solver benchmark's family rows."""
    values = {}
    with bench.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row["case"] == "family":
                key = (int(row["P"]), int(row["N"]), float(row["budget"]), row["objective"])
                values[key] = float(row["optimizer_value"])
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    optimum = optimizer_values(args.out / "solver_bench.csv")
    rows = []
    for p in (4, 8, 16):
        for n in (p, 2 * p, 4 * p, 8 * p):
            for budget in (p, 2 * p):
                base = family_problem(p, n, budget)
                row: dict[str, object] = {"P": p, "N": n, "budget": budget}
                for name, chunks, placement in NAMED:
                    problem = base.with_layout(chunks, placement)
                    try:
                        m = compute_metrics(simulate(problem, generate(name, problem)))
                    except NotApplicable:
                        continue
                    row[f"{name}_makespan"] = round(m.makespan, 4)
                    row[f"{name}_stage_span"] = round(m.stage_span, 4)
                    row[f"{name}_feasible"] = m.feasible
                for objective in ("makespan", "stage_span"):
                    row[f"optimal_{objective}"] = optimum.get((p, n, float(budget), objective), "")
                rows.append(row)
    columns = ["P", "N", "budget"]
    for name, _, _ in NAMED:
        columns += [f"{name}_makespan", f"{name}_stage_span", f"{name}_feasible"]
    columns += ["optimal_makespan", "optimal_stage_span"]
    path = args.out / "family_table.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    header = ["P", "N", "budget", *(name for name, _, _ in NAMED), "optimal"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for row in rows:
        cells = [str(row["P"]), str(row["N"]), str(row["budget"])]
        for name, _, _ in NAMED:
            cell = f"{row[f'{name}_makespan']:g} / {row[f'{name}_stage_span']:g}"
            cells.append(cell if row[f"{name}_feasible"] else f"{cell} (over)")
        cells.append(f"{row['optimal_makespan']:g} / {row['optimal_stage_span']:g}")
        print(" | ".join(cells))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
