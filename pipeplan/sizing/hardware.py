"""An accelerator's numbers: the hardware record of sizing, from a preset name, a mapping or a YAML file.

Every field can be overridden (a mapping with ``preset:`` and the fields to change). Units: TFLOP/s (1e12),
GiB (2**30 bytes) for capacities, GB/s (1e9 bytes/s) per GPU and per direction for bandwidths, microseconds
for latency.
"""

from __future__ import annotations

import logging
from dataclasses import MISSING, dataclass, fields

from pipeplan.problem import ConfigError
from pipeplan.sizing.records import check_fields, is_file, named_file, presets, resolve, set_positive

log = logging.getLogger(__name__)

GIB = 2**30

# Per field: the range of values an accelerator of this decade can have (a wide one: the presets' span about
# tenfold inside it), and what a value outside it most likely is. A value off by its unit (a thousandfold, or
# PFLOP/s and TB/s for TFLOP/s and GB/s) is accepted (a future part may exceed any range) but warned about, once a
# run: it makes every configuration fit, or none, or run at 0 % MFU.
PLAUSIBLE = {
    "peak_tflops": (20.0, 1e5, "TFLOP/s (989 for an H100), not FLOP/s or PFLOP/s"),
    "memory_gib": (1.0, 1e4, "GiB (80 for an 80 GB part), not bytes, MiB or TiB"),
    "memory_bandwidth_gbs": (50.0, 1e6, "GB/s (3350 for an H100 SXM), not TB/s or bytes/s"),
    "intra_node_bandwidth_gbs": (10.0, 1e5, "GB/s each way (450 for H100 NVLink), not TB/s or bytes/s"),
    "inter_node_bandwidth_gbs": (0.1, 1e5, "GB/s each way (50 for a 400 Gb/s NIC), not TB/s or bytes/s"),
}
_warned: set[tuple[str, float]] = set()  # (field, value) already warned about: a study loads its GPU several times

HARDWARE_FIELDS = ("peak_tflops", "memory_gib", "memory_bandwidth_gbs", "intra_node_bandwidth_gbs",
                   "inter_node_bandwidth_gbs", "gpus_per_node", "matmul_efficiency", "memory_efficiency",
                   "link_efficiency", "link_latency_us", "memory_reserve_gib", "source")


@dataclass(frozen=True)
class Hardware:
    """One GPU model and the node it sits in, validated when built."""

    name: str
    peak_tflops: float
    """Dense bf16/fp16 tensor-core peak, TFLOP/s."""
    memory_gib: float
    """Memory capacity per GPU, GiB."""
    memory_bandwidth_gbs: float
    """HBM bandwidth, GB/s."""
    intra_node_bandwidth_gbs: float
    """Per-GPU bandwidth to the other GPUs of its node (NVLink/xGMI), GB/s each way."""
    inter_node_bandwidth_gbs: float
    """Per-GPU bandwidth to other nodes (InfiniBand/RoCE), GB/s each way."""
    gpus_per_node: int
    """GPUs that share the intra-node fabric; tensor parallelism stays within a node."""
    matmul_efficiency: float = 0.78
    """Fraction of the peak that large matrix multiplies reach."""
    memory_efficiency: float = 0.53
    """Fraction of the HBM bandwidth that memory-bound kernels (norms, dropout, activations, softmax) reach."""
    link_efficiency: float = 0.75
    """Fraction of a link's bandwidth that collectives and transfers reach."""
    link_latency_us: float = 10.0
    """Fixed cost of one transfer or collective step, microseconds."""
    memory_reserve_gib: float = 3.0
    """Memory not available to the model: CUDA context, NCCL buffers, allocator fragmentation, GiB."""
    source: str = ""
    """Where the numbers come from (datasheet)."""

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "memory_gib", "memory_bandwidth_gbs", "intra_node_bandwidth_gbs",
                     "inter_node_bandwidth_gbs"):
            set_positive(self, "hardware", name)
        set_positive(self, "hardware", "gpus_per_node", whole=True)
        for name in ("matmul_efficiency", "memory_efficiency", "link_efficiency"):
            set_positive(self, "hardware", name)
            if getattr(self, name) > 1:
                raise ConfigError(f"hardware.{name} is a fraction of the peak, at most 1; got {getattr(self, name)}")
        set_positive(self, "hardware", "link_latency_us", allow_zero=True)
        set_positive(self, "hardware", "memory_reserve_gib", allow_zero=True)
        if self.memory_reserve_gib >= self.memory_gib:
            raise ConfigError(f"hardware.memory_reserve_gib ({self.memory_reserve_gib}) must be below "
                              f"hardware.memory_gib ({self.memory_gib})")

    @property
    def matmul_flops(self) -> float:
        """FLOP/s large matrix multiplies reach."""
        return self.peak_tflops * 1e12 * self.matmul_efficiency

    @property
    def memory_bytes_per_s(self) -> float:
        """Bytes/s memory-bound kernels reach."""
        return self.memory_bandwidth_gbs * 1e9 * self.memory_efficiency

    def link_bytes_per_s(self, inter_node: bool) -> float:
        """Bytes/s a transfer or collective reaches over the intra- or inter-node link."""
        gbs = self.inter_node_bandwidth_gbs if inter_node else self.intra_node_bandwidth_gbs
        return gbs * 1e9 * self.link_efficiency

    @property
    def capacity_bytes(self) -> float:
        return self.memory_gib * GIB

    @property
    def reserve_bytes(self) -> float:
        return self.memory_reserve_gib * GIB


def hardware_presets() -> list[str]:
    """Names of the shipped hardware presets."""
    return list(presets("hardware"))


def load_hardware(value: object) -> Hardware:
    """A :class:`Hardware` from a preset name, a mapping (with optional ``preset:`` to start from) or a YAML
    file; a missing field is named."""
    if isinstance(value, Hardware):
        return value
    with named_file(value, "hardware"):
        name, data = resolve(value, "hardware", "hardware")
        check_fields("hardware", data, HARDWARE_FIELDS)
        required = [f.name for f in fields(Hardware) if f.name != "name" and f.default is MISSING]
        missing = [key for key in required if key not in data]
        if missing:
            raise ConfigError(f"hardware.{missing[0]} is missing; hardware needs {', '.join(required)}")
        hardware = Hardware(name=name, **data)
    for field_name, (low, high, unit) in PLAUSIBLE.items():
        number = getattr(hardware, field_name)
        if not low <= number <= high and (field_name, number) not in _warned:
            _warned.add((field_name, number))
            where = f" in {str(value)!r}" if is_file(value) else ""
            log.warning("hardware.%s%s is %g, far outside what a GPU has (%s to %s): the field is in %s", field_name,
                        where, number, f"{low:,.10g}", f"{high:,.10g}", unit)
    return hardware
