"""FLOPs and times of one transformer layer (and of the embedding and LM head) per microbatch, per GPU.

The one place where a model's shapes become op costs. For a microbatch of b sequences of s tokens, hidden h,
tensor parallelism t:

- Weight matrix multiplies: 2 FLOPs per weight per token in the forward (F); the backward repeats them twice,
  once for the input gradient (B, "dgrad") and once for the weight gradient (W, "wgrad"). So F = B = W for
  this part, split evenly over the t tensor-parallel GPUs.
- Attention scores: QK^T and scores x V cost 2 x 2bs^2h FLOPs in the forward. They have no weights, so their
  backward belongs to B only (2x the forward; 2.5x with a fused flash-attention kernel, which recomputes QK^T).
  A fused kernel skips the masked half of causal attention.
- Memory-bound kernels (layernorms, bias-dropout-residual adds, the MLP activation, softmax and dropout over
  the scores when they are materialised) are timed by the bytes they move at the HBM bandwidth; the backward
  moves about twice the forward's bytes. Sequence parallelism splits the layernorm/dropout part over t.
- Tensor-parallel collectives: per layer two all-reduces of the b x s x h activations in the forward and two in
  the backward (with sequence parallelism an all-gather plus a reduce-scatter each, the same bytes), over the
  intra-node link, ring algorithm.
- Recompute: 'selective' repeats the attention-score forward (scores, softmax, dropout) inside B; 'full'
  repeats the whole layer forward (with its collectives) inside B.

Time = FLOPs / (peak x matmul efficiency) + bytes / (HBM bandwidth x memory efficiency) + collective time.
Model FLOPs for MFU follow Megatron-LM's count (Narayanan et al. 2021; Korthikanti et al. 2022): 3 x the
forward with full (unmasked) attention scores, recompute not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeplan.sizing.hardware import Hardware
from pipeplan.sizing.models import Model
from pipeplan.sizing.setup import Setup

# Bytes per activation element in bf16/fp16.
ACT_BYTES = 2


@dataclass(frozen=True)
class OpCosts:
    """Per-GPU cost of one microbatch through one piece of the model: F, B (input gradient) and W (weight
    gradient). Units are those of the producing function (FLOPs, bytes or seconds)."""

    forward: float
    backward: float
    weight: float

    def __add__(self, other: OpCosts) -> OpCosts:
        return OpCosts(self.forward + other.forward, self.backward + other.backward, self.weight + other.weight)

    def scaled(self, factor: float) -> OpCosts:
        return OpCosts(self.forward * factor, self.backward * factor, self.weight * factor)

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.weight


def layer_matmul_flops(model: Model, setup: Setup) -> OpCosts:
    """Weight matrix-multiply FLOPs of one layer per microbatch per GPU (F = B = W = 2 x weights x tokens / t)."""
    per_op = 2.0 * setup.tokens_per_microbatch * model.layer_params / setup.tensor_parallel
    return OpCosts(per_op, per_op, per_op)


def attention_score_flops(model: Model, setup: Setup) -> OpCosts:
    """Attention-score FLOPs (QK^T and scores x V) of one layer per microbatch per GPU, as run (no W part).

    Forward 4bs^2h / t, halved by a fused kernel that skips the causal mask's upper half; the backward is 2x
    the forward, 2.5x with the fused kernel (it recomputes QK^T).
    """
    b, s, h = setup.microbatch_size, setup.seq_len, model.hidden_size
    forward = 4.0 * b * s * s * h / setup.tensor_parallel
    if setup.flash_attention:
        forward *= 0.5
        return OpCosts(forward, 2.5 * forward, 0.0)
    return OpCosts(forward, 2.0 * forward, 0.0)


def layer_flops(model: Model, setup: Setup) -> OpCosts:
    """All FLOPs of one layer per microbatch per GPU, as run (recompute included in B)."""
    flops = layer_matmul_flops(model, setup) + attention_score_flops(model, setup)
    if setup.recompute == "full":
        flops = flops + OpCosts(0.0, flops.forward, 0.0)
    elif setup.recompute == "selective" and not setup.flash_attention:
        flops = flops + OpCosts(0.0, attention_score_flops(model, setup).forward, 0.0)
    return flops


def model_flops_per_step(model: Model, setup: Setup) -> float:
    """Model FLOPs of one optimizer step over all GPUs, Megatron-LM's MFU numerator.

    3 x forward (forward + backward at twice the forward), with the attention scores over the full s x s and no
    recompute: for a GPT-style model this is 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Korthikanti et al. 2022).
    """
    tokens = setup.global_batch_size * setup.seq_len
    weights = model.num_layers * model.layer_params + model.vocab_size * model.hidden_size
    scores = model.num_layers * 4.0 * setup.seq_len * model.hidden_size
    return 3.0 * tokens * (2.0 * weights + scores)


def layer_memory_traffic(model: Model, setup: Setup) -> OpCosts:
    """Bytes moved by the memory-bound kernels of one layer per microbatch per GPU (forward; backward 2x).

    Per token: two layernorms (read and write h values each), two fused bias-dropout-residual adds (read 2h,
    write h plus a one-byte mask), the MLP activation (GeLU reads and writes ffn values; SwiGLU reads 2 ffn and
    writes ffn), and without a fused attention kernel softmax plus dropout over a x s scores per token (read and
    write each, plus a mask). Sequence parallelism splits the norm/dropout part over t; the rest is split by t.
    """
    h, f = model.hidden_size, model.ffn_hidden_size
    t = setup.tensor_parallel
    tokens = setup.tokens_per_microbatch
    norms = tokens * (2 * 2 * h * ACT_BYTES + 2 * (3 * h * ACT_BYTES + h)) / (t if setup.sequence_parallel else 1)
    act_reads = 2 if model.gated_mlp else 1
    activation = tokens * (act_reads + 1) * f * ACT_BYTES / t
    forward = norms + activation + _score_traffic(model, setup)
    return OpCosts(forward, 2.0 * forward, 0.0)


def _score_traffic(model: Model, setup: Setup) -> float:
    """Forward bytes of softmax and dropout over materialised attention scores (0 with a fused kernel)."""
    if setup.flash_attention:
        return 0.0
    return setup.tokens_per_microbatch * model.num_attention_heads * setup.seq_len * (4 * ACT_BYTES + 1) / (
        setup.tensor_parallel)


def collective_time(hardware: Hardware, nbytes: float, group: int, inter_node: bool, all_reduce: bool) -> float:
    """Seconds of a ring collective over ``group`` GPUs on ``nbytes`` (the full tensor's size).

    An all-gather or reduce-scatter sends (g-1)/g of the bytes in g-1 steps; an all-reduce is both.
    """
    if group <= 1:
        return 0.0
    steps = (group - 1) * (2 if all_reduce else 1)
    volume = nbytes * (group - 1) / group * (2 if all_reduce else 1)
    return volume / hardware.link_bytes_per_s(inter_node) + steps * hardware.link_latency_us * 1e-6


def layer_tp_comm_time(model: Model, hardware: Hardware, setup: Setup) -> float:
    """Seconds of one layer's tensor-parallel collectives in one direction (forward, or B) per microbatch.

    Two all-reduces of the b x s x h activations, or with sequence parallelism two all-gathers and two
    reduce-scatters (the same volume, twice the steps).
    """
    t = setup.tensor_parallel
    nbytes = setup.tokens_per_microbatch * model.hidden_size * ACT_BYTES
    if setup.sequence_parallel:
        return 2 * (collective_time(hardware, nbytes, t, False, False) * 2)
    return 2 * collective_time(hardware, nbytes, t, False, True)


def layer_times(model: Model, hardware: Hardware, setup: Setup) -> OpCosts:
    """Seconds of F, B and W of one transformer layer per microbatch on one GPU, recompute included in B."""
    matmul = layer_matmul_flops(model, setup)
    scores = attention_score_flops(model, setup)
    traffic = layer_memory_traffic(model, setup)
    comm = layer_tp_comm_time(model, hardware, setup)
    compute = (matmul + scores).scaled(1.0 / hardware.matmul_flops) + traffic.scaled(1.0 / hardware.memory_bytes_per_s)
    forward = compute.forward + comm
    backward = compute.backward + comm
    if setup.recompute == "full":
        backward += forward
    elif setup.recompute == "selective" and not setup.flash_attention:
        backward += scores.forward / hardware.matmul_flops + _score_traffic(model, setup) / hardware.memory_bytes_per_s
    return OpCosts(forward, backward, compute.weight)


def embedding_times(model: Model, hardware: Hardware, setup: Setup) -> OpCosts:
    """Seconds of the input embedding on the first model stage per microbatch.

    Forward: a vocabulary-parallel lookup (write b x s x h values) and its all-reduce (or reduce-scatter with
    sequence parallelism) over the tensor-parallel group. No input gradient; W scatters the output gradient
    into the embedding's gradient.
    """
    tokens = setup.tokens_per_microbatch
    nbytes = tokens * model.hidden_size * ACT_BYTES
    comm = collective_time(hardware, nbytes, setup.tensor_parallel, False, not setup.sequence_parallel)
    write = nbytes / hardware.memory_bytes_per_s
    return OpCosts(write + comm, 0.0, 2 * write)


def head_times(model: Model, hardware: Hardware, setup: Setup) -> OpCosts:
    """Seconds of the final layernorm, LM head and cross-entropy loss on the last model stage per microbatch.

    The head is a vocabulary-parallel h x V/t matrix multiply (F = B = W in FLOPs); the loss converts the
    b x s x V/t logits to fp32 and runs a softmax over them (about 16 bytes per logit forward, 12 backward),
    which dominates with a 128k vocabulary. With sequence parallelism the head's input is all-gathered first.
    """
    tokens = setup.tokens_per_microbatch
    t = setup.tensor_parallel
    gemm = 2.0 * tokens * model.hidden_size * model.vocab_size / t / hardware.matmul_flops
    logits = tokens * model.vocab_size / t
    nbytes = tokens * model.hidden_size * ACT_BYTES
    comm = collective_time(hardware, nbytes, t, False, not setup.sequence_parallel)
    norm = tokens * 4 * model.hidden_size * ACT_BYTES / (t if setup.sequence_parallel else 1)
    forward = gemm + (16 * logits + norm) / hardware.memory_bytes_per_s + comm
    backward = gemm + (12 * logits + 2 * norm) / hardware.memory_bytes_per_s + comm
    return OpCosts(forward, backward, gemm)


def p2p_time(model: Model, hardware: Hardware, setup: Setup, inter_node: bool) -> float:
    """Seconds to send one microbatch's activations (or their gradient) to the next pipeline stage.

    Each tensor-parallel rank sends its 1/t slice of the b x s x h bf16 tensor (Megatron scatters it, or it is
    already split with sequence parallelism).
    """
    nbytes = setup.tokens_per_microbatch * model.hidden_size * ACT_BYTES / setup.tensor_parallel
    return hardware.link_latency_us * 1e-6 + nbytes / hardware.link_bytes_per_s(inter_node)
