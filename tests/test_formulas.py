"""The simulator against the closed forms of :mod:`pipeplan.formulas` (uniform stages, no comm).

A grid of pipeline depths P, microbatch counts N (N < P included) and UNEQUAL forward and backward times, so that
a replay that swapped F and B, or summed them wrongly, would disagree with the formula.
"""

from __future__ import annotations

import math

import pytest
from invariants import assert_valid

from pipeplan import Problem, compute_metrics, generate, simulate
from pipeplan import formulas as closed
from pipeplan.schedules.gpipe import gpipe_with_flush_size

DEPTHS = [1, 2, 3, 4, 5, 6, 8]
MICROBATCHES = list(range(1, 21))
COSTS = [(1.0, 2.0), (0.7, 1.3), (2.0, 1.0)]  # (forward, backward)
GRID = [(p, f, b) for p in DEPTHS for f, b in COSTS]
GRID_IDS = [f"P{p}-F{f}-B{b}" for p, f, b in GRID]


def flush_sizes(n: int) -> list[int]:
    """A spread of microbatches per flush: 1, 2, 3, a middle value, N - 1 and N (deduplicated)."""
    return sorted({k for k in (1, 2, 3, max(1, n // 2), n - 1, n) if 1 <= k <= n})


@pytest.mark.parametrize(("p", "f", "b"), GRID, ids=GRID_IDS)
def test_gpipe_with_k_per_flush_matches_closed_form(p: int, f: float, b: float) -> None:
    for n in MICROBATCHES:
        problem = Problem.build(num_stages=p, num_microbatches=n, forward=f, backward=b)
        for k in flush_sizes(n):
            schedule = gpipe_with_flush_size(problem, k)
            metrics = compute_metrics(simulate(problem, schedule))
            where = f"P={p} N={n} k={k}"
            assert schedule.flushes == closed.gpipe_flushes(n, k), where
            assert metrics.makespan == pytest.approx(closed.gpipe_makespan(p, n, k, f, b)), where
            assert metrics.peak_memory == closed.gpipe_peak(n, k), where
            assert metrics.peak_memory_per_device == [closed.gpipe_peak(n, k)] * p, where


@pytest.mark.parametrize(("p", "f", "b"), GRID, ids=GRID_IDS)
def test_gpipe_flushes_come_from_the_budget(p: int, f: float, b: float) -> None:
    """An activation of 2 and a budget of 2k + 1 admit k microbatches per flush (the odd unit is not enough); the
    fewest flushes that allows are of even size, so the largest holds ceil(N / flushes), not k."""
    for n in MICROBATCHES:
        for k in flush_sizes(n):
            problem = Problem.build(num_stages=p, num_microbatches=n, forward=f, backward=b, activation=2.0,
                              budget=2 * k + 1)
            schedule = generate("gpipe", problem)
            timeline = simulate(problem, schedule)
            metrics = compute_metrics(timeline)
            where = f"P={p} N={n} k={k}"
            assert schedule.flushes == closed.gpipe_flushes(n, k), where
            assert metrics.makespan == pytest.approx(closed.gpipe_makespan(p, n, k, f, b)), where
            assert metrics.peak_memory == 2 * math.ceil(n / closed.gpipe_flushes(n, k)), where
            assert metrics.feasible, where
    problem = Problem.build(num_stages=p, num_microbatches=20, forward=f, backward=b, activation=2.0, budget=7)
    timeline = simulate(problem, generate("gpipe", problem))
    assert_valid(problem, timeline, compute_metrics(timeline))


@pytest.mark.parametrize(("p", "f", "b"), GRID, ids=GRID_IDS)
def test_1f1b_matches_closed_form(p: int, f: float, b: float) -> None:
    for n in MICROBATCHES:
        problem = Problem.build(num_stages=p, num_microbatches=n, forward=f, backward=b)
        metrics = compute_metrics(simulate(problem, generate("1f1b", problem)))
        where = f"P={p} N={n}"
        assert metrics.makespan == pytest.approx(closed.one_f_one_b_makespan(p, n, f, b)), where
        assert metrics.makespan == pytest.approx((n + p - 1) * (f + b)), where
        assert metrics.peak_memory == closed.one_f_one_b_peak(p, n) == min(p, n), where
        assert metrics.peak_memory_per_device == [closed.one_f_one_b_peak(p, n, r) for r in range(p)], where
        assert metrics.peak_memory_per_device == [min(p - r, n) for r in range(p)], where


def test_formulas_agree_with_published_examples() -> None:
    """The closed forms themselves, on the seed: GPipe in 8 flushes of 8, and 1F1B, with F = 1, B = 2."""
    assert closed.gpipe_flushes(64, 8) == 8
    assert closed.gpipe_makespan(8, 64, 8, 1.0, 2.0) == (64 + 8 * 7) * 3
    assert closed.gpipe_flushes(10, 3) == 4
    assert closed.gpipe_peak(2, 5) == 2
    assert closed.one_f_one_b_makespan(8, 64, 1.0, 2.0) == (64 + 7) * 3
    assert closed.one_f_one_b_peak(8, 3) == 3
    assert closed.one_f_one_b_peak(8, 64, rank=5) == 3
