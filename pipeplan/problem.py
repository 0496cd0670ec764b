"""The pipeline problem: devices, model stages, microbatches, per-stage costs and memory.

A :class:`Problem` is frozen and validated when it is built; every later step (generators, the simulator, the
solver) reads it and never changes it. Costs are times in the config's unit; memory values are in the config's
memory unit (activation slots or bytes).
"""

from __future__ import annotations

import enum
import math
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

PLACEMENTS: tuple[str, ...] = ("loop", "v")


class ConfigError(ValueError):
    """A user error in a problem or config: the message names the field, the bad value and the fix."""


def _short_repr() -> reprlib.Repr:
    """A repr that shows a few items per list, a few levels deep, so that it costs little on any value."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 3, 8, 8, 8
    short.maxstring, short.maxother, short.maxlong = 60, 60, 40
    return short


_SHORT_REPR = _short_repr()


def shown(value: object, limit: int = 80, quote: bool = True) -> str:
    """``value`` for an error message: its repr (a text's or an error's text without ``quote``), at most ``limit``
    characters.

    Built with bounded work, so that a message never renders a huge value (say, a YAML alias bomb) in full.
    """
    if not quote and isinstance(value, (str, BaseException)):
        text = str(value)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        # repr refuses whole numbers of more than 4300 digits
        text = f"a whole number with about {round(abs(value).bit_length() * math.log10(2))} digits"
    else:
        text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class OpKind(enum.Enum):
    """What an op computes. ``B`` is the full backward when the problem is unsplit, else the input gradient."""

    F = "F"
    B = "B"
    W = "W"


@dataclass(frozen=True, slots=True)
class Op:
    """One pass of one microbatch through one model stage.

    ``stage`` is the model stage (0 .. num_stages * num_chunks - 1, in model order); ``chunk`` is which of its
    device's chunks that stage is. The op is the single key for timelines, solver variables and plot labels.
    """

    kind: OpKind
    stage: int
    microbatch: int
    chunk: int = 0

    @property
    def label(self) -> str:
        """A short name such as ``F3@s1`` (kind, microbatch, model stage)."""
        return f"{self.kind.value}{self.microbatch}@s{self.stage}"


Number = float | int
PerStage = Number | Sequence[Number]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_count(name: str, value: object, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {shown(value)}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {shown(value)}")
    return value


def _expand(
    name: str,
    value: object,
    num_devices: int,
    num_chunks: int,
    split_over_chunks: bool,
    devices: Sequence[int],
) -> tuple[float, ...]:
    """Turn a scalar, a per-device list (P values) or a per-stage list (P*v values) into one value per stage.

    ``devices[s]`` is the device of model stage s. A scalar or per-device value describes the device's whole
    share of the model; with ``split_over_chunks`` it is divided evenly across the device's chunks, so that
    changing ``num_chunks`` never changes the model.
    """
    num_model_stages = num_devices * num_chunks
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, (list, tuple)) and len(values) not in (num_devices, num_model_stages):
        accepted = f"{num_devices} (one per device)"
        if num_chunks > 1:
            accepted += f" or {num_model_stages} (one per model stage)"
        raise ConfigError(f"{name} has {len(values)} values; give a single number or a list of {accepted}")
    numbers: list[float] = []
    for item in values:
        if not _is_number(item) or not math.isfinite(float(item)):  # type: ignore[arg-type]
            raise ConfigError(f"{name} must be a finite number or a list of finite numbers, got {shown(item)}")
        if float(item) < 0:  # type: ignore[arg-type]
            raise ConfigError(f"{name} must be >= 0, got {shown(item)}")
        numbers.append(float(item))  # type: ignore[arg-type]
    if num_chunks > 1 and len(numbers) == num_model_stages:
        return tuple(numbers)
    per_device = numbers * num_devices if len(numbers) == 1 else numbers
    share = 1.0 / num_chunks if split_over_chunks else 1.0
    return tuple(per_device[devices[s]] * share for s in range(num_model_stages))


@dataclass(frozen=True)
class Problem:
    """A synchronous pipeline to schedule.

    Cost and memory fields accept a number, a list of ``num_stages`` values (per device: the device's whole share,
    split evenly over its chunks) or, with chunks, a list of ``num_stages * num_chunks`` values (per model stage).
    After construction they are tuples with one value per model stage. ``budget`` is per device (a number or a
    list of ``num_stages`` values) and ``None`` means unlimited.
    """

    num_stages: int
    """P: pipeline devices."""
    num_microbatches: int
    """N: microbatches per optimizer step."""
    forward: PerStage = 1.0
    """Time of one forward pass (F), in the config's time unit."""
    backward: PerStage = 2.0
    """Time of the full backward, or of the input-gradient pass (B) when ``backward_weight`` > 0."""
    backward_weight: PerStage = 0.0
    """Time of the weight-gradient pass (W); 0 everywhere means the backward is not split."""
    comm: PerStage = 0.0
    """Latency of one transfer leaving a device's stage to a stage on another device; occupies no device."""
    activation: PerStage = 1.0
    """Memory a forward allocates when it starts, in the memory unit."""
    weight_activation: PerStage = 0.0
    """The part of ``activation`` kept until W ends (split backward only); the rest is released when B ends."""
    budget: PerStage | None = None
    """Live activation memory limit per device, in the memory unit; None means unlimited."""
    num_chunks: int = 1
    """v: model chunks (virtual stages) per device."""
    placement: str = "loop"
    """How model stages map to devices with chunks: 'loop' (stage c*P + d on device d) or 'v'."""

    def __post_init__(self) -> None:
        num_devices = _as_count("pipeline.num_stages", self.num_stages)
        _as_count("pipeline.num_microbatches", self.num_microbatches)
        num_chunks = _as_count("pipeline.num_chunks", self.num_chunks)
        if self.placement not in PLACEMENTS:
            raise ConfigError(
                f"pipeline.placement must be one of {', '.join(PLACEMENTS)}, got {shown(self.placement)}"
            )
        if self.placement == "v" and num_chunks != 2:
            raise ConfigError(f"pipeline.placement 'v' needs num_chunks: 2, got num_chunks: {num_chunks}")
        devices = tuple(_device_of_stage(s, num_devices, num_chunks, self.placement)
                        for s in range(num_devices * num_chunks))
        object.__setattr__(self, "_devices", devices)
        by_device = tuple([s for s, d in enumerate(devices) if d == dev] for dev in range(num_devices))
        object.__setattr__(self, "_stages_by_device", by_device)

        def expand(name: str, value: object, split: bool = True) -> tuple[float, ...]:
            return _expand(name, value, num_devices, num_chunks, split, devices)

        for name in ("forward", "backward", "backward_weight"):
            object.__setattr__(self, name, expand(f"costs.{name}", getattr(self, name)))
        object.__setattr__(self, "comm", expand("costs.comm", self.comm, split=False))
        for name in ("activation", "weight_activation"):
            object.__setattr__(self, name, expand(f"memory.{name}", getattr(self, name)))

        weights = self.backward_weight_per_stage
        if any(w > 0 for w in weights) and not all(w > 0 for w in weights):
            raise ConfigError(
                f"costs.backward_weight must be > 0 on every stage or 0 on every stage, got {list(weights)}; "
                "0 means the backward is not split into B and W"
            )
        for s, (act, wact) in enumerate(zip(self.activation_per_stage, self.weight_activation_per_stage)):
            if wact > act * (1 + 1e-12):
                raise ConfigError(
                    f"memory.weight_activation ({wact:g}) is above memory.activation ({act:g}) on stage {s}; "
                    "it is the part of the activation kept until W, so it must be <= activation"
                )
            if wact > 0 and not self.split_backward:
                raise ConfigError(
                    f"memory.weight_activation is {wact:g} but the backward is not split (costs.backward_weight "
                    "is 0); set weight_activation to 0 or give backward_weight a positive time"
                )
        for s in range(self.num_model_stages):
            if self.forward_per_stage[s] + self.backward_per_stage[s] + weights[s] <= 0:
                raise ConfigError(f"stage {s} has zero forward and backward time; give costs.forward > 0")

        if self.budget is not None:
            budget = _expand("memory.budget", self.budget, num_devices, 1, False, tuple(range(num_devices)))
            object.__setattr__(self, "budget", budget)
            for d in range(num_devices):
                need = max(self.activation_per_stage[s] for s in self.stages_on_device(d))
                if budget[d] < need * (1 - 1e-12):
                    raise ConfigError(
                        f"memory.budget ({budget[d]:g}) on device {d} is below one activation ({need:g}): "
                        "no forward could ever run; raise memory.budget to at least that"
                    )

    @classmethod
    def build(
        cls,
        num_stages: int,
        num_microbatches: int,
        forward: PerStage = 1.0,
        backward: PerStage = 2.0,
        backward_weight: PerStage = 0.0,
        comm: PerStage = 0.0,
        activation: PerStage = 1.0,
        weight_activation: PerStage = 0.0,
        budget: PerStage | None = None,
        num_chunks: int = 1,
        placement: str = "loop",
    ) -> Problem:
        """Build a validated problem from user input (numbers or per-device / per-stage lists, see the class)."""
        return cls(
            num_stages=num_stages, num_microbatches=num_microbatches, forward=forward, backward=backward,
            backward_weight=backward_weight, comm=comm, activation=activation, weight_activation=weight_activation,
            budget=budget, num_chunks=num_chunks, placement=placement,
        )

    # Typed views of the normalised fields (one value per model stage, or per device for the budget).

    @property
    def forward_per_stage(self) -> tuple[float, ...]:
        return self.forward  # type: ignore[return-value]

    @property
    def backward_per_stage(self) -> tuple[float, ...]:
        return self.backward  # type: ignore[return-value]

    @property
    def backward_weight_per_stage(self) -> tuple[float, ...]:
        return self.backward_weight  # type: ignore[return-value]

    @property
    def comm_per_stage(self) -> tuple[float, ...]:
        return self.comm  # type: ignore[return-value]

    @property
    def activation_per_stage(self) -> tuple[float, ...]:
        return self.activation  # type: ignore[return-value]

    @property
    def weight_activation_per_stage(self) -> tuple[float, ...]:
        return self.weight_activation  # type: ignore[return-value]

    @property
    def budget_per_device(self) -> tuple[float, ...] | None:
        return self.budget  # type: ignore[return-value]

    @property
    def split_backward(self) -> bool:
        """True when the backward is split into B (input gradient) and W (weight gradient)."""
        return any(w > 0 for w in self.backward_weight_per_stage)

    @property
    def num_model_stages(self) -> int:
        """Model stages in all: num_stages * num_chunks."""
        return self.num_stages * self.num_chunks

    @property
    def kinds(self) -> tuple[OpKind, ...]:
        """The op kinds each (stage, microbatch) has: F, B and, with a split backward, W."""
        return (OpKind.F, OpKind.B, OpKind.W) if self.split_backward else (OpKind.F, OpKind.B)

    def device_of(self, stage: int) -> int:
        """The device that runs model stage ``stage``."""
        return self._devices[stage]  # type: ignore[attr-defined,no-any-return]

    def chunk_of(self, stage: int) -> int:
        """Which of its device's chunks model stage ``stage`` is (both placements put chunk c at stages cP..cP+P-1)."""
        return stage // self.num_stages

    def stages_on_device(self, device: int) -> list[int]:
        """The model stages on ``device`` in model order."""
        return list(self._stages_by_device[device])  # type: ignore[attr-defined]

    def op(self, kind: OpKind, stage: int, microbatch: int) -> Op:
        """The op record for (kind, stage, microbatch), with its chunk filled in."""
        return Op(kind, stage, microbatch, self.chunk_of(stage))

    def duration(self, op: Op) -> float:
        """Time of ``op`` in the config's time unit."""
        if op.kind is OpKind.F:
            return self.forward_per_stage[op.stage]
        if op.kind is OpKind.B:
            return self.backward_per_stage[op.stage]
        return self.backward_weight_per_stage[op.stage]

    def link_latency(self, stage: int) -> float:
        """Latency between model stages ``stage`` and ``stage + 1`` (either direction); 0 on the same device."""
        if stage + 1 >= self.num_model_stages or self.device_of(stage) == self.device_of(stage + 1):
            return 0.0
        return self.comm_per_stage[stage]

    def all_ops(self) -> list[Op]:
        """Every op of one optimizer step, stage by stage, microbatch by microbatch."""
        return [
            self.op(kind, s, m)
            for s in range(self.num_model_stages)
            for m in range(self.num_microbatches)
            for kind in self.kinds
        ]

    def dependencies(self, op: Op) -> list[tuple[Op, float]]:
        """The ops that must end before ``op`` starts, each with the latency that follows it."""
        s, m = op.stage, op.microbatch
        if op.kind is OpKind.F:
            return [] if s == 0 else [(self.op(OpKind.F, s - 1, m), self.link_latency(s - 1))]
        if op.kind is OpKind.B:
            if s == self.num_model_stages - 1:
                return [(self.op(OpKind.F, s, m), 0.0)]
            return [(self.op(OpKind.B, s + 1, m), self.link_latency(s))]
        return [(self.op(OpKind.B, s, m), 0.0)]

    def with_layout(self, num_chunks: int, placement: str) -> Problem:
        """The same model cut into ``num_chunks`` chunks per device in ``placement``.

        Each device keeps its whole share (the sum over its chunks of costs and activations; its links keep
        their latency), split evenly over the new chunks; budgets are per device and stay.
        """
        devices = range(self.num_stages)

        def per_device(values: tuple[float, ...]) -> list[float]:
            return [sum(values[s] for s in self.stages_on_device(d)) for d in devices]

        return replace(
            self,
            num_chunks=num_chunks,
            placement=placement,
            forward=per_device(self.forward_per_stage),
            backward=per_device(self.backward_per_stage),
            backward_weight=per_device(self.backward_weight_per_stage),
            comm=[self.comm_per_stage[min(self.stages_on_device(d))] for d in devices],
            activation=per_device(self.activation_per_stage),
            weight_activation=per_device(self.weight_activation_per_stage),
            budget=None if self.budget_per_device is None else list(self.budget_per_device),
        )

    def device_work(self, device: int) -> float:
        """Total op time on ``device`` for one step."""
        return self.num_microbatches * sum(
            self.forward_per_stage[s] + self.backward_per_stage[s] + self.backward_weight_per_stage[s]
            for s in self.stages_on_device(device)
        )

    def max_in_flight(self, device: int) -> int | None:
        """How many microbatches' activations of one stage the budget lets ``device`` hold; None if unlimited.

        Counted with the largest activation among the device's stages, and never below 1 (construction checks
        that one activation fits).
        """
        if self.budget_per_device is None:
            return None
        act = max(self.activation_per_stage[s] for s in self.stages_on_device(device))
        if act <= 0:
            return None
        return max(1, int(math.floor(self.budget_per_device[device] / act + 1e-9)))


def _device_of_stage(stage: int, num_devices: int, num_chunks: int, placement: str) -> int:
    chunk, offset = divmod(stage, num_devices)
    if placement == "v" and chunk % 2 == 1:
        return num_devices - 1 - offset
    return offset
