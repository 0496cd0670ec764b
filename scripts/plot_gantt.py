"""Gantt charts of GPipe and 1F1B on 4 stages and 8 microbatches, with activation memory per device.

Without a budget, GPipe runs one flush and holds all 8 activations on the first stage; 1F1B holds 4 (P - r on
rank r). Writes results/gantt_4x8.html (and .png when static export works) and prints the peaks.

    python scripts/plot_gantt.py [--out results] [--no-png]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeplan import Problem, compute_metrics, generate, simulate
from pipeplan.report.figures import compare, save

ROOT = Path(__file__).resolve().parent.parent
LABELS = {"gpipe": "GPipe", "1f1b": "1F1B"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for the figure")
    parser.add_argument("--no-png", action="store_true", help="write the figure as HTML only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    # The seed's costs (F 1, B 2) on a pipeline small enough to read every op.
    problem = Problem.build(num_stages=4, num_microbatches=8, forward=1.0, backward=2.0)
    timelines = [simulate(problem, generate(name, problem)) for name in LABELS]
    titles = []
    for name, timeline in zip(LABELS, timelines):
        metrics = compute_metrics(timeline)
        peaks = " ".join(f"{p:g}" for p in metrics.peak_memory_per_device)
        first = metrics.peak_memory_per_device[0]
        print(f"{LABELS[name]}: peak activations per device {peaks} (first stage {first:g}), "
              f"makespan {metrics.makespan:.1f}, bubble {100 * metrics.bubble:.1f} %")
        titles.append(f"{LABELS[name]}: first stage holds {first:g} activations, makespan {metrics.makespan:g}")
    figure = compare(timelines, titles, title="GPipe vs 1F1B, 4 stages, 8 microbatches, F = 1, B = 2, no budget")
    for path in save(figure, Path(args.out) / "gantt_4x8", png=not args.no_png, self_contained=False):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
