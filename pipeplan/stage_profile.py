"""Measured per-stage costs from a CSV file: the step from a profile to a plan.

A config may give its costs as ``costs: {profile: stages.csv}`` (resolved relative to the config file) instead
of ``forward``/``backward``/``backward_weight``. The file has a header and one row per stage, in stage order:

    stage,forward,backward,backward_weight
    0,1.21,1.10,0.92
    1,1.02,0.98,0.80

``backward_weight`` is optional (absent or 0 on every row: the backward is not split, ``backward`` is the full
backward). Times are in the config's time unit. There is one row per device (``pipeline.num_stages`` rows, each
device's whole share, split evenly over its chunks) or, with chunks, one row per model stage
(``num_stages * num_chunks`` rows), as for the list form of the cost keys.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from pipeplan.problem import ConfigError
from pipeplan.reading import SMALL_FILE_BYTES, read_text

COLUMNS = ("stage", "forward", "backward", "backward_weight")
COST_KEYS = ("forward", "backward", "backward_weight")


def parse_profile(text: str, source: str = "the profile") -> dict[str, list[float]]:
    """The per-stage costs of a profile CSV's text, keyed by cost name (``forward``, ``backward``, ...).

    Raises :class:`ConfigError` naming the file, the row and the column of the first bad cell.
    """
    reader = csv.reader(io.StringIO(text))
    rows = [row for row in reader if any(cell.strip() for cell in row)]
    if not rows:
        raise ConfigError(f"{source} is empty; give a header {','.join(COLUMNS)} and one row per stage")
    header = [cell.strip() for cell in rows[0]]
    required = COLUMNS[:3]
    missing = [c for c in required if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown or len(set(header)) != len(header):
        raise ConfigError(f"{source}: the header must be {','.join(COLUMNS)} (backward_weight optional), got "
                          f"{','.join(header)!r}")
    costs: dict[str, list[float]] = {key: [] for key in COST_KEYS if key in header}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ConfigError(f"{source} row {line}: {len(row)} cells, expected {len(header)} ({','.join(header)})")
        cells = dict(zip(header, (cell.strip() for cell in row)))
        if cells["stage"] != str(line - 2):
            raise ConfigError(f"{source} row {line}: stage {cells['stage']!r}, expected {line - 2}; give one row "
                              "per stage in order, from stage 0")
        for key in costs:
            try:
                value = float(cells[key])
            except ValueError:
                raise ConfigError(f"{source} row {line}, column {key}: {cells[key]!r} is not a number") from None
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{source} row {line}, column {key}: {cells[key]!r} must be a finite time >= 0")
            costs[key].append(value)
    if len(rows) == 1:
        raise ConfigError(f"{source} has a header but no stages; add one row per stage")
    return costs


def profile_costs(path: object, base: Path | None = None, given: tuple[str, ...] = (),
                  layout: tuple[object, object] | None = None) -> dict[str, list[float]]:
    """Read the profile at ``path`` (relative to ``base``, the config's folder) for a config's ``costs``.

    ``given`` are the cost keys the config also sets; any of forward/backward/backward_weight there is an error,
    since the profile replaces them (comm stays in the config). ``layout`` is the config's (num_stages,
    num_chunks), when known, to check the number of rows.
    """
    clash = [key for key in given if key in COST_KEYS]
    if clash:
        raise ConfigError(f"costs.profile replaces costs.{', costs.'.join(clash)}; give the profile or the "
                          "times, not both (costs.comm stays)")
    if not isinstance(path, (str, Path)) or not str(path):
        raise ConfigError(f"costs.profile must be the path of a CSV file, got {path!r}")
    file = Path(path)
    if not file.is_absolute() and base is not None:
        file = base / file
    text = read_text(file, "costs.profile", SMALL_FILE_BYTES, missing="the path is relative to the config file (to the "
                     "working folder for a config read from the standard input)")
    source = f"costs.profile {str(file)!r}"
    costs = parse_profile(text, source=source)
    if layout is not None and all(isinstance(x, int) and x >= 1 for x in layout):
        num_stages, num_chunks = (int(x) for x in layout)  # type: ignore[call-overload]
        rows = len(costs["forward"])
        accepted = {num_stages, num_stages * num_chunks}
        if rows not in accepted:
            per_stage = f" or {num_stages * num_chunks} (one per model stage)" if num_chunks > 1 else ""
            raise ConfigError(f"{source} has {rows} stage rows; the config needs {num_stages} (one per device)"
                              f"{per_stage}")
    return costs
