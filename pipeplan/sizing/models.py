"""A transformer's shapes: the model record of sizing, from a preset name, a mapping or a YAML file.

Parameter counts follow the decoder-only transformer as Megatron-LM and Llama build it: per layer, the
attention's Q and output projections (h x h each), K and V (h x kv_hidden each, smaller with grouped-query
attention), the MLP (two h x ffn matrices, three with a gated SwiGLU MLP); the embedding (vocab x h) and,
unless tied, an LM head of the same size. Norms and biases are left out (under 0.1 % of the parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pipeplan.problem import ConfigError
from pipeplan.sizing.records import check_fields, named_file, presets, resolve, set_positive

# The keys of a model record, in the order of the preset files; they are a contract.
MODEL_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
                "vocab_size", "gated_mlp", "tied_embeddings", "source")
REQUIRED = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shapes, validated when built."""

    name: str
    num_layers: int
    """Transformer layers."""
    hidden_size: int
    """h: width of the residual stream."""
    ffn_hidden_size: int
    """Width of the MLP's hidden layer (per matrix; a gated MLP has two such input matrices)."""
    num_attention_heads: int
    """a: query heads."""
    num_kv_heads: int
    """Key/value heads (grouped-query attention); equal to the query heads for multi-head attention."""
    vocab_size: int
    """V: vocabulary size (embedding and LM head rows)."""
    gated_mlp: bool = False
    """True for a SwiGLU-style MLP with three matrices (gate, up, down)."""
    tied_embeddings: bool = False
    """True when the LM head reuses the embedding matrix."""
    source: str = ""
    """Where the shapes come from (paper, model card)."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
                     "vocab_size"):
            set_positive(self, "model", name, whole=True)
        for name in ("gated_mlp", "tied_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"model.hidden_size ({self.hidden_size}) must be a multiple of "
                              f"model.num_attention_heads ({self.num_attention_heads})")
        if self.num_attention_heads % self.num_kv_heads:
            raise ConfigError(f"model.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                              f"model.num_kv_heads ({self.num_kv_heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_hidden_size(self) -> int:
        """Width of K (and of V): key/value heads x head dimension."""
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def attention_params(self) -> int:
        """Q, K, V and output projections of one layer."""
        h = self.hidden_size
        return 2 * h * h + 2 * h * self.kv_hidden_size

    @property
    def mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.ffn_hidden_size

    @property
    def layer_params(self) -> int:
        """Weight-matrix parameters of one transformer layer."""
        return self.attention_params + self.mlp_params

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """The LM head's own parameters (0 when tied to the embedding)."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """All parameters: layers, embedding and (untied) LM head."""
        return self.num_layers * self.layer_params + self.embedding_params + self.head_params


def model_presets() -> list[str]:
    """Names of the shipped model presets."""
    return list(presets("models"))


def load_model(value: object) -> Model:
    """A :class:`Model` from a preset name, a mapping (with optional ``preset:`` to start from) or a YAML file.

    A missing shape field is named; ``num_kv_heads`` defaults to the query heads, the flags to false.
    """
    if isinstance(value, Model):
        return value
    with named_file(value, "model"):
        name, data = resolve(value, "models", "model")
        check_fields("model", data, MODEL_FIELDS)
        missing = [key for key in REQUIRED if key not in data]
        if missing:
            raise ConfigError(f"model.{missing[0]} is missing; a model needs {', '.join(REQUIRED)}")
        data.setdefault("num_kv_heads", data["num_attention_heads"])
        known = {f.name for f in fields(Model)}
        return Model(name=name, **{k: v for k, v in data.items() if k in known})


def model_record(model: Model) -> dict[str, Any]:
    """The model as a mapping of its contract keys (what a model YAML file holds)."""
    return {key: getattr(model, key) for key in MODEL_FIELDS}
