"""Solver benchmark: the CP-SAT optimum beside every named schedule, with its proven bound.

Rows:

- seed: models/seed-8x64.yaml (goal: proven optimal at 213 in under 5 s);
- family: split backward, P in {4, 8, 16}, N in {P, 2P, 4P, 8P}, F:B:W = 1 : 1 : 0.5, comm 0.03 (3 % of F),
  activation 1, weight_activation 0.35, budgets P and 2P activations, objectives makespan and stage span;
- hetero: the family's P=8, N=32 with the first stage +10 % on F (embedding) and the last +40 % on F and
  +30 % on B (LM head and loss), budgets P and 2P, both objectives.

Each row gives the best named schedule (registered generators, replayed, within the budget), the best warm
start (named or greedy), the optimizer's value, lower bound, gap, status and time, and whether the optimizer is
strictly better than every named schedule. Writes results/solver_bench.csv after every row, prints the table
and the benchmark's goals at the end, and reports progress per row on stderr. Timings depend on what else runs.

    python scripts/bench_solver.py [--time-limit 60] [--workers N] [--max-p 16] [--quick] [--out results]
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeplan import Problem, compute_metrics, load_config, simulate
from pipeplan.schedules import generate_applicable
from pipeplan.solver import OPTIMAL, objective_of, solve

ROOT = Path(__file__).resolve().parent.parent
OBJECTIVES = ("makespan", "stage_span")
EPS = 1e-9

COLUMNS = (
    "case", "P", "N", "budget", "objective", "best_named", "best_named_value", "best_heuristic",
    "best_heuristic_value", "optimizer_value", "lower_bound", "gap", "status", "solve_time_s", "source",
    "strictly_better_than_named", "bound_allows_better", "time_limit_s", "num_workers",
)


@dataclass(frozen=True)
class Case:
    """One benchmark row to run: a name, the problem and the objective."""

    name: str
    problem: Problem
    objective: str


def family_problem(p: int, n: int, budget: float, forward: float | list[float] = 1.0,
                   backward: float | list[float] = 1.0) -> Problem:
    """The split-backward family: F:B:W = 1 : 1 : 0.5, comm 3 % of F, weight_activation 0.35 of activation."""
    return Problem.build(num_stages=p, num_microbatches=n, forward=forward, backward=backward, backward_weight=0.5,
                   comm=0.03, activation=1.0, weight_activation=0.35, budget=budget)


def hetero_problem(p: int, n: int, budget: float) -> Problem:
    """The family with the embedding on the first stage (+10 % F) and head and loss on the last (+40 % F, +30 % B)."""
    forward = [1.0] * p
    backward = [1.0] * p
    forward[0] *= 1.1
    forward[-1] *= 1.4
    backward[-1] *= 1.3
    return family_problem(p, n, budget, forward=forward, backward=backward)


def cases(max_p: int, quick: bool) -> Iterator[Case]:
    """Every row, in table order. ``quick`` keeps N in {P, 2P} and drops the heterogeneous case."""
    seed = load_config(ROOT / "models" / "seed-8x64.yaml")
    yield Case("seed", seed.problem, seed.solver.objective)
    for p in (4, 8, 16):
        if p > max_p:
            continue
        for n in (p, 2 * p) if quick else (p, 2 * p, 4 * p, 8 * p):
            for budget in (p, 2 * p):
                for objective in OBJECTIVES:
                    yield Case("family", family_problem(p, n, budget), objective)
    if not quick and max_p >= 8:
        for budget in (8, 16):
            for objective in OBJECTIVES:
                yield Case("hetero", hetero_problem(8, 32, budget), objective)


def named_values(problem: Problem, objective: str) -> dict[str, float]:
    """The objective of every registered schedule that applies and fits the budget, keyed by name."""
    values = {}
    for schedule in generate_applicable(problem)[0]:
        metrics = compute_metrics(simulate(problem, schedule))
        if metrics.feasible:
            values[schedule.name] = objective_of(metrics, objective)
    return values


def run_case(case: Case, time_limit_s: float, num_workers: int | None) -> dict[str, Any]:
    """Solve one row and compare it with the named schedules."""
    problem = case.problem
    named = named_values(problem, case.objective)
    best_named = min(named, key=lambda name: named[name]) if named else ""
    best_named_value = named[best_named] if named else float("inf")
    result = solve(problem, objective=case.objective, time_limit_s=time_limit_s, num_workers=num_workers,
                   random_seed=0)
    budget = problem.budget
    return {
        "case": case.name,
        "P": problem.num_devices,
        "N": problem.num_microbatches,
        "budget": "" if budget is None else f"{max(budget):g}",
        "objective": case.objective,
        "best_named": best_named,
        "best_named_value": f"{best_named_value:.4f}",
        "best_heuristic": result.best_heuristic,
        "best_heuristic_value": f"{result.best_heuristic_objective:.4f}",
        "optimizer_value": f"{result.objective:.4f}",
        "lower_bound": f"{result.lower_bound:.4f}",
        "gap": f"{result.gap:.6f}",
        "status": result.status,
        "solve_time_s": f"{result.solve_time_s:.2f}",
        "source": result.source,
        "strictly_better_than_named": result.objective < best_named_value - 1e-6,
        "bound_allows_better": result.lower_bound < best_named_value - 1e-6,
        "time_limit_s": f"{time_limit_s:g}",
        "num_workers": num_workers or os.cpu_count(),
    }


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table (a subset of the CSV's columns)."""
    shown = ("case", "P", "N", "budget", "objective", "best_named", "best_named_value", "best_heuristic_value",
             "optimizer_value", "lower_bound", "gap", "status", "solve_time_s", "strictly_better_than_named")
    cells = [list(shown)] + [[str(row[c]) for c in shown] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in cells)


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """The benchmark's goals, each with whether these rows meet it (and which rows miss it)."""

    def label(row: dict[str, Any]) -> str:
        return f"{row['case']} P={row['P']} N={row['N']} budget={row['budget']} {row['objective']}"

    def line(goal: str, relevant: list[dict[str, Any]], ok: Any) -> str:
        if not relevant:
            return f"{goal}: not run"
        missed = [label(r) for r in relevant if not ok(r)]
        verdict = "met" if not missed else f"MISSED on {len(missed)} of {len(relevant)}: " + "; ".join(missed)
        return f"{goal}: {verdict}" + ("" if missed else f" ({len(relevant)} rows)")

    family = [r for r in rows if r["case"] == "family"]
    return [
        line("seed proven optimal at 213 in < 5 s", [r for r in rows if r["case"] == "seed"],
             lambda r: r["status"] == OPTIMAL and abs(float(r["optimizer_value"]) - 213) < 1e-6
             and float(r["solve_time_s"]) < 5),
        line("proven optimal wherever P x N <= 128", [r for r in family if r["P"] * r["N"] <= 128],
             lambda r: r["status"] == OPTIMAL),
        line("gap <= 1 % up to P=8, N=64", [r for r in family if r["P"] <= 8 and r["N"] <= 64],
             lambda r: float(r["gap"]) <= 0.01 + EPS),
        line("strictly better than every named schedule wherever the bound allows",
             [r for r in rows if r["bound_allows_better"]], lambda r: r["strictly_better_than_named"]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT limit per solve, seconds")
    parser.add_argument("--workers", type=int, default=None, help="CP-SAT workers (default: all cores)")
    parser.add_argument("--max-p", type=int, default=16, help="skip family rows with more stages")
    parser.add_argument("--quick", action="store_true", help="N in {P, 2P} only, no heterogeneous case")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for solver_bench.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    todo = list(cases(args.max_p, args.quick))
    path = Path(args.out) / "solver_bench.csv"
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for i, case in enumerate(todo, 1):
        row = run_case(case, args.time_limit, args.workers)
        rows.append(row)
        write_csv(path, rows)
        print(f"[{i}/{len(todo)} {time.monotonic() - started:7.1f} s] {case.name} P={row['P']} N={row['N']} "
              f"budget={row['budget']} {row['objective']}: {row['optimizer_value']} {row['status']} "
              f"(bound {row['lower_bound']}, gap {float(row['gap']):.2%}, {row['solve_time_s']} s); "
              f"best named {row['best_named']} {row['best_named_value']}", file=sys.stderr, flush=True)
    print(table(rows))
    print()
    for text in goals(rows):
        print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
