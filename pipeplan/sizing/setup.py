"""How a model is trained on a cluster: parallel sizes, batch, sequence length and the memory-saving options.

A :class:`Setup` is validated when built; the cost and memory models read it and never change it. Counts
that depend on the model or the hardware (heads divisible by tensor parallelism, a tensor-parallel group
within a node, ...) are checked by :func:`constraint_violation`, which the sweep also uses to say why a
combination cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeplan.problem import ConfigError
from pipeplan.sizing.hardware import Hardware
from pipeplan.sizing.models import Model
from pipeplan.sizing.records import set_positive

RECOMPUTE_MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Setup:
    """Parallel sizes and options of one training configuration."""

    tensor_parallel: int
    """t: GPUs that split every layer's matrices (Megatron-style tensor parallelism)."""
    pipeline_parallel: int
    """P: pipeline devices (each holds num_chunks model stages)."""
    data_parallel: int
    """d: replicas of the pipeline; the global batch is split over them."""
    microbatch_size: int
    """b: sequences per microbatch."""
    global_batch_size: int
    """Sequences per optimizer step over all replicas."""
    seq_len: int
    """s: tokens per sequence."""
    num_chunks: int = 1
    """v: model stages per pipeline device (interleaved or V placement)."""
    recompute: str = "selective"
    """'none' (keep every activation), 'selective' (recompute the attention scores in the backward, as
    Korthikanti et al. 2022) or 'full' (keep each layer's input only, recompute the whole layer)."""
    sequence_parallel: bool = True
    """Split the layernorm/dropout activations over the tensor-parallel group (all-gather + reduce-scatter
    instead of all-reduce)."""
    flash_attention: bool = True
    """A fused attention kernel: the s x s scores are never stored, masked halves are skipped, and the backward
    recomputes the scores."""
    distributed_optimizer: bool = True
    """Shard the fp32 master weights and Adam moments over data-parallel ranks (ZeRO-1 style)."""
    overlap_grad_sync: bool = True
    """Overlap the data-parallel gradient reduction with the last microbatch's backward."""

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "pipeline_parallel", "data_parallel", "microbatch_size",
                     "global_batch_size", "seq_len", "num_chunks"):
            set_positive(self, "", name, whole=True)  # keywords of estimate() and keys of a study
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {self.recompute!r}")
        check_switches(**{name: getattr(self, name) for name in SWITCHES})

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def num_microbatches(self) -> int:
        """Microbatches each pipeline runs per step: global batch / (microbatch size x data parallel)."""
        return self.global_batch_size // (self.microbatch_size * self.data_parallel)

    @property
    def num_model_stages(self) -> int:
        return self.pipeline_parallel * self.num_chunks

    @property
    def tokens_per_microbatch(self) -> int:
        return self.microbatch_size * self.seq_len


def constraint_violation(model: Model, hardware: Hardware, setup: Setup, even_split: bool = True) -> str | None:
    """Why ``setup`` cannot run ``model`` on ``hardware`` (one sentence), or None when it can.

    ``even_split``: the layers must divide evenly over the model stages (no explicit or balanced split given).
    """
    t = setup.tensor_parallel
    if t > hardware.gpus_per_node:
        return f"tensor parallel {t} is larger than a node ({hardware.gpus_per_node} GPUs)"
    if model.num_attention_heads % t or model.num_kv_heads % t:
        return (f"{model.num_attention_heads} attention heads / {model.num_kv_heads} KV heads not divisible by "
                f"tensor parallel {t}")
    if model.ffn_hidden_size % t:
        return f"ffn_hidden_size {model.ffn_hidden_size} not divisible by tensor parallel {t}"
    if hardware.gpus_per_node % t:
        # Ranks are placed TP innermost, so a TP group would straddle two nodes, whose collectives the cost model
        # puts on the intra-node link (a new user's trial: tp4 on 6-GPU nodes cost the same as on 4 or 8).
        return (f"tensor parallel {t} does not divide a node's {hardware.gpus_per_node} GPUs (a TP group would "
                "straddle two nodes)")
    stages = setup.num_model_stages
    if stages > model.num_layers:
        return f"{stages} model stages for {model.num_layers} layers (at least one layer per stage)"
    if even_split and model.num_layers % stages:
        return f"{model.num_layers} layers not divisible by {stages} model stages"
    per_step = setup.microbatch_size * setup.data_parallel
    if setup.global_batch_size % per_step:
        return (f"global batch {setup.global_batch_size} not divisible by microbatch {setup.microbatch_size} x "
                f"data parallel {setup.data_parallel}")
    return None


# The on/off options of a configuration (keywords of estimate() and sweep(), a study's options).
SWITCHES = ("sequence_parallel", "flash_attention", "distributed_optimizer", "overlap_grad_sync")


def check_switches(prefix: str = "", **switches: object) -> None:
    """A :class:`ConfigError` naming the first of ``switches`` (keyword: value, named with ``prefix``, e.g. a
    study's "options.") that is not True or False: "no" or None is not read as on or off."""
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{prefix}{name} must be true or false, got {value!r}")
