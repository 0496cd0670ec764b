"""Proof that torch runs what pipeplan planned: every family (and the optimizer's schedule) is exported, loaded
into torch's ``_PipelineScheduleRuntime`` on 2, 3 and 4 CPU processes (gloo), and one training step of a float64
stack of linear layers runs. Checked: (a) the loss and every parameter's gradient equal a one-process reference
(relative tolerance 1e-6); (b) the order in which each rank ran F, I/B and W equals pipeplan's order for it.

All schedules of one rank count run in one process group (one launch), so the module takes well under a minute.
On 3 ranks a few microbatch counts that torch's own schedule classes refuse run too: pipeplan plans them, and
torch's runtime executes any valid order.
Skipped when torch is not installed (``pip install 'pipeplan[torch]'``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from pipeplan import Problem, generate, solve

pytest.importorskip("torch")
pytest.importorskip("numpy")

from pipeplan.torch_run import TorchJob, TorchRun, reference_step, run_in_torch  # noqa: E402

# (schedule, num_chunks, placement, split backward); "optimal" is the CP-SAT optimizer's schedule.
MATRIX = [
    ("gpipe", 1, "loop", False),
    ("1f1b", 1, "loop", False),
    ("gpipe", 1, "loop", True),
    ("1f1b", 1, "loop", True),
    ("zb-h1", 1, "loop", True),
    ("zb-h2", 1, "loop", True),
    ("optimal", 1, "loop", True),
    ("interleaved-1f1b", 2, "loop", False),
    ("interleaved-1f1b", 2, "loop", True),
    ("interleaved-zb", 2, "loop", True),
    ("interleaved-zb", 3, "loop", True),
    ("zb-v", 2, "v", True),
    ("dualpipe-v", 2, "v", True),
    ("optimal", 2, "v", True),
]
RANKS = [2, 3, 4]
# Microbatch counts torch's own classes refuse (DualPipeV needs N >= 2P, the interleaved ones a multiple of
# their rounds) but pipeplan plans, run on 3 ranks: (schedule, chunks, placement, split, N).
UNUSUAL = [
    ("dualpipe-v", 2, "v", True, 3),
    ("interleaved-zb", 2, "loop", True, 7),
    ("interleaved-1f1b", 2, "loop", False, 5),
]


def job(p: int, name: str, v: int, placement: str, split: bool, n: int | None = None) -> TorchJob:
    """Uneven costs and a budget, so that the optimizer's order is not a named one; N = 2P unless given."""
    n = 2 * p if n is None else n
    problem = Problem.build(p, n, forward=[1.0 + 0.1 * d for d in range(p)], backward=1.2,
                            backward_weight=0.8 if split else 0.0, comm=0.05, num_chunks=v, placement=placement,
                            weight_activation=0.4 if split else 0.0, budget=p + 1)
    if name == "optimal":
        schedule = solve(problem, time_limit_s=2, num_workers=1).schedule
    else:
        schedule = generate(name, problem)
    return TorchJob(problem, schedule)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, int], TorchRun]:
    """Every (ranks, matrix row) run: one torch launch per rank count; keyed by (ranks, row index)."""
    found: dict[tuple[int, int], TorchRun] = {}
    for p in RANKS:
        jobs = [job(p, *row) for row in MATRIX] + ([job(p, *row) for row in UNUSUAL] if p == 3 else [])
        for i, run in enumerate(run_in_torch(jobs)):
            found[(p, i)] = run
    return found


ROWS = [*MATRIX, *UNUSUAL]
CASES = [(p, i) for p in RANKS for i in range(len(MATRIX))] + [(3, len(MATRIX) + i) for i in range(len(UNUSUAL))]
IDS = [f"{ROWS[i][0]}-P{p}-v{ROWS[i][1]}{ROWS[i][2][0]}-{'split' if ROWS[i][3] else 'unsplit'}"
       + (f"-N{ROWS[i][4]}" if len(ROWS[i]) > 4 else "") for p, i in CASES]


@pytest.mark.parametrize(("p", "row"), CASES, ids=IDS)
def test_gradients_equal_the_reference(runs: dict[tuple[int, int], TorchRun], p: int, row: int) -> None:
    run = runs[(p, row)]
    loss, grads = reference_step(run.job)
    assert math.isclose(run.loss, loss, rel_tol=1e-6)
    assert set(run.grads) == set(grads) and len(grads) == 2 * run.job.problem.num_model_stages
    for key, want in grads.items():
        got = run.grads[key]
        assert len(got) == len(want)
        assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(got, want)), key


@pytest.mark.parametrize(("p", "row"), CASES, ids=IDS)
def test_each_rank_ran_pipeplans_order(runs: dict[tuple[int, int], TorchRun], p: int, row: int) -> None:
    run = runs[(p, row)]
    planned: list[Any] = [list(order) for order in run.job.schedule.orders]
    assert run.orders == planned


_LOOP = Problem.build(num_stages=2, num_microbatches=4).with_layout(2, "loop")
_V = Problem.build(num_stages=2, num_microbatches=4, backward_weight=0.5).with_layout(2, "v")


@pytest.mark.parametrize(("job", "message"), [
    ({"problem": _LOOP, "schedule": generate("dualpipe-v", _V)},
     "schedule 'dualpipe-v' runs F0@s3 on device 0, but stage 3 lives on device 1"),
    ({"problem": Problem.build(2, 4), "schedule": generate("1f1b", Problem.build(4, 4))},
     "schedule '1f1b' has 4 device orders, expected 2"),
    ({"problem": Problem.build(2, 4), "schedule": generate("1f1b", Problem.build(2, 4)), "rows_per_microbatch": 0},
     "TorchJob.rows_per_microbatch must be a whole number >= 1, got 0"),
    ({"problem": Problem.build(2, 4), "schedule": generate("1f1b", Problem.build(2, 4)), "time_scale": -1.0},
     "TorchJob.time_scale must be a number >= 0"),
    # These two used to fail with a TypeError here, or with torch's ValueError inside every rank.
    ({"problem": Problem.build(2, 4), "schedule": generate("1f1b", Problem.build(2, 4)), "time_scale": "0"},
     "TorchJob.time_scale must be a number >= 0 (0: as fast as it goes), got '0'"),
    ({"problem": Problem.build(2, 4), "schedule": generate("1f1b", Problem.build(2, 4)), "seed": "x"},
     "TorchJob.seed must be a whole number >= 0, got 'x'"),
], ids=["other-layout", "other-rank-count", "no-rows", "negative-time-scale", "text-time-scale", "text-seed"])
def test_a_job_torch_could_only_fail_on_later_is_refused_when_made(job: dict[str, Any], message: str) -> None:
    # Without the check, the first hangs until gloo's timeout in the ranks and the second fails an assertion there.
    with pytest.raises(ValueError, match=re.escape(message)):
        TorchJob(**job)
