"""Predicted against published step times of real training runs: writes results/sizing_validation.csv.

Usage: python scripts/validate_sizing.py
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeplan.sizing.validation import validation_rows

OUT = Path(__file__).resolve().parent.parent / "results" / "sizing_validation.csv"


def main() -> None:
    frame = pd.DataFrame(validation_rows())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT, index=False, float_format="%.4g")
    shown = frame.assign(error=(100 * frame["error"]).round(1))
    print(shown[["run", "role", "gpu", "predicted_step_s", "published_step_s", "error", "predicted_mfu",
                 "predicted_memory_gib", "fits"]].to_string(index=False))
    for role in ("calibration", "check"):
        part = frame[frame["role"] == role]
        print(f"{role}: mean absolute error {100 * part['error'].abs().mean():.1f} % over {len(part)} runs")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
