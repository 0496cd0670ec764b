"""Load a YAML config file into a validated :class:`Problem` plus the settings of the steps that follow.

The file format is a contract (see README): later versions add keys, never rename them. Unknown keys are
errors, so that a typo is never silently ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pipeplan.problem import ConfigError, Problem

OBJECTIVES = ("makespan", "stage_span")
# CP-SAT's own ranges for its parameters (outside them it answers MODEL_INVALID or fails to convert the value).
MAX_WORKERS = 10_000
MAX_SEED = 2**31 - 1


@dataclass(frozen=True)
class SolverSettings:
    """How the CP-SAT optimizer runs (config section ``solver``)."""

    objective: str = "makespan"
    """'makespan' (step ends when every device is done) or 'stage_span' (largest per-device span)."""
    time_limit_s: float = 60.0
    """Wall-clock limit of one solve, in seconds."""
    num_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    """CP-SAT search workers; 1 with a fixed seed gives reproducible answers."""
    random_seed: int = 0
    """CP-SAT's random seed."""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"solver.objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if isinstance(self.time_limit_s, bool) or not isinstance(self.time_limit_s, (int, float)) or not (
            0 < self.time_limit_s < float("inf")
        ):
            raise ConfigError(f"solver.time_limit_s must be a positive number of seconds, got {self.time_limit_s!r}")
        if (isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int)
                or not 1 <= self.num_workers <= MAX_WORKERS):
            raise ConfigError(
                f"solver.num_workers must be a whole number from 1 to {MAX_WORKERS}, got {self.num_workers!r}"
            )
        if (isinstance(self.random_seed, bool) or not isinstance(self.random_seed, int)
                or not 0 <= self.random_seed <= MAX_SEED):
            raise ConfigError(
                f"solver.random_seed must be a whole number from 0 to {MAX_SEED}, got {self.random_seed!r}"
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects a key given twice in one mapping (the second would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise ConfigError(f"line {line}: key {key!r} is given twice; keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _section(data: dict[str, Any], name: str, keys: tuple[str, ...] | list[str]) -> dict[str, Any]:
    value = data.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping of {', '.join(keys)}, got {value!r}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise ConfigError(f"unknown key {name}.{unknown[0]}; valid keys in {name}: {', '.join(keys)}")
    return value


def config_from_dict(data: object, default_name: str = "pipeline", ignore_budget: bool = False,
                     base: Path | None = None) -> Config:
    """Validate a parsed config (the YAML's top-level mapping) and build a :class:`Config`.

    ``ignore_budget`` drops ``memory.budget`` (after checking the section's keys), for a sweep that sets its own.
    ``base`` is the folder a relative ``costs.profile`` path is read from (the config file's; default: the
    working directory).
    """
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a mapping with keys {', '.join(_SECTIONS)}, got {type(data).__name__}"
        )
    unknown = [k for k in data if k not in _SECTIONS]
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r}; valid keys: {', '.join(_SECTIONS)}")
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
    solver = SolverSettings(**_section(data, "solver", [f for f in SolverSettings.__dataclass_fields__]))
    units_raw = _section(data, "units", ["time", "memory"])
    for key, value in units_raw.items():
        if not isinstance(value, str):
            raise ConfigError(f"units.{key} must be a text such as 'ms' or 'GiB', got {value!r}")
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"name must be a non-empty text, got {name!r}")
    return Config(name=name, problem=problem, solver=solver, units=Units(**units_raw))


def load_config(path: str | os.PathLike[str], ignore_budget: bool = False) -> Config:
    """Read and validate the YAML config at ``path`` (without its ``memory.budget`` if ``ignore_budget``).

    Raises :class:`ConfigError` (a ``ValueError``) with a message that names the problem and how to fix it.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(file)!r} does not exist; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{str(file)!r} is a folder, not a config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"YAML syntax error at {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML error: {exc}") from None
    if data is None:
        raise ConfigError("the config file is empty; start from models/seed-8x64.yaml")
    return config_from_dict(data, default_name=file.stem, ignore_budget=ignore_budget, base=file.parent)
