"""From a model, a GPU and a training setup to an ordinary pipeplan :class:`~pipeplan.problem.Problem`.

Times are seconds (rounded to whole microseconds, the solver's resolution), memory is bytes (whole bytes).
Every model stage gets its layers' F, B and W times from :mod:`pipeplan.sizing.costs`, the embedding on the
first stage and the LM head and loss on the last; the link to the next stage is the intra- or inter-node one,
from where the two stages' GPUs sit (Megatron-LM's rank order: tensor parallel innermost, then data
parallel, then pipeline). Each device's budget is the activation memory really left: capacity - reserve -
static state (:mod:`pipeplan.sizing.memory`) - backward workspace.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

from pipeplan.problem import ConfigError, Problem, fields_named_as, np_bool_types, plain_values
from pipeplan.sizing import costs, memory
from pipeplan.sizing.costs import OpCosts
from pipeplan.sizing.hardware import Hardware
from pipeplan.sizing.models import Model
from pipeplan.sizing.setup import Setup

# The pipeline's fields as sizing sets them, for the messages of the problem it builds.
SIZING_NAMES = {
    "pipeline.num_microbatches": "the microbatches per step (global_batch_size, in sequences, / (microbatch_size x "
                                 "data parallel))",
    "pipeline.num_stages": "pipeline_parallel",
    "pipeline.num_chunks": "num_chunks",
}

# The problem variants a named schedule may run on, as (split backward, placement), in order of preference: the
# fused backward Megatron-LM runs, then a split backward (B and W) in loop placement, then in V placement (two
# chunks). A named schedule runs on the first variant its generator accepts.
VARIANTS: tuple[tuple[bool, str], ...] = ((False, "loop"), (True, "loop"), (True, "v"))


def optimizer_variant(num_chunks: int) -> tuple[bool, str]:
    """The variant the optimizer searches: a split backward (it can use W to fill bubbles), and with two chunks
    the V placement (so that ZB-V is among its warm starts)."""
    return True, "v" if num_chunks == 2 else "loop"


@dataclass(frozen=True)
class SizedProblem:
    """A pipeline problem built from shapes, with the memory and time it leaves out of the pipeline."""

    problem: Problem
    """Times in seconds, memory in bytes; ``budget`` None when even one microbatch does not fit."""
    layers_per_stage: tuple[int, ...]
    """Transformer layers of each model stage, in model order."""
    static_bytes: tuple[float, ...]
    """Per device: weights, gradients and optimizer state."""
    workspace_bytes: tuple[float, ...]
    """Per device: transient bytes of one layer's backward (full recompute)."""
    budget_bytes: tuple[float, ...]
    """Per device: capacity - reserve - static - workspace (may be negative when the state does not fit)."""
    capacity_bytes: float
    reserve_bytes: float
    grad_sync_s: tuple[float, ...]
    """Per device: data-parallel gradient synchronisation after the pipeline, seconds, before any overlap."""
    last_backward_s: tuple[float, ...]
    """Per device: one microbatch's backward (B + W over its stages), the window a sync can hide under."""
    optimizer_s: tuple[float, ...]
    """Per device: the optimizer step (memory-bound over the fp32 state), seconds."""
    fits_one_microbatch: bool
    """False when static state leaves less than one microbatch's activations on some device."""
    note: str = ""
    """Why it does not fit, when it does not."""


def even_split(num_layers: int, num_stages: int) -> list[int]:
    """Layers per stage when they divide evenly; a user error otherwise."""
    if num_layers % num_stages:
        raise ConfigError(f"{num_layers} layers do not divide evenly over {num_stages} model stages; give "
                          "layers_per_stage (one count per model stage) or balanced=True")
    return [num_layers // num_stages] * num_stages


def balanced_split(num_layers: int, num_stages: int, layer: float, first_extra: float, last_extra: float) -> list[int]:
    """Layers per stage (each >= 1) that minimise the slowest stage's time, given one layer's time and the
    extra time of the first stage (embedding) and of the last (LM head and loss).

    Stages are contiguous and layers identical, so a stage's time is count x layer (+ extra at the ends); the
    smallest feasible bottleneck is found by trying, for every count on the first and last stage, the even
    spread of the rest (the middle stages' bottleneck is ceil(rest / middle) layers).
    """
    if num_stages == 1:
        return [num_layers]
    best: tuple[float, list[int]] | None = None
    for first in range(1, num_layers - num_stages + 2):
        for last in range(1, num_layers - first - (num_stages - 2) + 1):
            rest = num_layers - first - last
            middle = num_stages - 2
            if middle == 0 and rest != 0:
                continue
            if middle > 0 and rest < middle:
                continue
            mid_max = math.ceil(rest / middle) if middle else 0
            worst = max(first * layer + first_extra, last * layer + last_extra, mid_max * layer)
            if best is None or worst < best[0] - 1e-12:
                counts = [rest // middle + (1 if i < rest % middle else 0) for i in range(middle)] if middle else []
                best = (worst, [first, *counts, last])
    assert best is not None
    return best[1]


def _check_split(layers: Sequence[object], model: Model, num_stages: int) -> list[int]:
    layers = plain_values("layers_per_stage", layers)  # type: ignore[assignment]
    if not isinstance(layers, (list, tuple)):
        raise ConfigError(f"layers_per_stage must be a list of whole numbers, one per model stage ({num_stages}), "
                          f"got {layers!r}")
    counts: list[int] = []
    for count in layers:
        if isinstance(count, (bool, *np_bool_types())) or not isinstance(count, numbers.Integral) or count < 1:
            raise ConfigError(f"layers_per_stage values must be whole numbers >= 1, got {count!r}")
        counts.append(int(count))
    if len(counts) != num_stages:
        raise ConfigError(f"layers_per_stage has {len(counts)} values; give one per model stage ({num_stages})")
    if sum(counts) != model.num_layers:
        raise ConfigError(f"layers_per_stage sums to {sum(counts)}, but the model has {model.num_layers} layers")
    return counts


def _microseconds(value: float) -> float:
    """A time in seconds rounded to whole microseconds (the solver's resolution), at least one."""
    return max(1e-6, round(value, 6))


def build_problem(
    model: Model,
    hardware: Hardware,
    setup: Setup,
    split_backward: bool,
    placement: str = "loop",
    layers_per_stage: Sequence[int] | None = None,
    balanced: bool = False,
) -> SizedProblem:
    """The pipeline problem of ``setup`` (seconds, bytes) with everything the pipeline leaves out."""
    stages = setup.num_model_stages
    layer = costs.layer_times(model, hardware, setup)
    embed = costs.embedding_times(model, hardware, setup)
    head = costs.head_times(model, hardware, setup)
    if layers_per_stage is not None:
        if balanced:
            raise ConfigError("give layers_per_stage or balanced=True, not both: balanced picks the layers per "
                              "stage itself")
        split = _check_split(layers_per_stage, model, stages)
    elif balanced:
        split = balanced_split(model.num_layers, stages, layer.total, embed.total, head.total)
    else:
        split = even_split(model.num_layers, stages)

    times: list[OpCosts] = []
    for s, count in enumerate(split):
        cost = layer.scaled(count)
        if s == 0:
            cost = cost + embed
        if s == stages - 1:
            cost = cost + head
        times.append(cost)
    mem = memory.layer_memory(model, setup)
    activation = [count * mem.activation for count in split]
    activation[0] += memory.embedding_activation(model, setup)
    activation[-1] += memory.head_activation(model, setup)
    weight_activation = [count * mem.weight_activation if split_backward else 0.0 for count in split]

    forward = [_microseconds(c.forward) for c in times]
    if split_backward:
        backward = [_microseconds(c.backward) for c in times]
        weight = [_microseconds(c.weight) for c in times]
    else:
        backward = [_microseconds(c.backward + c.weight) for c in times]
        weight = [0.0] * stages
    num_chunks = setup.num_chunks
    with fields_named_as(SIZING_NAMES):  # e.g. too many ops: named as a study or estimate() sets them
        problem = Problem.build(
            num_stages=setup.pipeline_parallel, num_microbatches=setup.num_microbatches, forward=forward,
            backward=backward, backward_weight=weight, comm=0.0, activation=[float(math.ceil(a)) for a in activation],
            weight_activation=[float(math.ceil(w)) for w in weight_activation], num_chunks=num_chunks,
            placement=placement,
        )
    devices = [problem.device_of(s) for s in range(stages)]
    node_span = setup.tensor_parallel * setup.data_parallel  # ranks between consecutive pipeline devices

    def node(device: int) -> int:
        return device * node_span // hardware.gpus_per_node

    comm = [
        _microseconds(costs.p2p_time(model, hardware, setup, node(devices[s]) != node(devices[s + 1])))
        if s + 1 < stages and devices[s] != devices[s + 1] else 0.0  # none at V placement's turn (one device)
        for s in range(stages)
    ]

    per_param = memory.bytes_per_param(setup)
    params = [0.0] * setup.pipeline_parallel
    last_backward = [0.0] * setup.pipeline_parallel
    for s, count in enumerate(split):
        params[devices[s]] += memory.stage_params(model, setup, count, s == 0, s == stages - 1,
                                                  first_on_same_gpu=devices[s] == devices[0])
        last_backward[devices[s]] += times[s].backward + times[s].weight
    static = [p * per_param for p in params]
    workspace = [mem.workspace] * setup.pipeline_parallel
    budget = [hardware.capacity_bytes - hardware.reserve_bytes - st - ws for st, ws in zip(static, workspace)]
    need = [sum(activation[s] for s in range(stages) if devices[s] == d) for d in range(setup.pipeline_parallel)]
    short = [d for d in range(setup.pipeline_parallel) if budget[d] < need[d]]
    note = ""
    if short:
        d = short[0]
        if budget[d] >= 0:
            left = f"leaves {budget[d] / 2**30:.1f} GiB for activations"
        else:  # "leaves 0.0 GiB" hid how far the state alone is from fitting
            left = (f"is {-budget[d] / 2**30:.1f} GiB more than the GPU holds after its reserve and the backward "
                    "workspace, with nothing left for activations")
        note = (f"out of memory on pipeline device {d}: static {static[d] / 2**30:.1f} GiB {left}, one microbatch "
                f"needs {need[d] / 2**30:.1f} GiB")
    final = Problem.build(
        num_stages=setup.pipeline_parallel, num_microbatches=setup.num_microbatches, forward=forward,
        backward=backward, backward_weight=weight, comm=comm, activation=[float(math.ceil(a)) for a in activation],
        weight_activation=[float(math.ceil(w)) for w in weight_activation], num_chunks=num_chunks,
        placement=placement, budget=None if short else [float(math.floor(b)) for b in budget],
    )
    d = setup.data_parallel
    inter_dp = setup.tensor_parallel * d > hardware.gpus_per_node
    sync = []
    optimizer = []
    for p in params:
        grads = p * 4.0
        if setup.distributed_optimizer:
            sync.append(costs.collective_time(hardware, grads, d, inter_dp, False)
                        + costs.collective_time(hardware, p * 2.0, d, inter_dp, False))
            optimizer.append((p * 28.0 / d + p * 2.0) / hardware.memory_bytes_per_s)
        else:
            sync.append(costs.collective_time(hardware, grads, d, inter_dp, True))
            optimizer.append(p * 30.0 / hardware.memory_bytes_per_s)
    return SizedProblem(
        problem=final, layers_per_stage=tuple(split), static_bytes=tuple(static), workspace_bytes=tuple(workspace),
        budget_bytes=tuple(budget), capacity_bytes=hardware.capacity_bytes, reserve_bytes=hardware.reserve_bytes,
        grad_sync_s=tuple(sync), last_backward_s=tuple(last_backward), optimizer_s=tuple(optimizer),
        fits_one_microbatch=not short, note=note,
    )
