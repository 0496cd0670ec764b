"""Predicted against published step times and peak memory per GPU of real training runs.

Writes results/sizing_validation.csv (step time) and results/sizing_memory_validation.csv (peak memory per GPU).

Usage: python scripts/validate_sizing.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeplan.sizing.validation import memory_validation_rows, validation_rows

RESULTS = Path(__file__).resolve().parent.parent / "results"
STEP_OUT = RESULTS / "sizing_validation.csv"
MEMORY_OUT = RESULTS / "sizing_memory_validation.csv"


def _summary(frame: pd.DataFrame) -> None:
    for role in ("calibration", "check"):
        part = frame[frame["role"] == role]
        print(f"{role}: mean absolute error {100 * part['error'].abs().mean():.1f} % over {len(part)} runs"
              f" (largest {100 * part['error'].abs().max():.1f} %)")


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    steps = pd.DataFrame(validation_rows())
    steps.to_csv(STEP_OUT, index=False, float_format="%.4g")
    shown = steps.assign(error=(100 * steps["error"]).round(1))
    print("step time")
    print(shown[["run", "role", "gpu", "trainer", "predicted_step_s", "published_step_s", "error", "predicted_mfu",
                 "predicted_memory_gib", "fits"]].to_string(index=False))
    _summary(steps)
    checks = steps[steps["role"] == "check"]
    for (gpu, trainer), part in checks.groupby(["gpu", "trainer"], sort=False):
        print(f"  check on {gpu}, {trainer}: mean absolute error {100 * part['error'].abs().mean():.1f} % over "
              f"{len(part)} runs")
    print(f"wrote {STEP_OUT}\n")

    memory = pd.DataFrame(memory_validation_rows())
    memory.to_csv(MEMORY_OUT, index=False, float_format="%.4g")
    shown = memory.assign(error=(100 * memory["error"]).round(1),
                          table=memory["source"].str.rsplit("; ", n=1).str[-1])
    print("peak memory per GPU (GiB)")
    print(shown[["run", "table", "role", "schedule", "predicted_memory_gib", "published_memory_gib", "error",
                 "predicted_static_gib", "predicted_activation_gib"]].to_string(index=False, float_format="%.1f"))
    _summary(memory)
    print(f"wrote {MEMORY_OUT}")


if __name__ == "__main__":
    main()
