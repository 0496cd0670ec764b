"""Style and types are part of the test command: ruff on the code, tests and scripts; mypy (strict) on the package
and the scripts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_ruff_is_clean() -> None:
    proc = _run_tool("ruff", "check", "pipeplan", "tests", "scripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_is_clean() -> None:
    proc = _run_tool("mypy", "pipeplan", "scripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
