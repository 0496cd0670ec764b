"""Run every example in README.md and compare its output with the output pasted there, so the README cannot drift.

Examples are found by their shape:

- a fenced block whose first line starts with ``$ ``: shell commands, each followed by the output it printed;
- a ```` ```python ```` or ```` ```bash ```` block followed by a line starting with ``prints`` and a fenced block:
  the code and what it printed.

All examples run in README order in one scratch copy of the repository (later examples may use what earlier
ones wrote, as a reader following the README would), with ``pipeplan`` and ``python`` of this interpreter.
Durations ("0.2 s", "in 56 s") are masked before comparing. A block preceded by the line
``<!-- readme-check: varies -->`` depends on a solver time limit or on the machine: only its words are compared
(every number masked). Slow examples (the figure, measurement and sizing scripts) run only with ``--all``.

    python scripts/readme_check.py [--all] [--only TEXT] [--update] [--readme README.md]

Exit status 0 when every example printed what the README shows, 1 otherwise (the differences are printed).
``--update`` writes the fresh outputs into the README instead (review the diff before committing it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIES = "<!-- readme-check: varies -->"
# Commands too slow for a routine check: they rerun every model, measure torch, or sweep a cluster.
SLOW = ("scripts/make_figures.py", "scripts/measure_torch.py", "scripts/bench_", "pipeplan size",
        "scripts/size_example.py", "scripts/validate_sizing.py")
DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|ms)\b(?= elapsed|[);,.]|$| \(| to | on | in )")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[+-]?\d+)?")


@dataclass
class Example:
    """One runnable example: where its expected output sits in the README (line indices, end exclusive)."""

    kind: str  # "shell" (commands with their output inline) or "code" (a program and a separate output block)
    code: str
    expected: str
    out_start: int
    out_end: int
    varies: bool

    @property
    def title(self) -> str:
        return self.code.strip().splitlines()[0][:100]


def find_examples(lines: list[str]) -> list[Example]:
    """Every example of the README, in order."""
    examples = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        varies = i > 0 and lines[i - 1].strip() == VARIES
        body = lines[i + 1:end]
        language = lines[i][3:].strip()
        if not language and body and body[0].startswith("$ "):
            examples.append(Example("shell", "\n".join(body), "\n".join(body), i + 1, end, varies))
        elif language in ("python", "bash"):
            k = end + 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k < len(lines) and lines[k].startswith("prints"):
                start = next(j for j in range(k + 1, len(lines)) if lines[j].startswith("```"))
                stop = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
                varies = varies or (start > 0 and lines[start - 1].strip() == VARIES)
                examples.append(Example(language, "\n".join(body), "\n".join(lines[start + 1:stop]),
                                        start + 1, stop, varies))
                end = stop
        i = end + 1
    return examples


def shell_commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def run(example: Example, scratch: Path, env: dict[str, str]) -> str:
    """The example's output as the README would show it."""
    if example.kind == "shell":
        shown = []
        for command in shell_commands(example.code):
            result = subprocess.run(["bash", "-c", command], cwd=scratch, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, timeout=1800)
            shown.append(f"$ {command}")
            shown.extend(result.stdout.rstrip("\n").splitlines())
        return "\n".join(shown)
    program = [sys.executable, "-c", example.code] if example.kind == "python" else ["bash", "-c", example.code]
    result = subprocess.run(program, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=1800)
    return result.stdout.rstrip("\n")


def normalised(text: str, varies: bool) -> list[str]:
    lines = [DURATION.sub("<time>", line.rstrip()) for line in text.splitlines()]
    if varies:
        lines = [NUMBER.sub("<n>", line) for line in lines]
        # What a time limit changes besides numbers: the status, the proof column and where the order came from.
        lines = [re.sub(r"\b(OPTIMAL|FEASIBLE)\b", "<status>", line) for line in lines]
        lines = [re.sub(r"gap <n> %", "optimal", line) for line in lines]
        lines = [re.sub(r"order from \S+", "order from <source>", line) for line in lines]
        lines = [re.sub(r"[─━┄╌]+", "-", line) for line in lines]  # table widths follow the numbers
        lines = [re.sub(r" +", " ", line) for line in lines]
    return lines


def scratch_copy() -> Path:
    """A copy of the repository without its git data, results folders written there are thrown away."""
    scratch = Path(tempfile.mkdtemp(prefix="readme-check-"))
    shutil.copytree(ROOT, scratch / "repo", ignore=shutil.ignore_patterns(".git", "__pycache__", ".mypy_cache",
                                                                          ".ruff_cache", ".pytest_cache", "out"))
    return scratch / "repo"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="also run the slow examples")
    parser.add_argument("--only", default=None, help="run only examples whose code contains TEXT")
    parser.add_argument("--update", action="store_true", help="write the fresh outputs into the README")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)

    lines = args.readme.read_text(encoding="utf-8").splitlines()
    examples = find_examples(lines)
    scratch = scratch_copy()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(scratch) + os.pathsep + env.get("PYTHONPATH", "")
    failures = 0
    replacements: list[tuple[int, int, list[str]]] = []
    try:
        for example in examples:
            slow = any(marker in example.code for marker in SLOW)
            if (slow and not args.all) or (args.only is not None and args.only not in example.code):
                print(f"skip  {example.title}")
                continue
            actual = run(example, scratch, env)
            same = normalised(actual, example.varies) == normalised(example.expected, example.varies)
            print(f"{'ok   ' if same else 'DIFF '} {example.title}", flush=True)
            if not same:
                failures += 1
                diff = difflib.unified_diff(example.expected.splitlines(), actual.splitlines(), "README", "actual",
                                            lineterm="")
                print("\n".join(diff))
                fresh = [line.rstrip() for line in actual.splitlines()]
                replacements.append((example.out_start, example.out_end, fresh))
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)
    if args.update and replacements:
        for start, end, new in sorted(replacements, reverse=True):
            lines[start:end] = new
        args.readme.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"updated {len(replacements)} example(s) in {args.readme}")
        return 0
    print(f"{len(examples)} examples, {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
