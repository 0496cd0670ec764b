"""The generators that model a torch schedule give exactly torch's per-rank order (torch 2.13).

Torch's order is read from the schedule class itself, built without a process group; its full backward (``B``)
is written as pipeplan's B followed by its W, and an overlapped forward-backward pair as its two parts in order.
Skipped when torch is not installed (``pip install 'pipeplan[torch]'``).
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeplan import ConfigError, Problem, generate

visualizer = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")

# pipeplan name -> (torch class name, chunks per device, placement)
FAMILIES = {
    "interleaved-zb": ("InterleavedZeroBubble", (2, 3), "loop"),
    "dualpipe-v": ("DualPipeV", (2,), "v"),
    "interleaved-1f1b": ("Interleaved1F1B", (2, 3), "loop"),
    "zb-v": ("ZBVZeroBubble", (2,), "v"),
}


def torch_order(torch_name: str, p: int, n: int, v: int) -> list[list[str]] | None:
    """Torch's compute order per rank as ``{stage}{F|B|W}{microbatch}``; None when torch refuses (p, n, v)."""
    try:
        ranks = visualizer.get_schedule_ops(torch_name, p, n, v)
    except ValueError:
        return None
    orders: list[list[str]] = []
    for actions in ranks:
        order: list[str] = []
        for action in actions:
            if action is None:
                continue
            for part in action.sub_actions or (action,):
                kind: Any = part.computation_type.value
                stage, microbatch = part.stage_index, part.microbatch_index
                if kind == "B":
                    order += [f"{stage}B{microbatch}", f"{stage}W{microbatch}"]
                else:
                    order.append(f"{stage}{'B' if kind == 'I' else kind}{microbatch}")
        orders.append(order)
    return orders


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("p", [2, 4, 8])
def test_order_equals_torch(name: str, p: int) -> None:
    torch_name, chunk_counts, placement = FAMILIES[name]
    compared = 0
    for v in chunk_counts:
        for n in (p, 2 * p, 4 * p):
            want = torch_order(torch_name, p, n, v)
            if want is None:  # e.g. DualPipeV needs N >= 2P
                continue
            problem = Problem.build(p, n, forward=1, backward=1, backward_weight=1, num_chunks=v,
                                    placement=placement)
            got = [[f"{op.stage}{op.kind.value}{op.microbatch}" for op in order]
                   for order in generate(name, problem).orders]
            assert got == want, f"{name} P={p} N={n} v={v}"
            compared += 1
    assert compared >= 2


def test_torch_refuses_what_the_import_refuses() -> None:
    """The torch CSV import refuses a byte-order mark and blank lines, which pipeplan could replay, because torch
    does not load them: the mark stays part of the first action, and every line of the file is a rank."""
    from torch.distributed.pipelining.schedules import _Action, _validate_schedule

    from pipeplan.torch_csv import from_torch_csv

    with pytest.raises(RuntimeError, match="Invalid action string"):
        _Action.from_str("\ufeff0F0")
    assert _Action.from_str("") is None  # an empty cell is idle: a row of them is a rank with nothing to run
    rows = [[_Action.from_str(cell) for cell in line.split(",")] for line in ("0F0,0B0", "1F0,1B0", "")]
    with pytest.raises(AssertionError, match="incorrect number of ranks - expected 2, actual 3"):
        _validate_schedule(dict(enumerate(rows)), 2, 2, 1)  # what _load_csv runs on the file's rows
    problem = Problem.build(2, 1)
    for text in ("\ufeff0F0,0B0\n1F0,1B0\n", "0F0,0B0\n1F0,1B0\n\n", "0F0,0B0\n1F0,1B0\n,,\n"):
        with pytest.raises(ConfigError):
            from_torch_csv(problem, text)
    assert from_torch_csv(problem, "0F0,0B0\n1F0,1B0\n").orders == generate("1f1b", problem).orders
