"""Memory per GPU in bytes: static state (weights, gradients, optimizer) and activations per microbatch.

The one place where shapes become bytes.

- Static: mixed-precision Adam as Megatron-LM keeps it: bf16 weights (2 bytes), fp32 gradients (4) and fp32
  master weights plus two moments (12): 18 bytes per parameter; a distributed optimizer shards the 12 over
  the d data-parallel ranks: 6 + 12/d.
- Activations of one layer per microbatch (Korthikanti et al. 2022, generalised to grouped-query attention and
  any MLP width): per token 2 bytes for each of the layernorm inputs (2 x h), QKV input (h), Q (h), K and V
  (kv each), the output projection's input (h), the MLP input (h), the MLP's hidden values (ffn, or 2 ffn gated,
  before the activation and ffn after it), and a one-byte dropout mask after attention and after the MLP. For
  a GPT layer that is 34 h bytes per token. Without a fused attention kernel the scores add 5 a s bytes per
  token (softmax output, dropout mask and output). Tensor parallelism splits all but the layernorm/dropout
  part and the QKV/MLP inputs (10 h); sequence parallelism splits those too.
- Recompute: 'selective' drops the scores term and rebuilds one layer's scores at a time during its backward
  (5 a s bytes per token / t, counted as workspace); 'full' keeps only each layer's input (2 h per token) and
  rebuilds one layer's activations at a time during its backward (counted as workspace).
- Materialised attention scores (no fused kernel) cost two more score-sized fp16 tensors, 4 a s bytes per token
  / t, once per GPU and not per layer, both read from Megatron-LM's core attention: the input buffer of the
  scores' ``baddbmm``, taken from its global memory buffer and kept for the whole run (2 a s), and the transient
  one beyond what autograd has already freed while a layer's score backward runs (2 a s: the score gradient
  out of the attention-value ``bmm`` backward and the dropout backward's output are live together, while the
  dropped probabilities were freed with their ``bmm`` node; the fused softmax backward then works in place).
  The forward's raw scores, freed after the softmax, are the same size at the other end of the layer.
  Counted as workspace; a fused kernel keeps none of it.
- Split backward (Zero Bubble, Qi et al. 2024): after B, W still needs the weight matrix multiplies' inputs and
  output gradients (32 h bytes per token for a GPT layer): ``weight_activation``. Tensor parallelism splits
  all but the QKV and MLP-up inputs and the row-parallel matmuls' output gradients (8 h); sequence
  parallelism splits those too, as it does the activations above.
- First stage: the embedding's dropout mask; last stage: the final layernorm, the head's gathered input and the
  fp32 logits the cross-entropy keeps for its backward (4 V / t bytes per token, large with 128k vocabularies).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeplan.sizing.costs import ACT_BYTES
from pipeplan.sizing.models import Model
from pipeplan.sizing.setup import Setup


def bytes_per_param(setup: Setup) -> float:
    """Static bytes per parameter: 18 (bf16 weight, fp32 grad, fp32 master + two Adam moments), or
    6 + 12/d when the distributed optimizer shards the fp32 state over the d data-parallel ranks."""
    if setup.distributed_optimizer:
        return 6.0 + 12.0 / setup.data_parallel
    return 18.0


@dataclass(frozen=True)
class LayerMemory:
    """Bytes per GPU of one layer for one microbatch."""

    activation: float
    """Allocated by F, held until B (and partly W) ends."""
    weight_activation: float
    """The part of ``activation`` W still needs after B (split backward)."""
    workspace: float
    """Bytes beyond the held activations while one layer's backward runs, counted once per GPU (the layers run
    one at a time): the rebuilt activations under recompute and, with materialised scores, Megatron-LM's score
    buffer and the score gradient."""


def _full_layer_bytes_per_token(model: Model, setup: Setup) -> float:
    """Activation bytes per token of one layer without recompute, split as tensor/sequence parallelism split
    them."""
    h, kv, f, a = model.hidden_size, model.kv_hidden_size, model.ffn_hidden_size, model.num_attention_heads
    t = setup.tensor_parallel
    # Replicated over the tensor-parallel group unless sequence parallel: layernorm inputs, the QKV and MLP
    # inputs (the layernorms' outputs), and the two dropout masks.
    replicated = ACT_BYTES * (2 * h + 2 * h) + 2 * h
    mlp_hidden = 2 * f if model.gated_mlp else f
    split = ACT_BYTES * (h + 2 * kv + h + mlp_hidden + f)  # Q, K, V, attention output, MLP hidden values
    scores = 0.0 if setup.flash_attention else 5.0 * a * setup.seq_len
    return (replicated / t if setup.sequence_parallel else replicated) + (split + scores) / t


def layer_memory(model: Model, setup: Setup) -> LayerMemory:
    """Activation, weight-gradient share and workspace of one layer per microbatch, bytes per GPU."""
    h = model.hidden_size
    t = setup.tensor_parallel
    tokens = setup.tokens_per_microbatch
    full = tokens * _full_layer_bytes_per_token(model, setup)
    if setup.recompute == "none":
        activation = full
    elif setup.recompute == "selective":
        scores = 0.0 if setup.flash_attention else 5.0 * model.num_attention_heads * setup.seq_len / t
        activation = full - tokens * scores
    else:
        activation = tokens * ACT_BYTES * h / (t if setup.sequence_parallel else 1)
    return LayerMemory(activation, min(activation, tokens * _weight_bytes_per_token(model, setup)),
                       _workspace(model, setup, full))


def _weight_bytes_per_token(model: Model, setup: Setup) -> float:
    """Bytes per token one layer's W still needs after B: each weight matrix multiply's input and output
    gradient (its weight gradient is input^T x output gradient).

    A column-parallel matmul (QKV, MLP up) splits its output over the tensor-parallel group, so its output
    gradient is split; its input (a layernorm's output) is whole on every rank. A row-parallel one (output
    projection, MLP down) takes a split input and all-reduces its output, so its output gradient is whole on
    every rank. Sequence parallelism keeps each of those whole tensors split over the sequence (the layernorm's
    output; the gradient that arrives at the reduce-scatter) and all-gathers it where a matmul needs it whole;
    Megatron-LM gathers the input again for the weight gradient, so W keeps the split tensor and all are split
    by t:

    - split: QKV and MLP-up output gradients (h + 2 kv, and ffn or 2 ffn gated), output projection and MLP-down
      inputs (h, ffn);
    - whole unless sequence parallel: QKV and MLP-up inputs, output projection and MLP-down output gradients
      (h each).

    For a GPT layer (kv = h, ffn = 4 h) that is 2 x (4 h + 12 h) bytes: 32 h / t with sequence parallelism (the
    Zero Bubble accounting), 8 h + 24 h / t without it.
    """
    h, kv, f = model.hidden_size, model.kv_hidden_size, model.ffn_hidden_size
    t = setup.tensor_parallel
    mlp_hidden = 2 * f if model.gated_mlp else f
    whole = ACT_BYTES * 4 * h
    split = ACT_BYTES * ((h + 2 * kv) + mlp_hidden + h + f)
    return (whole / t if setup.sequence_parallel else whole) + split / t


def _workspace(model: Model, setup: Setup, full: float) -> float:
    """Bytes per GPU one layer's backward needs beyond the activations it holds (see the module docstring):
    the rebuilt layer (full recompute) or its rebuilt scores (selective recompute), plus, when the scores are
    materialised, Megatron-LM's score buffer and the score gradient held beside the dropout backward."""
    if setup.flash_attention:
        return full if setup.recompute == "full" else 0.0
    tokens = setup.tokens_per_microbatch
    scores_per_token = model.num_attention_heads * setup.seq_len / setup.tensor_parallel
    # Softmax output and dropout output (2 bytes each) and the dropout mask (1 byte) of the rebuilt scores.
    rebuilt = {"full": full, "selective": tokens * 5.0 * scores_per_token, "none": 0.0}[setup.recompute]
    return rebuilt + tokens * 2 * ACT_BYTES * scores_per_token


def embedding_activation(model: Model, setup: Setup) -> float:
    """Bytes per GPU the first stage keeps per microbatch for the embedding (its dropout mask)."""
    tokens = setup.tokens_per_microbatch
    return tokens * model.hidden_size / (setup.tensor_parallel if setup.sequence_parallel else 1)


def head_activation(model: Model, setup: Setup) -> float:
    """Bytes per GPU the last stage keeps per microbatch for the final layernorm, LM head and loss."""
    tokens = setup.tokens_per_microbatch
    t = setup.tensor_parallel
    norm = ACT_BYTES * model.hidden_size / (t if setup.sequence_parallel else 1)
    head_input = ACT_BYTES * model.hidden_size
    logits = 4.0 * model.vocab_size / t
    return tokens * (norm + head_input + logits)


def stage_params(model: Model, setup: Setup, num_layers: int, first: bool, last: bool,
                 first_on_same_gpu: bool = False) -> float:
    """Parameters one GPU holds for a model stage of ``num_layers`` layers: the embedding on the first stage,
    the LM head on the last.

    A tied head shares the embedding's matrix, so it is held once where the first stage sits on the same GPU
    as the last (``first`` for a single stage; ``first_on_same_gpu`` for V placement, whose device 0 holds
    both the first and the last model stage) and adds nothing there. On a different GPU it is a second copy
    of the matrix, kept equal by an all-reduce of the two gradients, as Megatron-LM does.
    """
    params = num_layers * model.layer_params
    if first:
        params += model.embedding_params
    if last and not (model.tied_embeddings and (first or first_on_same_gpu)):
        params += model.head_params if not model.tied_embeddings else model.embedding_params
    return params / setup.tensor_parallel
