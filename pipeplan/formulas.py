"""Closed forms of the named schedules for uniform stages (each generator's docstring derives its own).

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


# Zero-bubble family. F, B, W are one stage's forward, input-gradient and weight-gradient times;
# C is the latency of one stage-to-stage transfer. The stage span is the Zero Bubble paper's cost (the largest
# per-device span).


def zb_h1_stage_span(
    num_stages: int, num_microbatches: int, forward: float, backward: float, backward_weight: float, comm: float = 0.0
) -> float:
    """ZB-H1: N(F+B+W) + (P-1)(F+B-W+4C); (P-1)(F+B-W) without comm.

    Exact for the construction when N > P, W <= min(F, B) and 2C <= W (the paper's regime: W about as costly as
    F and B, comm small); outside it the replay is the truth.
    """
    return num_microbatches * (forward + backward + backward_weight) + (num_stages - 1) * (
        forward + backward - backward_weight + 4 * comm
    )


def zb_h2_stage_span(
    num_stages: int, num_microbatches: int, forward: float, backward: float, backward_weight: float, comm: float = 0.0
) -> float:
    """ZB-H2: N(F+B+W) + (P-1)(F+B+2C-2W); (P-1)(F+B-2W) without comm.

    Exact for the construction when N >= 2P - 1, W <= min(F, B) and 2C <= W; outside it the replay is the truth.
    """
    return num_microbatches * (forward + backward + backward_weight) + (num_stages - 1) * (
        forward + backward + 2 * comm - 2 * backward_weight
    )


def zb_h1_peak(num_stages: int, num_microbatches: int) -> int:
    """ZB-H1 holds min(P, N) activations on device 0 (any weight_activation <= activation): 1F1B's peak."""
    return min(num_stages, num_microbatches)


def zb_h2_peak(num_stages: int, num_microbatches: int) -> int:
    """ZB-H2 holds min(2P - 1, N) activations on device 0."""
    return min(2 * num_stages - 1, num_microbatches)


# Interleaved 1F1B with v chunks per device in loop placement. F, B, W are a device's totals (its whole share of
# the model), so one chunk-op costs F / v.


def interleaved_bubble(num_stages: int, num_microbatches: int, num_chunks: int) -> float:
    """Megatron's bubble relative to the ideal time N(F+B): (P-1) / (v N)."""
    return (num_stages - 1) / (num_chunks * num_microbatches)


def interleaved_memory_factor(num_stages: int, num_chunks: int) -> float:
    """Megatron's peak relative to 1F1B's P activations, N a multiple of P and N >= 2P: 1 + (P-1)/(P v)."""
    return 1 + (num_stages - 1) / (num_stages * num_chunks)


def interleaved_makespan(
    num_stages: int,
    num_microbatches: int,
    num_chunks: int,
    forward: float,
    backward: float,
    backward_weight: float = 0.0,
) -> float:
    """Interleaved 1F1B, N >= P: N(F+B+W) + (P-1)(F+B)/v, i.e. a bubble of (P-1)/(vN) of N(F+B) unsplit.

    Holds for every N >= P with pipeplan's grouping (groups of at least P microbatches); W follows its B and
    never delays another device.
    """
    return num_microbatches * (forward + backward + backward_weight) + (num_stages - 1) * (
        forward + backward
    ) / num_chunks


def interleaved_first_group(num_stages: int, num_microbatches: int) -> int:
    """Size of pipeplan's first microbatch group: ceil(N / max(1, floor(N / P))); P when N is a multiple of P."""
    groups = max(1, num_microbatches // num_stages)
    return math.ceil(num_microbatches / groups)


def interleaved_peak(num_stages: int, num_microbatches: int, num_chunks: int) -> float:
    """Interleaved 1F1B's peak on device 0 in activations: min((v-1)G + 2P - 1, N v) / v, G the first group.

    With G = P (N a multiple of P, N >= 2P) this is P (1 + (P-1)/(P v)).
    """
    group = interleaved_first_group(num_stages, num_microbatches)
    chunk_activations = min((num_chunks - 1) * group + 2 * num_stages - 1, num_microbatches * num_chunks)
    return chunk_activations / num_chunks


# ZB-V: V placement, two chunks per device; F, B, W are a device's totals (each chunk-op costs half).


def zb_v_stage_span(
    num_stages: int, num_microbatches: int, forward: float, backward: float, backward_weight: float
) -> float:
    """ZB-V without comm: N(F+B+W) + (P-1)(B-W), zero bubble when B = W.

    Exact for pipeplan's construction when N >= 2P - 1 and W <= F <= B (measured by replay; no published closed
    form); outside it the replay is the truth.
    """
    return num_microbatches * (forward + backward + backward_weight) + (num_stages - 1) * (backward - backward_weight)


def zb_v_peak(num_stages: int, num_microbatches: int) -> float:
    """ZB-V's peak on every device with N >= 2P - 1, in activations: P, 1F1B's; min(2P, N + 1) / 2 on device 0."""
    return min(2 * num_stages, num_microbatches + 1) / 2
