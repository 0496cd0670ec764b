"""PyTorch's compute-only schedule CSV: export a schedule to it, import one from it.

``torch.distributed.pipelining`` runs any per-rank order of compute actions from a CSV file
(``_PipelineScheduleRuntime._load_csv(path, format="compute_only")``; torchtitan reads the same file with
``--parallelism.pipeline_parallel_schedule_csv``). The format: no header, one row per rank, one action per cell,
an empty cell is idle. An action is ``{stage}{type}{microbatch}``: ``F`` forward, ``I`` input-gradient backward,
``W`` weight-gradient backward, ``B`` full backward (input and weight gradient in one pass), e.g. ``0F1``,
``3I2``. Torch's own dumps may also hold an overlapped pair ``(0F3;3B1)OVERLAP_F_B``, which it runs as its parts
in order. Torch reads the placement of stages on ranks from the file and inserts sends, receives and gradient
reduction itself.

Only orders are translated here: times come from the simulator. Neither direction needs torch installed.

- Export writes pipeplan's B as ``I`` when the problem's backward is split and as ``B`` when it is not; W as ``W``.
- Import reads ``I`` as B, ``W`` as W and, in a split problem, a full ``B`` as B directly followed by its W (what
  torch runs); in an unsplit problem ``B`` is B and ``I``/``W`` are errors. Parsing is strict: torch's own
  parser ignores trailing junk (``2BW0`` reads as ``2B`` without a microbatch), this one names the cell instead.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeplan.problem import A_PROBLEM, ConfigError, Op, OpKind, Problem, counted, expect, shown
from pipeplan.reading import TORCH_CSV_BYTES, decoded, read_text
from pipeplan.schedule import Schedule, ScheduleError, Wording
from pipeplan.simulate import simulate

# One compute action, the whole cell: stage, type, microbatch.
_ACTION = re.compile(r"(\d+)([FIBW])(\d+)")
# An overlapped pair as torch dumps it: "(0F3;3B1)OVERLAP_F_B".
_OVERLAP = re.compile(r"\((.*)\)OVERLAP_F_B")
# Torch's non-compute action types: a compute-only file must not hold them.
_COMMUNICATION = ("SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD")

FORMAT_HINT = "an action is {stage}{F|I|B|W}{microbatch}, e.g. 0F1 or 3I2"


def action_text(problem: Problem, op: Op) -> str:
    """The torch action of ``op``: ``{stage}{F|I|B|W}{microbatch}`` (B is ``I`` when the backward is split)."""
    kind = op.kind.value
    if op.kind is OpKind.B and problem.split_backward:
        kind = "I"
    return f"{op.stage}{kind}{op.microbatch}"


def to_torch_csv(problem: Problem, schedule: Schedule) -> str:
    """The compute-only CSV of ``schedule``: one row per rank, its actions in run order, no header. Raises
    :class:`~pipeplan.schedule.ScheduleError` unless ``schedule`` is a valid schedule of ``problem`` (every op
    once, on its own device, in an order that runs): only such a file is one :func:`from_torch_csv` reads back
    and PyTorch runs."""
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"schedule must be a pipeplan Schedule, got {type(schedule).__name__}")
    simulate(problem, schedule)  # raises what does not fit the problem
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for order in schedule.orders:
        writer.writerow([action_text(problem, op) for op in order])
    return buffer.getvalue()


@dataclass(frozen=True)
class _Action:
    """One parsed action and the cell it came from (row and column 1-based, as a spreadsheet shows them)."""

    row: int
    column: int
    cell: str
    stage: int
    kind: str
    microbatch: int


class _Reader:
    """Reads one file: parses every cell, then checks the actions against the problem, first offender first."""

    def __init__(self, problem: Problem, source: str) -> None:
        self.problem = problem
        self.source = source
        self.seen: dict[Op, _Action] = {}  # keyed by op: the action (cell) that ran it, as :meth:`read` fills it

    def fail(self, row: int, column: int, cell: str, why: str) -> ConfigError:
        return ConfigError(f"{self.source}: row {row} (rank {row - 1}), column {column}: {shown(cell, 40)} {why}")

    def parse_cell(self, row: int, column: int, cell: str) -> list[_Action]:
        text = cell.strip()
        if not text:
            return []
        overlap = _OVERLAP.fullmatch(text)
        parts = [part.strip() for part in overlap.group(1).split(";")] if overlap else [text]
        actions = []
        for part in parts:
            match = _ACTION.fullmatch(part)
            if match is None:
                if part.lstrip("0123456789").startswith(_COMMUNICATION):
                    raise self.fail(row, column, cell, "is a communication action; give a compute-only file "
                                    "(torch adds sends, receives and gradient reduction itself)")
                raise self.fail(row, column, cell, f"is not a compute action; {FORMAT_HINT}")
            actions.append(_Action(row, column, cell, int(match.group(1)), match.group(2), int(match.group(3))))
        return actions

    def check_ranges(self, a: _Action) -> None:
        problem = self.problem
        if a.stage >= problem.num_model_stages:
            raise self.fail(a.row, a.column, a.cell, f"names stage {a.stage}, but the config has "
                            f"{problem.num_model_stages} model stages (pipeline.num_stages x num_chunks = "
                            f"{problem.num_devices} x {problem.num_chunks}); stages are numbered from 0")
        if a.microbatch >= problem.num_microbatches:
            raise self.fail(a.row, a.column, a.cell, f"names microbatch {a.microbatch}, but the config has "
                            f"pipeline.num_microbatches: {problem.num_microbatches}; microbatches are numbered "
                            "from 0")
        if a.kind in "IW" and not problem.split_backward:
            raise self.fail(a.row, a.column, a.cell, "is a split-backward action, but the config's backward is "
                            "not split; set costs.backward_weight > 0, or write full backwards as B")

    def read(self, text: str) -> list[list[Op]]:
        problem = self.problem
        if text.startswith("\ufeff"):
            raise ConfigError(f"{self.source} starts with a byte-order mark (Excel's 'CSV UTF-8' saves one), which "
                              "torch's reader takes as part of the first action and refuses; save the file as plain "
                              "CSV")
        rows = list(csv.reader(io.StringIO(text)))
        parsed = [[a for column, cell in enumerate(cells, start=1) for a in self.parse_cell(row, column, cell)]
                  for row, cells in enumerate(rows, start=1)]
        for row, row_actions in enumerate(parsed, start=1):
            if not row_actions:  # torch reads every line as a rank, and every rank runs ops
                where = " (a blank line at the end of the file?)" if row > problem.num_devices else ""
                raise ConfigError(f"{self.source}: row {row} (rank {row - 1}) holds no action{where}; torch reads "
                                  "every line as a rank and every rank runs its stages' ops: delete the line")
        actions = [a for row_actions in parsed for a in row_actions]
        if len(rows) != problem.num_devices:
            self.check_one_rank_a_stage(actions)
            count = "no rows" if not rows else counted(len(rows), "row")
            raise ConfigError(f"{self.source} has {count} (one per rank), but the config has "
                              f"pipeline.num_stages: {problem.num_devices}; give a file for that many ranks or "
                              "change the config")
        seen = self.seen
        orders: list[list[Op]] = [[] for _ in rows]
        for a in actions:
            self.check_ranges(a)
            self.check_placement(a, actions)
            kinds = {"F": [OpKind.F], "I": [OpKind.B], "W": [OpKind.W],
                     "B": [OpKind.B, OpKind.W] if problem.split_backward else [OpKind.B]}[a.kind]
            for kind in kinds:
                op = problem.op(kind, a.stage, a.microbatch)
                if op in seen:
                    raise self.fail(a.row, a.column, a.cell, f"runs {kind.value} of stage {a.stage}, microbatch "
                                    f"{a.microbatch} again (already at row {seen[op].row}, column "
                                    f"{seen[op].column}: {seen[op].cell!r})")
                seen[op] = a
                orders[a.row - 1].append(op)
        return orders

    def check_one_rank_a_stage(self, actions: list[_Action]) -> None:
        """Each stage's actions all on one row (for a file whose rank count is not the config's, which has no
        placement to check them against)."""
        first_rank: dict[int, _Action] = {}  # keyed by model stage: its first action
        for a in actions:
            first = first_rank.setdefault(a.stage, a)
            if first.row != a.row:
                raise self.fail(a.row, a.column, a.cell, f"puts stage {a.stage} on rank {a.row - 1}, but row "
                                f"{first.row} (rank {first.row - 1}) already runs it ({first.cell!r}); a stage "
                                "lives on one rank")

    def check_placement(self, a: _Action, actions: list[_Action]) -> None:
        """``a`` on the rank the config places its stage on. When the file runs the stage on another row too, the
        action on the config's rank is right and ``a`` is the one to move; otherwise the file's layout is not the
        config's."""
        problem = self.problem
        device = problem.device_of(a.stage)
        if device == a.row - 1:
            return
        there = next((b for b in actions if b.stage == a.stage and b.row == device + 1), None)
        if there is not None:
            raise self.fail(a.row, a.column, a.cell, f"puts stage {a.stage} on rank {a.row - 1}, but the config "
                            f"places it on rank {device}, where the file runs it too (row {there.row}, column "
                            f"{there.column}: {there.cell!r}); a stage lives on one rank: move this action to row "
                            f"{device + 1}")
        elsewhere = next((b for b in actions if b.stage == a.stage and b.row != a.row), None)
        if elsewhere is not None:  # on two rows, neither the config's: no layout matches the file
            raise self.fail(a.row, a.column, a.cell, f"puts stage {a.stage} on rank {a.row - 1}, and row "
                            f"{elsewhere.row} (rank {elsewhere.row - 1}) runs it too ({elsewhere.cell!r}); a stage "
                            f"lives on one rank, here rank {device} (row {device + 1}): move its actions there")
        raise self.fail(a.row, a.column, a.cell, f"puts stage {a.stage} on rank {a.row - 1}, but the config "
                        f"places it on rank {device} (pipeline.num_chunks: {problem.num_chunks}, placement: "
                        f"{problem.placement}); change the config's layout to match the file")


def from_torch_csv(problem: Problem, text: str, name: str = "torch-csv", source: str = "the CSV") -> Schedule:
    """Read a compute-only torch CSV (its text) as a schedule of ``problem``.

    Raises :class:`ConfigError` naming the first offending cell (row, column, action) when the file does not fit
    the problem (ranks, stages, microbatches, placement, split backward), and naming the missing or repeated ops
    or the deadlock when its orders cannot run.
    """
    expect("problem", problem, Problem, A_PROBLEM)
    expect("text", text, str, "the CSV's text (Path(file).read_text())")
    reader = _Reader(problem, source)
    orders = reader.read(text)
    schedule = Schedule.from_lists(name, orders)
    try:
        simulate(problem, schedule)
    except ScheduleError as exc:
        # The ops named as the file writes them (its cell: 3I2 or a full 3B2, not B2@s3; a missing op as it would
        # be written), a deadlocked rank at its place in the file, and a file of fewer microbatches said so.
        def cell(op: Op) -> str:
            return reader.seen[op].cell.strip() if op in reader.seen else action_text(problem, op)

        def stuck(device: int, op: Op, waits_for: Sequence[Op]) -> str:
            a = reader.seen[op]
            return (f"rank {a.row - 1} (row {a.row}), column {a.column}: {cell(op)} waits for "
                    f"{', '.join(map(cell, waits_for))}")

        reason = exc.reworded(Wording(op=cell, stuck=stuck))
        found = sorted({op.microbatch for order in orders for op in order})
        fewer = ""
        if found and found[-1] + 1 < problem.num_microbatches:
            runs = f"only microbatch {found[0]}" if len(found) == 1 else f"microbatches {found[0]} to {found[-1]}"
            fewer = f" (the file runs {runs}; the config has pipeline.num_microbatches: {problem.num_microbatches})"
        raise ConfigError(f"{source} does not give a runnable schedule of the config{fewer}: {reason}") from None
    return schedule


def read_torch_csv_stream(problem: Problem, stream: BinaryIO, name: str = "stdin",
                          source: str = "the standard input") -> Schedule:
    """Read a compute-only torch CSV from a binary ``stream`` (the command line's ``--from-torch-csv -``: the
    standard input) as a schedule of ``problem`` (see :func:`from_torch_csv`)."""
    text = decoded(stream.read(TORCH_CSV_BYTES + 1), f"torch CSV on {source}", TORCH_CSV_BYTES, keep_mark=True)
    return from_torch_csv(problem, text, name=name, source=source)


def read_torch_csv(problem: Problem, path: str | Path, name: str | None = None) -> Schedule:
    """Read the compute-only torch CSV at ``path`` as a schedule of ``problem`` (see :func:`from_torch_csv`).

    The schedule is named ``name``, by default the file's stem.
    """
    expect("problem", problem, Problem, A_PROBLEM)
    expect("path", path, (str, os.PathLike), "the path of a torch CSV file")
    file = Path(path)
    text = read_text(file, "torch CSV", TORCH_CSV_BYTES, keep_mark=True)  # torch's reader keeps it, and fails
    return from_torch_csv(problem, text, name=name or file.name.removesuffix(".csv").removesuffix(".torch"),
                          source=str(file))
