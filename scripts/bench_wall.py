"""The memory wall: the optimizer where the activation budget binds, beside every named schedule.

On the split-backward family (F:B:W = 1 : 1 : 0.5, comm 0.03, activation 1, weight_activation 0.35 per device)
with P in {8, 16, 32} and N in {2P, 4P}, for 1 chunk per device, 2 chunks in loop placement and 2 chunks in V
placement, at four budgets from 1 activation (the least that admits any schedule: one microbatch on all of a
device's chunks) up to P activations (1F1B's peak), evenly spaced and rounded to whole activations. Each row
gives the best named schedule that fits (registered generators, replayed), the optimizer's value, its proven
lower bound and the gap. Objective: makespan.

Writes results/bench_wall.csv after every row and prints the table and the goals at the end; progress per row
goes to stderr. The time limit bounds each solve (warm starts included); timings depend on what else runs.

    python scripts/bench_wall.py [--time-limit 60] [--workers 2] [--max-p 32] [--p 8 16 32] [--n-factors 2 4]
                                 [--rows P:N:LAYOUT:BUDGET ...] [--out results]

``--rows`` runs only the rows given, each as P:N:LAYOUT:BUDGET with LAYOUT one of 1 (one chunk), loop or v (two
chunks) and BUDGET whole activations, e.g. ``--rows 8:16:v:3 8:32:1:6`` (rows outside the table too).
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_solver import family_problem, named_values

from pipeplan import Problem
from pipeplan.problem import ConfigError
from pipeplan.solver import solve

ROOT = Path(__file__).resolve().parent.parent
EPS = 1e-6
# layout name -> (num_chunks, placement)
LAYOUTS = {"1 chunk": (1, "loop"), "2 loop": (2, "loop"), "2 v": (2, "v")}
# --rows' layout names -> table layout names
ROW_LAYOUTS = {"1": "1 chunk", "loop": "2 loop", "v": "2 v"}
COLUMNS = ("P", "N", "layout", "budget", "best_named", "best_named_value", "optimizer_value", "lower_bound", "gap",
           "status", "source", "solve_time_s", "strictly_better_than_named", "bound_allows_better",
           "time_limit_s", "num_workers")


def budgets(p: int) -> list[int]:
    """Four budgets from 1 activation to P, evenly spaced, rounded to whole activations."""
    return sorted({round(1 + k * (p - 1) / 3) for k in range(4)})


def case(p: int, n: int, layout: str, budget: float) -> tuple[str, Problem]:
    """One row's (layout name, problem): the family at P = ``p``, N = ``n`` and ``budget`` activations."""
    num_chunks, placement = LAYOUTS[layout]
    problem = family_problem(p, n, budget)
    if num_chunks > 1:
        problem = problem.with_layout(num_chunks, placement)
    return layout, problem


def cases(ps: list[int], max_p: int, n_factors: list[int]) -> Iterator[tuple[str, Problem]]:
    """Every row's (layout name, problem), in table order."""
    for p in ps:
        if p > max_p:
            continue
        for factor in n_factors:
            for layout in LAYOUTS:
                for budget in budgets(p):
                    yield case(p, factor * p, layout, budget)


def row_spec(text: str) -> tuple[str, Problem]:
    """A --rows entry, P:N:LAYOUT:BUDGET, as its (layout name, problem)."""
    parts = text.split(":")
    usage = f"row {text!r}: expected P:N:LAYOUT:BUDGET, LAYOUT one of {', '.join(ROW_LAYOUTS)} (e.g. 8:16:v:3)"
    if len(parts) != 4 or parts[2] not in ROW_LAYOUTS:
        raise argparse.ArgumentTypeError(usage)
    try:
        p, n, budget = int(parts[0]), int(parts[1]), int(parts[3])
    except ValueError:
        raise argparse.ArgumentTypeError(usage) from None
    if min(p, n, budget) < 1:
        raise argparse.ArgumentTypeError(f"row {text!r}: P, N and the budget must be at least 1")
    try:
        return case(p, n, ROW_LAYOUTS[parts[2]], budget)
    except ConfigError as exc:  # e.g. too many ops to model
        raise argparse.ArgumentTypeError(f"row {text!r}: {exc}") from None


def run_case(layout: str, problem: Problem, time_limit_s: float, num_workers: int) -> dict[str, Any]:
    named = named_values(problem, "makespan")
    best_named = min(named, key=lambda name: named[name]) if named else ""
    best_named_value = named[best_named] if named else float("inf")
    result = solve(problem, objective="makespan", time_limit_s=time_limit_s, num_workers=num_workers,
                   random_seed=0)
    budget = problem.budget
    assert budget is not None
    return {
        "P": problem.num_devices,
        "N": problem.num_microbatches,
        "layout": layout,
        "budget": f"{max(budget):g}",
        "best_named": best_named or "-",
        "best_named_value": f"{best_named_value:.4f}",
        "optimizer_value": f"{result.objective:.4f}",
        "lower_bound": f"{result.lower_bound:.4f}",
        "gap": f"{result.gap:.4f}",
        "status": result.status,
        "source": result.source,
        "solve_time_s": f"{result.solve_time_s:.1f}",
        "strictly_better_than_named": result.objective < best_named_value - EPS,
        "bound_allows_better": result.lower_bound < best_named_value - EPS,
        "time_limit_s": f"{time_limit_s:g}",
        "num_workers": num_workers,
    }


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table."""
    shown = ("P", "N", "layout", "budget", "best_named", "best_named_value", "optimizer_value", "lower_bound",
             "gap", "source", "solve_time_s")
    cells = [list(shown)] + [[str(row[c]) for c in shown] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(shown))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in cells)


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """The benchmark's goals, each with whether these rows meet it."""

    def line(goal: str, relevant: list[dict[str, Any]], ok: Any) -> str:
        if not relevant:
            return f"{goal}: not run"
        missed = [f"P={r['P']} N={r['N']} {r['layout']} budget={r['budget']}" for r in relevant if not ok(r)]
        verdict = "met" if not missed else f"MISSED on {len(missed)} of {len(relevant)}: " + "; ".join(missed)
        return f"{goal}: {verdict}" + ("" if missed else f" ({len(relevant)} rows)")

    return [
        line("gap <= 3 % for P <= 16", [r for r in rows if r["P"] <= 16], lambda r: float(r["gap"]) <= 0.03 + EPS),
        line("gap <= 5 % for P = 32", [r for r in rows if r["P"] == 32], lambda r: float(r["gap"]) <= 0.05 + EPS),
        line("never behind a named schedule", rows,
             lambda r: float(r["optimizer_value"]) <= float(r["best_named_value"]) + EPS),
        line("strictly better than every named schedule wherever the bound allows",
             [r for r in rows if r["bound_allows_better"]], lambda r: r["strictly_better_than_named"]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=60.0, help="limit per solve, seconds")
    parser.add_argument("--workers", type=int, default=2, help="CP-SAT workers")
    parser.add_argument("--max-p", type=int, default=32, help="skip rows with more devices")
    parser.add_argument("--p", type=int, nargs="+", default=[8, 16, 32], help="pipeline depths to run")
    parser.add_argument("--n-factors", type=int, nargs="+", default=[2, 4], help="N as multiples of P")
    parser.add_argument("--rows", type=row_spec, nargs="+", metavar="P:N:LAYOUT:BUDGET",
                        help="run only these rows (LAYOUT: 1, loop or v); --p, --max-p and --n-factors are ignored")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for bench_wall.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    todo = args.rows or list(cases(args.p, args.max_p, args.n_factors))
    path = Path(args.out) / "bench_wall.csv"
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    for i, (layout, problem) in enumerate(todo, 1):
        row = run_case(layout, problem, args.time_limit, args.workers)
        rows.append(row)
        write_csv(path, rows)
        print(f"[{i}/{len(todo)} {time.monotonic() - started:7.1f} s] P={row['P']} N={row['N']} {layout} "
              f"budget={row['budget']}: {row['optimizer_value']} (bound {row['lower_bound']}, gap "
              f"{float(row['gap']):.2%}, {row['solve_time_s']} s); best named {row['best_named']} "
              f"{row['best_named_value']}", file=sys.stderr, flush=True)
    print(table(rows))
    print()
    for text in goals(rows):
        print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
