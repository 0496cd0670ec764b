"""The pipeline problem: devices, model stages, microbatches, per-stage costs and memory.

A :class:`Problem` is frozen and validated when it is built; every later step (generators, the simulator, the
solver) reads it and never changes it. Costs are times in the config's unit; memory values are in the config's
memory unit (activation slots or bytes).
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import math
import numbers
import re
import reprlib
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Literal

# The most ops (F, B and W of every microbatch on every model stage) one problem may have: about 1.5 GB and
# half a minute to replay on one core; beyond it a replay would swap rather than answer.
MAX_OPS = 2_000_000
# The largest total of one step's op times and latencies, and of one device's activations of every
# microbatch, in the config's units: far beyond any real step, and small enough that the solver's integer
# ticks (and every sum of them) stay exact.
MAX_TOTAL = 1e15

Placement = Literal["loop", "v"]
PLACEMENTS: tuple[Placement, ...] = ("loop", "v")


class PipeplanError(ValueError):
    """An error the user can fix (bad input, an impossible request); the message says how. The command line
    turns these, and only these (with OSError), into exit status 2; anything else is a bug."""


class ConfigError(PipeplanError):
    """A user error in a problem or config: the message names the field, the bad value and the fix."""


def _short_repr() -> reprlib.Repr:
    """A repr that shows a few items per list, a few levels deep, so that it costs little on any value."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxtuple, short.maxdict = 3, 8, 8, 8
    short.maxstring, short.maxother, short.maxlong = 60, 60, 40
    return short


_SHORT_REPR = _short_repr()


def expect(name: str, value: object, kind: type | tuple[type, ...], what: str,
           error: type[PipeplanError] = ConfigError) -> None:
    """Raise ``error`` naming ``name`` unless ``value`` is an instance of ``kind`` (``what`` says what it must be
    and how to make one): a wrong type passed to the Python API gets a message, not an AttributeError deep
    inside."""
    if not isinstance(value, kind):
        raise error(f"{name} must be {what}, got {type(value).__name__} {shown(value, 60)}")


# What expect() says a problem must be.
A_PROBLEM = "a pipeplan.Problem (Problem.build(...), or load_config(path).problem)"


@contextlib.contextmanager
def fields_named_as(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a :class:`ConfigError` raised inside with every config field of ``names`` it mentions (e.g.
    "costs.forward") replaced by its name there: a function that takes keywords names them as its caller wrote
    them, not as a config file would."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(renamed(str(exc), names)) from None


def renamed(text: str, names: Mapping[str, str]) -> str:
    """``text`` with every config field of ``names`` it mentions (e.g. "memory.budget") replaced by its name
    there (see :func:`fields_named_as`)."""
    return re.sub(r"\b(?:pipeline|costs|memory|solver)\.\w+", lambda m: names.get(m[0], m[0]), text)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """" (did you mean 'backward'?)" when ``word`` is a text close to one of ``choices`` (a typo), else "".

    Case is ignored ('1F1B' means '1f1b'). A word that begins exactly one choice is that choice shortened:
    'H100' is 'h100-80gb', though by spelling it is closer to 'h200'. Several choices with that beginning ('a100')
    and every other word fall back to the closest spelling, and failing that to the name in parts whose first word
    is closest, when that word begins one choice only and no other first word is as close ('hiden' is
    'hidden_size'; 'size' or 'optimizer', a later word of one name, is no guess).
    """
    if not isinstance(word, str):
        return ""
    by_lower = {choice.lower(): choice for choice in choices}
    lower = word.lower()
    starting = [choice for choice in by_lower if lower and choice.startswith(lower)]
    close = starting if len(starting) == 1 else difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.75)
    if not close:  # the first word of a name in parts: 'hiden' is 'hidden_size'
        firsts: dict[str, list[str]] = {}
        for choice in by_lower:
            head = re.split(r"[_\-. ]", choice)[0]
            if head != choice and len(head) >= 3:
                firsts.setdefault(head, []).append(choice)
        scores = sorted(((difflib.SequenceMatcher(None, lower, head).ratio(), head) for head in firsts), reverse=True)
        if scores and scores[0][0] >= 0.8 and (len(scores) == 1 or scores[1][0] < scores[0][0]):
            holders = firsts[scores[0][1]]
            close = holders if len(holders) == 1 else []
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def python_reason(exc: BaseException, limit: int = 160) -> str:
    """Python's own reason for refusing a value (a whole number of more than 4300 digits, nesting too deep) for a
    message, without its advice to raise its limit, at most ``limit`` characters."""
    return shown(str(exc).split(";")[0], limit, quote=False)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless it is 1: "1 rank", "4 ranks" (``plural`` when not noun + "s")."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


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
    elif isinstance(value, str):
        return _shown_text(value, limit)
    else:
        text = _SHORT_REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# Characters that stand for the cut while a cut text is written by repr (which prints them as they are), the
# first that the text does not hold.
_CUT_MARKS = "\u2026\u00a4\u00a7\u00b6"


def _shown_text(value: str, limit: int) -> str:
    """A text's repr in at most ``limit`` characters: whole if it fits, else its start and end around "..."
    inside one pair of quotes (so that a cut text still reads as one quoted piece and shows how it ends); the end
    cut off instead when the text holds every mark of :data:`_CUT_MARKS`."""
    if len(value) <= limit and len(text := repr(value)) <= limit:
        return text
    mark = next((c for c in _CUT_MARKS if c not in value), None)
    for keep in range(min(len(value), limit), -1, -1):
        if mark is None:
            text = repr(value[:keep]) + "..."
        else:
            text = repr(value[:(keep + 1) // 2] + mark + value[len(value) - keep // 2:]).replace(mark, "...")
        if len(text) <= limit:
            return text
    return "..."[:max(limit, 0)]


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


def is_number(value: object) -> bool:
    """A real number (Python's, or a NumPy scalar, which registers as one), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np_bool_types()))


def np_bool_types() -> tuple[type, ...]:
    """NumPy's bool type when NumPy is loaded (it is not a Python bool but must not count as a number)."""
    numpy = sys.modules.get("numpy")
    return (numpy.bool_,) if numpy is not None else ()


def _as_count(name: str, value: object, minimum: int = 1) -> int:
    """``value`` as a whole number >= ``minimum`` (a Python or NumPy integer), else a :class:`ConfigError`."""
    if isinstance(value, float) and value.is_integer() and minimum <= value < 1e18:
        raise ConfigError(f"{name} must be a whole number >= {minimum} without a decimal point, got {value!r}; "
                          f"write {int(value)}")
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np_bool_types())):
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {shown(value)}")
    count = int(value)
    if count < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {shown(value)}")
    return count


def _expand(
    name: str,
    value: object,
    num_devices: int,
    num_chunks: int,
    split_over_chunks: bool,
    devices: Sequence[int],
    negative: str = "{name} must be >= 0, got {value}",
) -> tuple[float, ...]:
    """Turn a scalar, a per-device list (P values) or a per-stage list (P*v values) into one value per stage.

    ``devices[s]`` is the device of model stage s. A scalar or per-device value describes the device's whole
    share of the model; with ``split_over_chunks`` it is divided evenly across the device's chunks, so that
    changing ``num_chunks`` never changes the model. ``negative`` is the message for a value below 0 (``name``,
    the value's place, ``field`` and ``value`` filled in).
    """
    num_model_stages = num_devices * num_chunks
    value = plain_values(name, value)
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(value, (list, tuple)) and len(values) not in (num_devices, num_model_stages):
        accepted = f"{num_devices} (one per device)"
        if num_chunks > 1:
            accepted += f" or {num_model_stages} (one per model stage)"
        spaced = len(values) == 1 and _spaced_numbers(values[0])
        commas = f" (it holds one text, {shown(values[0])}: separate a list's numbers with commas)" if spaced else ""
        raise ConfigError(f"{name} has {counted(len(values), 'value')}{commas}; give a single "
                          f"number or a list of {accepted}")
    numbers: list[float] = []
    for position, item in enumerate(values):
        number = _as_float(name, item, "a finite number or a list of finite numbers")
        if number < 0:  # in a list, the value's place is named: costs.forward[1]
            where = f"{name}[{position}]" if isinstance(value, (list, tuple)) else name
            raise ConfigError(negative.format(name=where, field=name, value=shown(item)))
        numbers.append(number)
    if num_chunks > 1 and len(numbers) == num_model_stages:
        return tuple(numbers)
    per_device = numbers * num_devices if len(numbers) == 1 else numbers
    share = 1.0 / num_chunks if split_over_chunks else 1.0
    return tuple(per_device[devices[s]] * share for s in range(num_model_stages))


def plain_values(name: str, value: object) -> object:
    """A NumPy array or pandas Series as Python values, in position order (a Series' index is not read): one
    dimension as a list, none as its single value; a ``range`` as a list too; anything else unchanged. More
    dimensions (an array, a DataFrame) are a :class:`ConfigError`."""
    if isinstance(value, range):
        return list(value)
    dims = getattr(value, "ndim", None)
    if not isinstance(dims, int):
        return value
    if dims > 1:
        raise ConfigError(f"{name} must be a number or a list of numbers, got {type(value).__name__} of {dims} "
                          "dimensions")
    if not callable(getattr(value, "tolist", None)):
        return value
    return value.tolist()  # type: ignore[attr-defined]


def _check_size(num_model_stages: int, num_microbatches: int, kinds: int) -> None:
    """:class:`ConfigError` when the pipeline has more than :data:`MAX_OPS` ops (``kinds`` per microbatch and
    model stage), naming what to lower."""
    num_ops = num_model_stages * num_microbatches * kinds
    if num_ops <= MAX_OPS:
        return
    most = MAX_OPS // (num_model_stages * kinds)
    stages = MAX_OPS // (num_microbatches * kinds)
    if most >= 1:
        lower = f"lower pipeline.num_microbatches to at most {most} (or use fewer stages)"
    elif stages >= 1:
        lower = (f"use at most {stages:,} model stages (pipeline.num_stages x pipeline.num_chunks) with "
                 f"{num_microbatches} microbatches")
    else:
        lower = "lower both pipeline.num_stages and pipeline.num_microbatches"
    raise ConfigError(
        f"this pipeline has {num_ops:,} ops per step ({num_model_stages} model stages x {num_microbatches} "
        f"microbatches x {kinds} kinds); pipeplan replays at most {MAX_OPS:,}: {lower}"
    )


@dataclass(frozen=True)
class Problem:
    """A synchronous pipeline to schedule, in normalised form.

    Build one from user input with :meth:`Problem.build` (numbers or per-device / per-model-stage lists); the
    constructor takes the normalised form and checks it. Per-stage tuples have one value per *model* stage
    (``num_devices * num_chunks`` of them, in model order); ``budget`` has one value per device.

    The timing rules (what an op waits for) are :meth:`dependencies`; the memory rules (what an op allocates
    and releases) are :meth:`allocated_by` and :meth:`released_by`. Every other module asks these methods.
    """

    num_devices: int
    """P: pipeline devices (the config's ``pipeline.num_stages``, the pipeline depth)."""
    num_microbatches: int
    """N: microbatches per optimizer step."""
    forward: tuple[float, ...]
    """Per model stage: time of one forward pass (F), in the config's time unit."""
    backward: tuple[float, ...]
    """Per model stage: time of the full backward, or of the input-gradient pass (B) when the backward is split."""
    backward_weight: tuple[float, ...]
    """Per model stage: time of the weight-gradient pass (W); 0 everywhere means the backward is not split."""
    comm: tuple[float, ...]
    """Per model stage: latency of the link to the next model stage when it is on another device; occupies no
    device."""
    activation: tuple[float, ...]
    """Per model stage: memory a forward allocates when it starts, in the memory unit."""
    weight_activation: tuple[float, ...]
    """Per model stage: the part of ``activation`` kept until W ends (split backward only); B releases the rest."""
    budget: tuple[float, ...] | None = None
    """Per device: live activation memory limit, in the memory unit; None means unlimited."""
    num_chunks: int = 1
    """v: model chunks (virtual stages) per device."""
    placement: Placement = "loop"
    """How model stages map to devices with chunks: 'loop' (stage c*P + d on device d) or 'v' (two chunks;
    device d holds stages d and 2P-1-d)."""

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
        """Build a validated problem from user input.

        ``num_stages`` is the number of pipeline devices P. Cost and memory values accept a number (every stage
        alike), a list of P values (per device: the device's whole share, split evenly over its chunks, so that
        changing ``num_chunks`` never changes the model) or, with chunks, a list of P * num_chunks values (per
        model stage). ``comm`` is per link and is not split. ``budget`` is a number or a list of P values.
        Errors name the config field, the bad value and what is accepted.
        """
        num_devices = _as_count("pipeline.num_stages", num_stages)
        _as_count("pipeline.num_microbatches", num_microbatches)
        num_chunks = _as_count("pipeline.num_chunks", num_chunks)
        # Before any per-stage list is built; B and W count as two kinds when some backward_weight is positive.
        weights = plain_values("costs.backward_weight", backward_weight)
        weights = weights if isinstance(weights, (list, tuple)) else [weights]
        split = any(isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0 for w in weights)
        _check_size(num_devices * num_chunks, num_microbatches, 3 if split else 2)
        checked_placement = _check_placement(placement, num_chunks)
        devices = _devices_of_stages(num_devices, num_chunks, checked_placement)

        def expand(name: str, value: object, split: bool = True) -> tuple[float, ...]:
            return _expand(name, value, num_devices, num_chunks, split, devices)

        return cls(
            num_devices=num_devices,
            num_microbatches=num_microbatches,
            forward=expand("costs.forward", forward),
            backward=expand("costs.backward", backward),
            backward_weight=expand("costs.backward_weight", backward_weight),
            comm=expand("costs.comm", comm, split=False),
            activation=expand("memory.activation", activation),
            weight_activation=expand("memory.weight_activation", weight_activation),
            budget=_expand_budget(budget, num_devices),
            num_chunks=num_chunks,
            placement=checked_placement,
        )

    def with_budget(self, budget: PerStage | None) -> Problem:
        """The same pipeline under another budget (a number, a list of one value per device, or None)."""
        return replace(self, budget=_expand_budget(budget, self.num_devices))

    def __post_init__(self) -> None:
        _as_count("pipeline.num_stages", self.num_devices)
        _as_count("pipeline.num_microbatches", self.num_microbatches)
        _as_count("pipeline.num_chunks", self.num_chunks)
        _check_placement(self.placement, self.num_chunks)
        for name, label in _PER_STAGE_FIELDS.items():
            values = getattr(self, name)
            if len(values) != self.num_model_stages:
                raise ConfigError(
                    f"{label} has {len(values)} values, expected {self.num_model_stages} (one per model stage); "
                    "use Problem.build for per-device values"
                )
            for value in values:
                _check_value(label, value)
        weights = self.backward_weight
        if any(w > 0 for w in weights) and not all(w > 0 for w in weights):
            raise ConfigError(
                f"costs.backward_weight must be > 0 on every stage or 0 on every stage, got {list(weights)}; "
                "0 means the backward is not split into B and W"
            )
        # With chunks the values are per model stage: a number in the config was split over the chunks.
        split = f" (per chunk: a device's values are split over its {self.num_chunks} chunks)" \
            if self.num_chunks > 1 else ""
        for s, (act, wact) in enumerate(zip(self.activation, self.weight_activation)):
            if wact > act * (1 + 1e-12):
                # Enough digits that the two differ as printed (1.0000001 read as 1 beside 1).
                digits = next((d for d in range(6, 18) if f"{wact:.{d}g}" != f"{act:.{d}g}"), 17)
                raise ConfigError(
                    f"memory.weight_activation ({wact:.{digits}g}) is above memory.activation ({act:.{digits}g}) on "
                    f"stage {s}{split}; it is the part of the activation kept until W, so it must be <= activation"
                )
            if wact > 0 and not self.split_backward:
                raise ConfigError(
                    f"memory.weight_activation is {wact:g}{split} but the backward is not split (costs.backward_weight "
                    "is 0); set weight_activation to 0 or give backward_weight a positive time"
                )
        for s in range(self.num_model_stages):
            if self.forward[s] + self.backward[s] + weights[s] <= 0:
                raise ConfigError(f"stage {s} has zero forward and backward time; give costs.forward > 0")
        _check_size(self.num_model_stages, self.num_microbatches, len(self.kinds))
        if self.total_time() > MAX_TOTAL:
            raise ConfigError(
                f"one step's op times and latencies add up to {self.total_time():.3g}, above {MAX_TOTAL:g} in the "
                "config's time unit; express costs.* in a larger unit (e.g. ms instead of ns)"
            )
        held = max(self.num_microbatches * self.footprint(d) for d in range(self.num_devices))
        if held > MAX_TOTAL:
            raise ConfigError(
                f"every microbatch's activations on one device add up to {held:.3g}, above {MAX_TOTAL:g} in the "
                "config's memory unit; express memory.* in a larger unit (e.g. MiB instead of bytes)"
            )
        if self.budget is not None:
            if len(self.budget) != self.num_devices:
                raise ConfigError(
                    f"memory.budget has {len(self.budget)} values, expected {self.num_devices} (one per device)"
                )
            for d, limit in enumerate(self.budget):
                _check_value("memory.budget", limit)
                need = max(self.activation[s] for s in self.stages_on_device(d))
                if limit >= need * (1 - 1e-12):
                    continue
                if self.num_chunks > 1:
                    # The least budget that admits a schedule is one microbatch on all the device's chunks: say
                    # that one, so that the fix suggested is enough.
                    raise ConfigError(
                        f"memory.budget ({limit:g}) on device {d} is below one chunk's activation ({need:g}, "
                        f"memory.activation split over its {self.num_chunks} chunks): no forward could ever run; "
                        f"raise memory.budget to at least {self.footprint(d):g}, what one microbatch holds on "
                        "the device across its chunks"
                    )
                raise ConfigError(
                    f"memory.budget ({limit:g}) on device {d} is below one activation ({need:g}): "
                    "no forward could ever run; raise memory.budget to at least that"
                )

    # Derived facts, computed once per problem (a frozen dataclass without slots keeps them in its __dict__).

    def __getstate__(self) -> dict[str, object]:
        """For pickling (a problem sent to a worker process): the fields only. The facts derived from them are
        computed again where they are needed; a large problem's dependency table is megabytes."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @cached_property
    def split_backward(self) -> bool:
        """True when the backward is split into B (input gradient) and W (weight gradient)."""
        return any(w > 0 for w in self.backward_weight)

    @cached_property
    def kinds(self) -> tuple[OpKind, ...]:
        """The op kinds each (stage, microbatch) has: F, B and, with a split backward, W."""
        return (OpKind.F, OpKind.B, OpKind.W) if self.split_backward else (OpKind.F, OpKind.B)

    @cached_property
    def _devices(self) -> tuple[int, ...]:
        """The device of each model stage."""
        return _devices_of_stages(self.num_devices, self.num_chunks, self.placement)

    @cached_property
    def _stages_by_device(self) -> tuple[tuple[int, ...], ...]:
        """The model stages of each device, in model order."""
        stages: list[list[int]] = [[] for _ in range(self.num_devices)]
        for s, d in enumerate(self._devices):
            stages[d].append(s)
        return tuple(tuple(found) for found in stages)

    @property
    def num_model_stages(self) -> int:
        """Model stages in all: num_devices * num_chunks."""
        return self.num_devices * self.num_chunks

    def device_of(self, stage: int) -> int:
        """The device that runs model stage ``stage``."""
        return self._devices[stage]

    def chunk_of(self, stage: int) -> int:
        """Which of its device's chunks model stage ``stage`` is (both placements put chunk c at stages cP..cP+P-1)."""
        return stage // self.num_devices

    def stages_on_device(self, device: int) -> list[int]:
        """The model stages on ``device`` in model order."""
        return list(self._stages_by_device[device])

    def op(self, kind: OpKind, stage: int, microbatch: int) -> Op:
        """The op record for (kind, stage, microbatch), with its chunk filled in."""
        return Op(kind, stage, microbatch, self.chunk_of(stage))

    # The timing rules.

    def duration(self, op: Op) -> float:
        """Time of ``op`` in the config's time unit."""
        if op.kind is OpKind.F:
            return self.forward[op.stage]
        if op.kind is OpKind.B:
            return self.backward[op.stage]
        return self.backward_weight[op.stage]

    def link_latency(self, stage: int) -> float:
        """Latency between model stages ``stage`` and ``stage + 1`` (either direction); 0 on the same device."""
        if stage + 1 >= self.num_model_stages or self.device_of(stage) == self.device_of(stage + 1):
            return 0.0
        return self.comm[stage]

    def dependencies(self, op: Op) -> list[tuple[Op, float]]:
        """The ops that must end before ``op`` starts, each with the latency that follows it.

        F(s, m) follows F(s-1, m); B(s, m) follows B(s+1, m), or F(s, m) on the last model stage; W(s, m)
        follows B(s, m). A latency applies only between stages on different devices.
        """
        s, m = op.stage, op.microbatch
        if op.kind is OpKind.F:
            return [] if s == 0 else [(self.op(OpKind.F, s - 1, m), self.link_latency(s - 1))]
        if op.kind is OpKind.B:
            if s == self.num_model_stages - 1:
                return [(self.op(OpKind.F, s, m), 0.0)]
            return [(self.op(OpKind.B, s + 1, m), self.link_latency(s))]
        return [(self.op(OpKind.B, s, m), 0.0)]

    def all_ops(self) -> list[Op]:
        """Every op of one optimizer step, stage by stage, microbatch by microbatch."""
        return [
            self.op(kind, s, m)
            for s in range(self.num_model_stages)
            for m in range(self.num_microbatches)
            for kind in self.kinds
        ]

    # Op numbers: where speed matters (the replay) a list indexed by them stands in for a dict keyed by ops, whose
    # hashing (a dataclass and an enum, both in Python) cost more than the replay itself.

    def op_number(self, op: Op) -> int:
        """A number of its own for ``op``, in 0 .. 3 * num_model_stages * num_microbatches - 1."""
        kind = op.kind
        code = 0 if kind is OpKind.F else 1 if kind is OpKind.B else 2
        return (code * self.num_devices * self.num_chunks + op.stage) * self.num_microbatches + op.microbatch

    @property
    def num_op_numbers(self) -> int:
        """How many numbers :meth:`op_number` can give (every kind counted, whether the problem has it or not)."""
        return 3 * self.num_model_stages * self.num_microbatches

    @cached_property
    def numbered_dependency(self) -> tuple[array[int], array[float]]:
        """:meth:`dependencies` by :meth:`op_number`, in two compact arrays: entry ``op_number(op)`` of the first
        holds ``op_number(dep)`` of ``op``'s one dependency (-1 when it has none, as F on the first stage, or when
        the problem has no ops of its kind), of the second the latency after it. The same rule as
        :meth:`dependencies` (every op waits for at most one other), written on numbers so that no op is made (a
        test holds the two equal); arrays, since a table of tuples took 0.6 KB an op."""
        stages, n = self.num_model_stages, self.num_microbatches
        latency = [self.link_latency(s) for s in range(stages)]
        dependency = array("q", [-1]) * self.num_op_numbers
        lag = array("d", [0.0]) * self.num_op_numbers
        backward = stages * n  # the first number of B (F's come first, W's after B's)
        for s in range(stages):
            f, b = s * n, backward + s * n  # F(s, 0) and B(s, 0)
            for m in range(n):
                if s > 0:
                    dependency[f + m], lag[f + m] = f - n + m, latency[s - 1]
                if s == stages - 1:
                    dependency[b + m] = f + m
                else:
                    dependency[b + m], lag[b + m] = b + n + m, latency[s]
                if self.split_backward:
                    dependency[b + stages * n + m] = b + m
        return dependency, lag

    def ops_in_dependency_order(self, microbatches: Sequence[int] | None = None) -> list[Op]:
        """The ops of ``microbatches`` (all when None) so that each comes after its dependency: forwards up the
        stages, backwards down, then W."""
        stages = range(self.num_model_stages)
        mbs = range(self.num_microbatches) if microbatches is None else microbatches
        ops = [self.op(OpKind.F, s, m) for s in stages for m in mbs]
        ops += [self.op(OpKind.B, s, m) for s in reversed(stages) for m in mbs]
        if self.split_backward:
            ops += [self.op(OpKind.W, s, m) for s in stages for m in mbs]
        return ops

    # The memory rules.

    def allocated_by(self, kind: OpKind, stage: int) -> float:
        """Memory an op of ``kind`` on model ``stage`` allocates when it starts: F its stage's activation."""
        return self.activation[stage] if kind is OpKind.F else 0.0

    def released_by(self, kind: OpKind, stage: int) -> float:
        """Memory an op of ``kind`` on model ``stage`` releases when it ends.

        Unsplit, B releases the whole activation; split, B releases activation - weight_activation and W the
        weight_activation it kept for the weight gradient. Live intervals are half-open: a release at time t
        happens before an allocation at t.
        """
        if kind is OpKind.F:
            return 0.0
        if kind is OpKind.W:
            return self.weight_activation[stage]
        if self.split_backward:
            return self.activation[stage] - self.weight_activation[stage]
        return self.activation[stage]

    def footprint(self, device: int) -> float:
        """Memory one microbatch holds on ``device`` at once: its activations on all the device's chunks.

        A microbatch's forward on a device's first chunk stays live until its backward there, which needs its
        forwards on every later chunk of that device, so this is also the least budget that admits a schedule.
        """
        return sum(self.activation[s] for s in self.stages_on_device(device))

    def max_in_flight(self, device: int) -> int | None:
        """How many microbatches' activations of one stage the budget lets ``device`` hold; None if unlimited.

        Counted with the largest activation among the device's stages, and never below 1 (construction checks
        that one activation fits).
        """
        if self.budget is None:
            return None
        act = max(self.activation[s] for s in self.stages_on_device(device))
        if act <= 0:
            return None
        return max(1, int(math.floor(self.budget[device] / act + 1e-9)))

    def total_time(self) -> float:
        """Every op time of one step plus every latency a microbatch crosses twice (down and back up): no
        schedule's makespan exceeds it."""
        ops = sum(self.forward) + sum(self.backward) + sum(self.backward_weight)
        return self.num_microbatches * (ops + 2 * sum(self.comm))

    def device_work(self, device: int) -> float:
        """Total op time on ``device`` for one step."""
        return self.num_microbatches * sum(
            self.forward[s] + self.backward[s] + self.backward_weight[s] for s in self.stages_on_device(device)
        )

    def with_layout(self, num_chunks: int, placement: str) -> Problem:
        """The same model cut into ``num_chunks`` chunks per device in ``placement``.

        Each device keeps its whole share (the sum over its chunks of costs and activations; its links keep
        their latency), split evenly over the new chunks; budgets are per device and stay.
        """
        devices = range(self.num_devices)

        def per_device(values: tuple[float, ...]) -> list[float]:
            return [sum(values[s] for s in self.stages_on_device(d)) for d in devices]

        return Problem.build(
            num_stages=self.num_devices,
            num_microbatches=self.num_microbatches,
            num_chunks=num_chunks,
            placement=placement,
            forward=per_device(self.forward),
            backward=per_device(self.backward),
            backward_weight=per_device(self.backward_weight),
            comm=[self.comm[min(self.stages_on_device(d))] for d in devices],
            activation=per_device(self.activation),
            weight_activation=per_device(self.weight_activation),
            budget=None if self.budget is None else list(self.budget),
        )


# Per-stage field -> its name in a config file, which error messages use.
_PER_STAGE_FIELDS = {
    "forward": "costs.forward",
    "backward": "costs.backward",
    "backward_weight": "costs.backward_weight",
    "comm": "costs.comm",
    "activation": "memory.activation",
    "weight_activation": "memory.weight_activation",
}


def _as_float(name: str, value: object, what: str = "a finite number") -> float:
    """``value`` as a float, or a :class:`ConfigError` naming ``name`` when it is not a finite number (including
    a whole number too large for a float)."""
    if not is_number(value):
        commas = "; separate a list's numbers with commas, e.g. [1, 2]" if _spaced_numbers(value) else ""
        raise ConfigError(f"{name} must be {what}, got {shown(value)}{commas}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise ConfigError(f"{name} must be {what}, got {shown(value)}, too large for a number; express it in a "
                          "larger unit") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be {what}, got {shown(value)}")
    return number


def _spaced_numbers(value: object) -> bool:
    """Whether ``value`` is a text of several numbers separated by spaces: YAML reads ``[1 1 2]`` as a list of one
    text, and ``1 1 2`` as a text."""
    if not isinstance(value, str) or len(value.split()) < 2:
        return False
    try:
        [float(part.strip(",")) for part in value.split()]
    except ValueError:
        return False
    return True


def _check_value(name: str, value: object) -> None:
    number = _as_float(name, value)
    if number < 0:
        raise ConfigError(f"{name} must be >= 0, got {shown(value)}")
    if number > MAX_TOTAL and name != "memory.budget":
        raise ConfigError(f"{name} ({number:g}) is above {MAX_TOTAL:g}; express it in a larger unit")


def _check_placement(placement: object, num_chunks: int) -> Placement:
    if placement == "loop":
        return "loop"
    if placement == "v":
        if num_chunks != 2:
            raise ConfigError(f"pipeline.placement 'v' needs num_chunks: 2, got num_chunks: {num_chunks}")
        return "v"
    raise ConfigError(f"pipeline.placement must be one of {', '.join(PLACEMENTS)}, got {shown(placement)}")


def _expand_budget(budget: PerStage | None, num_devices: int) -> tuple[float, ...] | None:
    if budget is None:
        return None
    return _expand("memory.budget", budget, num_devices, 1, False, tuple(range(num_devices)),
                   negative="{name} must be positive, got {value} (the activation memory a device may hold; leave "
                   "{field} out for no limit)")


def _devices_of_stages(num_devices: int, num_chunks: int, placement: str) -> tuple[int, ...]:
    return tuple(_device_of_stage(s, num_devices, num_chunks, placement) for s in range(num_devices * num_chunks))


def _device_of_stage(stage: int, num_devices: int, num_chunks: int, placement: str) -> int:
    chunk, offset = divmod(stage, num_devices)
    if placement == "v" and chunk % 2 == 1:
        return num_devices - 1 - offset
    return offset
