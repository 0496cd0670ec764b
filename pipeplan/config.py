"""Load a YAML config file into a validated :class:`Problem` plus the settings of the steps that follow.

The file format is a contract (see README): later versions add keys, never rename them. Unknown keys are
errors, so that a typo is never silently ignored.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeplan.problem import (
    ConfigError,
    Problem,
    did_you_mean,
    expect,
    is_number,
    plain_values,
    python_reason,
    shown,
)
from pipeplan.reading import SMALL_FILE_BYTES, read_source

log = logging.getLogger(__name__)

Objective = Literal["makespan", "stage_span"]
OBJECTIVES: tuple[Objective, ...] = ("makespan", "stage_span")
# CP-SAT's own ranges for its parameters (outside them it answers MODEL_INVALID or fails to convert the value).
MAX_WORKERS = 10_000
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class SolverSettings:
    """How the CP-SAT optimizer runs (config section ``solver``)."""

    objective: Objective = "makespan"
    """'makespan' (step ends when every device is done) or 'stage_span' (largest per-device span)."""
    time_limit_s: float = 60.0
    """Wall-clock limit of one solve, in seconds."""
    num_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    """CP-SAT search workers; 1 with a fixed seed gives reproducible answers."""
    random_seed: int = 0
    """CP-SAT's random seed."""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"solver.objective must be one of {', '.join(OBJECTIVES)}, got {shown(self.objective)}")
        if isinstance(self.time_limit_s, bool) or not isinstance(self.time_limit_s, (int, float)) or not (
            0 < self.time_limit_s < float("inf")
        ):
            raise ConfigError(
                f"solver.time_limit_s must be a positive number of seconds, got {shown(self.time_limit_s)}"
            )
        if (isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int)
                or not 1 <= self.num_workers <= MAX_WORKERS):
            raise ConfigError(
                f"solver.num_workers must be a whole number from 1 to {MAX_WORKERS}, got {shown(self.num_workers)}"
            )
        if (isinstance(self.random_seed, bool) or not isinstance(self.random_seed, int)
                or not 0 <= self.random_seed <= MAX_SEED):
            raise ConfigError(
                f"solver.random_seed must be a whole number from 0 to {MAX_SEED}, got {shown(self.random_seed)}"
            )


@dataclass(frozen=True)
class Units:
    """Names of the config's units, used only for display."""

    time: str = "units"
    memory: str = "slots"


@dataclass(frozen=True)
class Config:
    """A loaded config: a name for reports, the problem, and each later step's own settings."""

    name: str
    problem: Problem
    solver: SolverSettings = field(default_factory=SolverSettings)
    units: Units = field(default_factory=Units)


# section -> (key in the file -> Problem keyword); None marks a section read elsewhere.
_PROBLEM_KEYS: dict[str, dict[str, str]] = {
    "pipeline": {
        "num_stages": "num_stages",
        "num_microbatches": "num_microbatches",
        "num_chunks": "num_chunks",
        "placement": "placement",
    },
    "costs": {
        "forward": "forward",
        "backward": "backward",
        "backward_weight": "backward_weight",
        "comm": "comm",
        "profile": "profile",
    },
    "memory": {
        "activation": "activation",
        "weight_activation": "weight_activation",
        "budget": "budget",
    },
}
_SECTIONS = ("name", *_PROBLEM_KEYS, "solver", "units")
_REQUIRED = ("num_stages", "num_microbatches")


# Limits that keep loading bounded on any input: the file's size, the number of values after expanding
# aliases (a few "billion laughs" lines expand to 10^9), and nesting depth. A real config is a few KB with at
# most a few values per stage.
MAX_CONFIG_BYTES = SMALL_FILE_BYTES
MAX_CONFIG_VALUES = 20_000
MAX_CONFIG_DEPTH = 20

# Where a message sends a user for a config's layout: the README section, which every copy of pipeplan has
# (the example files under models/ exist only in a checkout of the repository).
LAYOUT_HINT = ("the layout is in pipeplan's README, 'Config reference'; examples in the repository's models/, "
               "e.g. models/seed-8x64.yaml")

# YAML 1.2's numbers (its core schema). PyYAML follows YAML 1.1, which reads 010 as octal (8), 1:30 as base 60
# (90) and 0b11 as binary, all silently, and needs a dot and a signed exponent in a float, so that 3e-2 and 1e308
# are text. Here, as in YAML 1.2, integers are decimal (leading zeros and all: 010 is 10), 0o17 octal and 0x1f
# hexadecimal, and 1:30 and 0b11 are text (which a number field then refuses by name); underscores after a
# number's first digit are kept from PyYAML and ignored (1_000 is a thousand), which YAML 1.2 does not have.
_INT_12 = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7][0-7_]*|0x[0-9a-fA-F][0-9a-fA-F_]*)$")
_FLOAT_12 = re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _ConfigLoader(yaml.SafeLoader):
    """A safe YAML loader with bounded work, YAML 1.2 numbers, and clear errors for keys given twice or not names.

    Counts every value as it is composed, each use of an alias (``*name``) counting the whole value it stands
    for, and stops at :data:`MAX_CONFIG_VALUES`; stops at :data:`MAX_CONFIG_DEPTH` levels of nesting.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.num_values = 0
        self.depth = 0
        self.sizes: dict[int, int] = {}  # keyed by id of a composed node: values in it, aliases expanded

    def _count(self, values: int, mark: Any) -> None:
        self.num_values += values
        if self.num_values > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"{_where(mark)}the file holds more than {MAX_CONFIG_VALUES} values (each use of an alias *name "
                "counts the whole value it stands for); a config or study needs a few per stage: look for a "
                "runaway list or alias"
            )

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)  # an unknown alias is PyYAML's own error
            if target is not None:
                size = self.sizes.get(id(target))
                if size is None:
                    raise ConfigError(f"{_where(event.start_mark)}alias *{shown(event.anchor, quote=False)} is used "
                                      "inside the value it names; write that value out instead")
                self._count(size, event.start_mark)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{_where(event.start_mark)}values are nested more than {MAX_CONFIG_DEPTH} levels "
                              "deep; a config or study needs three (section, key, list): check the brackets")
        before = self.num_values
        node = super().compose_node(parent, index)
        self.depth -= 1
        self._count(1, event.start_mark)
        self.sizes[id(node)] = self.num_values - before
        return node

    def construct_scalar(self, node: yaml.ScalarNode | yaml.MappingNode) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str):
            control = next((c for c in value if c not in "\t\n" and unicodedata.category(c) == "Cc"), None)
            if control is not None:
                raise ConfigError(f"{_where(node.start_mark)}the text {shown(value, 60)} holds the control character "
                                  f"U+{ord(control):04X}; remove it (names and units are printed to terminals, "
                                  "where it would act)")
        return value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # '<<: *base' merges base's keys; keys written here take precedence over them
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if isinstance(key, (list, dict)):
                raise ConfigError(f"line {line}: a {'list' if isinstance(key, list) else 'mapping'} is used as a "
                                  "key; keys are names such as num_stages: write 'name: value'")
            if key in seen:
                raise ConfigError(f"line {line}: key {shown(key)} is given twice; keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _int_12(loader: _ConfigLoader, node: yaml.ScalarNode) -> int:
    """An integer as YAML 1.2 reads it (see :data:`_INT_12`; an explicit ``!!int`` tag on any other text is
    refused with its line)."""
    written = str(loader.construct_scalar(node))
    if not _INT_12.match(written):
        raise ConfigError(f"{_where(node.start_mark)}{shown(written, 40)} is tagged !!int but is not a whole number "
                          "(digits, or 0o for octal, 0x for hexadecimal); fix the value or drop the tag")
    text = written.replace("_", "")
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    base = {"0o": 8, "0x": 16}.get(digits[:2], 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


# YAML 1.1's ints, floats and timestamps give way to YAML 1.2's numbers, tried before every other plain scalar
# form (a float's form also matches a whole number, which is an int); a date such as 2024-01-01 is text, as in
# YAML 1.2's core schema, where PyYAML would make it a date object that no field takes.
_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for first in "-+0123456789.":
    _ConfigLoader.yaml_implicit_resolvers.setdefault(first, [])[:0] = [(_INT_TAG, _INT_12), (_FLOAT_TAG, _FLOAT_12)]
del first
_ConfigLoader.add_constructor(_INT_TAG, _int_12)


def _where(mark: Any) -> str:
    return "" if mark is None else f"line {mark.line + 1}: "


# Fields whose single number or per-device list is a device's share, split over its chunks (comm is per link):
# config field -> Problem.build's keyword, and whether its default counts as given (the costs' do: a
# per-model-stage forward beside the default backward mixes the two forms; the memory's default, one activation a
# device, is the unit the budget counts in).
_SPLIT_FIELDS = {"costs.forward": ("forward", True), "costs.backward": ("backward", True),
                 "costs.backward_weight": ("backward_weight", False), "memory.activation": ("activation", False),
                 "memory.weight_activation": ("weight_activation", False)}


def warn_mixed_forms(kwargs: dict[str, Any], problem: Problem, names: Mapping[str, str] | None = None) -> None:
    """Warn when, with chunks, some fields list one value per model stage and others give a device's share (a
    number or a per-device list, split over the device's chunks): ``backward_weight: 0.25`` beside an 8-value
    ``forward`` is 0.125 a model stage, not 0.25 as the list's form suggests. ``kwargs`` are Problem.build's, the
    profile's costs included; ``names`` maps config fields to the names the caller's user knows them by (e.g. the
    keywords of :func:`pipeplan.planner.plan`). Zeros mean the same either way."""
    if problem.num_chunks == 1:
        return
    defaults = inspect.signature(Problem.build).parameters
    per_stage: list[str] = []
    shares: list[str] = []
    example = ""  # the first share's first nonzero value, split: "backward 2 is 1 a model stage"
    for name, (keyword, default_counts) in _SPLIT_FIELDS.items():
        if keyword not in kwargs and not default_counts:
            continue
        default = defaults[keyword].default
        value = plain_values(name, kwargs.get(keyword, default))
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if not any(is_number(v) and float(v) != 0 for v in values):  # type: ignore[arg-type]  # zeros: either way
            continue
        shown_name = (names or {}).get(name, name)
        label = shown_name if keyword in kwargs else f"{shown_name} (its default, {default:g})"
        if len(values) == problem.num_model_stages:
            per_stage.append(label)
        else:
            shares.append(label)
            if not example:
                share = next(float(v) for v in values if is_number(v) and float(v) != 0)  # type: ignore[arg-type]
                example = f"{shown_name} {share:g} is {share / problem.num_chunks:g} a model stage"
    if per_stage and shares:
        log.warning("%s list%s one value per model stage, taken as written, while %s %s each device's share, split "
                    "over its %d chunks (%s): give every such field in one form",
                    ", ".join(per_stage), "" if len(per_stage) > 1 else "s", ", ".join(shares),
                    "are" if len(shares) > 1 else "is", problem.num_chunks, example)


def warn_unused_comm(comm: object, problem: Problem) -> None:
    """Warn about each nonzero value of a per-model-stage ``costs.comm`` list that no transfer uses: ``comm[s]`` is
    the latency of the link after model stage s, and there is none after the last stage, nor at V placement's turn
    (its two middle stages are on one device), so a value there has no effect, and a list such as ``[0.1, 0.2,
    0.3, 0.4]`` on four devices may have been meant for other links. Only said: the values stay. A list whose
    nonzero values are all alike is one latency written out and is not warned about: the config record of a run
    with chunks writes a single number so, and sizing's best.yaml its one latency with 0 after the last stage. A
    per-device list with chunks serves the links after each chunk of its device, some of which cross devices."""
    value = plain_values("costs.comm", comm)
    if not isinstance(value, (list, tuple)) or len(value) != problem.num_model_stages:
        return
    if len({float(v) for v in value if float(v) != 0}) <= 1:  # Problem.build has checked they are numbers
        return
    last = problem.num_model_stages - 1
    for stage, latency in enumerate(value):
        if float(latency) == 0:
            continue
        if stage == last:
            why = f"model stage {stage} is the last, with no link after it"
        elif problem.device_of(stage) == problem.device_of(stage + 1):
            turn = " (the turn of the V placement)" if problem.placement == "v" else ""
            why = (f"model stages {stage} and {stage + 1} are both on device {problem.device_of(stage)}{turn}, and "
                   "a latency applies only between devices")
        else:
            continue
        log.warning("costs.comm[%d] is %g but is not used: %s (comm[s] is the link from model stage s to s + 1); "
                    "set it to 0, or move it to the link it was meant for", stage, latency, why)


def _section(data: dict[str, Any], name: str, keys: tuple[str, ...] | list[str]) -> dict[str, Any]:
    value = data.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping of {', '.join(keys)}, got {shown(value)}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise ConfigError(
            f"unknown key {name}.{shown(unknown[0], quote=False)}{did_you_mean(unknown[0], keys)}; valid keys in "
            f"{name}: {', '.join(keys)}"
        )
    return value


# The first cell of a torch schedule CSV (0F0, 3I2, or an overlapped pair "(0F3;3B1)OVERLAP_F_B"), which YAML reads
# as one text.
_ACTION_CELL = re.compile(r"\s*\(?\d+[FIBW]\d+\b")


def checked_name(name: object) -> str:
    """``name`` (a config's or a study's), or :class:`ConfigError` unless it is a non-empty text; a number or a
    yes/no that YAML read from a plain scalar is told to be quoted."""
    if isinstance(name, str) and name:
        return name
    quote = (f"; YAML read it as {'true or false' if isinstance(name, bool) else 'a number'}: put the name in "
             "quotes" if isinstance(name, (bool, int, float)) else "")
    raise ConfigError(f"name must be a non-empty text, got {shown(name)}{quote}")


def config_from_dict(data: object, default_name: str = "pipeline", ignore_budget: bool = False,
                     base: Path | None = None) -> Config:
    """Validate a parsed config (the YAML's top-level mapping) and build a :class:`Config`.

    ``ignore_budget`` drops ``memory.budget`` (after checking the section's keys), for a sweep that sets its own.
    ``base`` is the folder a relative ``costs.profile`` path is read from (the config file's; default: the
    working directory).
    """
    if not isinstance(data, dict):
        torch_csv = (" (this looks like a torch schedule CSV: replay it with 'pipeplan simulate CONFIG "
                     "--from-torch-csv FILE')" if isinstance(data, str) and _ACTION_CELL.match(data) else "")
        raise ConfigError(
            f"the top level must be a mapping with keys {', '.join(_SECTIONS)}, got {type(data).__name__}{torch_csv}"
        )
    unknown = [k for k in data if k not in _SECTIONS]
    if unknown:
        study = " (this looks like a sizing study: run it with 'pipeplan size FILE')" if "model" in data else ""
        raise ConfigError(f"unknown top-level key {shown(unknown[0])}{did_you_mean(unknown[0], _SECTIONS)}; valid "
                          f"keys: {', '.join(_SECTIONS)}{study}")
    kwargs: dict[str, Any] = {}
    for section, keys in _PROBLEM_KEYS.items():
        for key, value in _section(data, section, list(keys)).items():
            kwargs[keys[key]] = value
    if ignore_budget:
        kwargs.pop("budget", None)
    if "profile" in kwargs:
        from pipeplan.stage_profile import profile_costs

        profile = kwargs.pop("profile")
        layout = (kwargs.get("num_stages"), kwargs.get("num_chunks", 1))
        kwargs.update(profile_costs(profile, base, given=tuple(kwargs), layout=layout))
    for key in _REQUIRED:
        if key not in kwargs:
            raise ConfigError(f"pipeline.{key} is missing; add it under 'pipeline:' (a whole number >= 1)")
    problem = Problem.build(**kwargs)
    warn_mixed_forms(kwargs, problem)
    warn_unused_comm(kwargs.get("comm", 0.0), problem)
    solver = SolverSettings(**_section(data, "solver", [f for f in SolverSettings.__dataclass_fields__]))
    units_raw = _section(data, "units", ["time", "memory"])
    for key, value in units_raw.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"units.{key} must be a text such as 'ms' or 'GiB', got {shown(value)}; it names "
                              f"the {key} unit in tables and charts (leave the key out for the default)")
    name = checked_name(data.get("name", default_name))
    return Config(name=name, problem=problem, solver=solver, units=Units(**units_raw))


def load_yaml(text: str, hint: str = LAYOUT_HINT) -> Any:
    """Parse a config's (or a study's, a model's) YAML text with bounded work (see :data:`MAX_CONFIG_VALUES`).

    Plain scalars follow YAML 1.1 as PyYAML reads them, except numbers and dates, which follow YAML 1.2: floats
    such as ``3e-2`` and ``1e308`` are numbers, ``010`` is ten, ``1:30`` and ``2024-01-01`` are text;
    ``<<`` merge keys work; texts may not hold control characters but tab and newline.
    Raises :class:`ConfigError` with the line and the fix; ``hint`` says where the file's layout is described.
    """
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"YAML syntax error at {where}{shown(exc.problem, 200, quote=False)}; fix the file there "
                          f"({hint})") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow anywhere
        line = text[:exc.position].count("\n") + 1
        character = f"U+{exc.character:04X}" if isinstance(exc.character, int) else shown(exc.character)
        raise ConfigError(f"line {line}: the file holds the character {character}, which YAML does not allow; "
                          "remove it") from None
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())  # PyYAML's messages span lines
        raise ConfigError(f"YAML error: {shown(reason, 200, quote=False)}; fix the file ({hint})") from None
    except ConfigError:
        raise
    except ValueError as exc:  # e.g. Python's refusal to read a whole number of more than 4300 digits
        raise ConfigError(f"a value in the file cannot be read ({python_reason(exc)}); fix the file "
                          "(a config's numbers are small)") from None


def load_config(path: str | os.PathLike[str], ignore_budget: bool = False) -> Config:
    """Read and validate the YAML config at ``path`` (without its ``memory.budget`` if ``ignore_budget``); the text
    ``"-"`` reads it from the standard input (named "stdin" unless it sets ``name``; relative paths in it start
    from the working folder).

    Raises :class:`ConfigError` (a ``ValueError``) with a message that names the problem and how to fix it.
    """
    expect("path", path, (str, os.PathLike), "the path of a YAML config file")
    source = read_source(path, "config file", MAX_CONFIG_BYTES, larger="a config is a few KB: check that this is "
                         "the right file")
    data = load_yaml(source.text)
    if data is None:
        raise ConfigError(f"{source.named} is empty; write a config there ({LAYOUT_HINT})")
    return config_from_dict(data, default_name=source.name, ignore_budget=ignore_budget, base=source.base)
