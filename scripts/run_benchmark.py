"""The seed benchmark: GPipe versus 1F1B at equal memory budget, and the planner's choice.

Loads a config (default models/seed-8x64.yaml), simulates GPipe (in as many flushes as the budget needs) and 1F1B,
asks the planner, prints the comparison, and writes results/seed_benchmark.csv and the before/after figure
results/seed_before_after.html (and .png when static export works).

    python scripts/run_benchmark.py [CONFIG] [--out results] [--no-png]
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
from pathlib import Path

from pipeplan import Metrics, Problem, compute_metrics, generate, load_config, plan, simulate
from pipeplan.report.figures import compare, save
from pipeplan.schedules.gpipe import gpipe_with_flush_size

ROOT = Path(__file__).resolve().parent.parent
LABELS = {"gpipe": "GPipe", "1f1b": "1F1B"}


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def summary(label: str, metrics: Metrics, memory_unit: str) -> str:
    """One line such as 'GPipe 8 flushes, peak 8 slots, makespan 360.0, bubble 46.7 %, utilization 53.3 %'."""
    flushes = f"{metrics.flushes} flush" + ("" if metrics.flushes == 1 else "es")
    return (f"{label} {flushes}, peak {metrics.peak_memory:g} {memory_unit}, makespan {metrics.makespan:.1f}, "
            f"bubble {pct(metrics.bubble)}, utilization {pct(metrics.utilization)}")


def plan_for(problem: Problem) -> dict[str, object]:
    """Call the planner's public API with the config's problem (one chunk per device)."""
    return plan(
        num_stages=problem.num_devices,
        total_microbatches=problem.num_microbatches,
        memory_budget=None if problem.budget is None else list(problem.budget),
        forward=list(problem.forward),
        backward=list(problem.backward),
        backward_weight=list(problem.backward_weight),
        comm=list(problem.comm),
        activation=list(problem.activation),
        weight_activation=list(problem.weight_activation),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", default=str(ROOT / "models" / "seed-8x64.yaml"))
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for the CSV and the figure")
    parser.add_argument("--no-png", action="store_true", help="write the figure as HTML only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    config = load_config(args.config)
    problem, units = config.problem, config.units
    timelines = {name: simulate(problem, generate(name, problem)) for name in ("gpipe", "1f1b")}
    metrics = {name: compute_metrics(timeline) for name, timeline in timelines.items()}
    result = plan_for(problem)
    chosen = result["chosen"]
    assert isinstance(chosen, dict)
    before = metrics["gpipe"]

    for name in ("gpipe", "1f1b"):
        print(summary(LABELS[name], metrics[name], units.memory))
    print(f"planner chose {chosen['schedule']}")
    budget_note = "at equal memory budget" if before.feasible and chosen["fits"] else "(budgets differ)"
    print(f"utilization {pct(before.utilization)} -> {pct(chosen['utilization'])}, "
          f"bubble {pct(before.bubble)} -> {pct(chosen['bubble'])}, "
          f"wall-clock speedup {before.makespan / chosen['makespan']:.2f}x {budget_note}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = out / "seed_benchmark.csv"
    fields = ["schedule", "flushes", "feasible", "makespan", "stage_span", "utilization", "bubble", "peak_memory"]
    with table.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["config", "role", *fields])
        writer.writeheader()
        for name in ("gpipe", "1f1b"):
            row = metrics[name].to_dict()
            writer.writerow({"config": config.name, "role": "simulated", **{f: row[f] for f in fields}})
        writer.writerow({"config": config.name, "role": "planner choice", **{f: chosen[f] for f in fields}})

    after_name = str(chosen["schedule"])
    if after_name == "gpipe":
        after_schedule = gpipe_with_flush_size(problem, int(chosen["microbatches_per_flush"]))
    else:
        after_schedule = generate(after_name, problem)
    after = simulate(problem, after_schedule)
    budget = "unlimited" if problem.budget is None else f"{max(problem.budget):g}"
    figure = compare(
        [timelines["gpipe"], after],
        [f"before: {summary('GPipe', before, units.memory)}",
         f"after (planner): {summary(LABELS.get(after_name, after_name), compute_metrics(after), units.memory)}"],
        title=f"{config.name}: GPipe vs the planner's choice at a budget of {budget} {units.memory} per device",
        time_unit=units.time,
        memory_unit=units.memory,
    )
    written = save(figure, out / "seed_before_after", png=not args.no_png,
                   self_contained=False)
    for path in [table, *written]:
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
