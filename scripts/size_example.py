"""The cluster-sizing worked example: `pipeplan size models/size-llama3.1-70b.yaml`, kept in results/.

Runs the command exactly as a user would (its terminal output is printed), then keeps sweep.csv and best.yaml in
results/size-llama3.1-70b/ and, instead of report.html (5 MB with plotly.js embedded), report.png: a screenshot
of the page taken with headless Chromium (skipped with a warning when /usr/bin/chromium is missing).

    python scripts/size_example.py [--study models/size-llama3.1-70b.yaml] [--out results] [--no-png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from make_figures import screenshot

from pipeplan.cli import main as pipeplan_main

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", type=Path, default=ROOT / "models" / "size-llama3.1-70b.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "results", help="parent of the kept folder")
    parser.add_argument("--no-png", action="store_true", help="skip the screenshot of report.html")
    args = parser.parse_args()

    kept = args.out / f"size-{args.study.stem.removeprefix('size-')}"
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        code = pipeplan_main(["size", str(args.study), "--out", str(run), "--quiet"])
        if code != 0:
            sys.exit(code)
        kept.mkdir(parents=True, exist_ok=True)
        for name in ("sweep.csv", "best.yaml"):
            shutil.copyfile(run / name, kept / name)
        if not args.no_png:
            screenshot(run / "report.html", kept / "report.png", 3000)
    print(f"kept {kept}: {', '.join(sorted(p.name for p in kept.iterdir()))}")


if __name__ == "__main__":
    main()
