"""Hypothesis strategies shared by the generator tests: uneven per-stage costs and memory."""

from __future__ import annotations

from typing import Any

from exhaustive import per_stage_problem
from hypothesis import strategies as st

from pipeplan import Problem

times = st.integers(min_value=1, max_value=24).map(lambda x: x / 8)
comms = st.integers(min_value=0, max_value=6).map(lambda x: x / 8)


@st.composite
def uneven_stage_values(draw: st.DrawFn, size: int, p: int) -> dict[str, Any]:
    """Problem keywords with ``size`` values each: random costs, or an embedding on the first stage (+10 % F)
    and the LM head and loss on the last (+40 % F, +30 % B); random activations, weight shares, comm and an
    optional budget (per device, ``p`` devices) of at least one activation."""
    if draw(st.booleans()):
        forward = draw(st.lists(times, min_size=size, max_size=size))
        backward = draw(st.lists(times, min_size=size, max_size=size))
        weight = draw(st.lists(times, min_size=size, max_size=size))
    else:
        forward, backward, weight = [1.0] * size, [1.0] * size, [1.0] * size
        forward[0] *= 1.1
        forward[-1] *= 1.4
        backward[-1] *= 1.3
    activation = draw(st.lists(st.integers(min_value=1, max_value=4), min_size=size, max_size=size))
    shares = draw(st.lists(st.integers(min_value=0, max_value=4), min_size=size, max_size=size))
    return {
        "forward": forward,
        "backward": backward,
        "backward_weight": weight,
        "comm": draw(st.one_of(comms, st.lists(comms, min_size=size, max_size=size))),
        "activation": activation,
        "weight_activation": [a * s / 4 for a, s in zip(activation, shares)],
        "budget": draw(st.one_of(st.none(), st.integers(min_value=max(activation), max_value=3 * p * 4))),
    }


@st.composite
def binding_problems(draw: st.DrawFn) -> Problem:
    """P 2..6, N 2..12, 1 or 2 chunks (loop or V), split or not, unequal per-stage costs (0.25..4) and
    activations, a budget from one microbatch's footprint to about three."""
    costs = st.integers(min_value=1, max_value=16).map(lambda x: x / 4)
    p = draw(st.integers(2, 6))
    n = draw(st.integers(2, 12))
    num_chunks, placement = draw(st.sampled_from([(1, "loop"), (2, "loop"), (2, "v")]))
    budget = st.integers(min_value=0, max_value=16).map(lambda x: x / 8)
    return draw(per_stage_problem(p, n, draw(st.booleans()), costs, budget, num_chunks, placement))
