"""Closed forms for uniform stages without communication (REFERENCE section 3).

They are the independent check of the generators and the simulator: tests compare every replay to them.
Times in the config's unit, memory in activations.
"""

from __future__ import annotations

import math


def gpipe_flushes(num_microbatches: int, per_flush: int) -> int:
    """Flushes GPipe needs with at most ``per_flush`` microbatches in each."""
    return math.ceil(num_microbatches / per_flush)


def gpipe_makespan(num_stages: int, num_microbatches: int, per_flush: int, forward: float, backward: float) -> float:
    """GPipe: (N + flushes (P - 1)) (F + B)."""
    flushes = gpipe_flushes(num_microbatches, per_flush)
    return (num_microbatches + flushes * (num_stages - 1)) * (forward + backward)


def gpipe_peak(num_microbatches: int, per_flush: int) -> int:
    """GPipe holds every activation of a flush: min(k, N)."""
    return min(per_flush, num_microbatches)


def one_f_one_b_makespan(num_stages: int, num_microbatches: int, forward: float, backward: float) -> float:
    """1F1B: (N + P - 1)(F + B) for every N >= 1."""
    return (num_microbatches + num_stages - 1) * (forward + backward)


def one_f_one_b_peak(num_stages: int, num_microbatches: int, rank: int = 0) -> int:
    """1F1B on rank r holds min(P - r, N) activations; rank 0 holds the most."""
    return min(num_stages - rank, num_microbatches)
