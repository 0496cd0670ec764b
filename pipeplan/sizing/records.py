"""Preset records shipped inside the package (``presets/*.yaml``) and the one way user input becomes a record.

A model or a hardware description can be given as a preset name, a mapping, or a YAML file; a mapping may
start from a preset (key ``preset``) and override any field. :func:`resolve` turns all three into one mapping
that the record's dataclass then validates.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from pipeplan.config import load_yaml
from pipeplan.problem import ConfigError, did_you_mean, np_bool_types
from pipeplan.reading import SMALL_FILE_BYTES, read_text, stem_text


@functools.cache
def presets(kind: str) -> dict[str, dict[str, Any]]:
    """The presets of ``kind`` ("models" or "hardware"), keyed by name, as the shipped YAML file holds them."""
    text = resources.files("pipeplan.sizing").joinpath("presets").joinpath(f"{kind}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict), f"presets/{kind}.yaml must hold a mapping"
    return data


def read_yaml_file(path: Path, what: str) -> Any:
    """The YAML of the ``what`` ("model", "hardware") file at ``path``, read as every input file is."""
    text = read_text(path, f"{what} file", SMALL_FILE_BYTES)
    try:
        return load_yaml(text, hint=f"'pipeplan presets STUDY' shows every {what} field")
    except ConfigError as exc:
        raise ConfigError(f"{what} file {str(path)!r}: {exc}") from None


def resolve(value: object, kind: str, what: str) -> tuple[str, dict[str, Any]]:
    """(name, fields) of a preset name, a mapping (optionally ``preset:`` plus overrides) or a YAML file path.

    ``what`` names the input in messages ("model", "hardware"). An unknown preset lists the valid ones.
    """
    known = presets(kind)
    if is_file(value):
        path = Path(value)
        data = read_yaml_file(path, what)
        if not isinstance(data, Mapping):
            raise ConfigError(f"{what} file {str(path)!r} must hold a mapping of fields, got {type(data).__name__}")
        name, fields = resolve(dict(data), kind, what)
        return (name if "preset" in data or "name" in data else stem_text(path)), fields
    if isinstance(value, str):
        if value not in known:
            raise ConfigError(f"unknown {what} preset {value!r}{did_you_mean(value, known)}; valid presets: "
                              f"{', '.join(known)} "
                              f"(or give a mapping of fields, or a YAML file)")
        return value, dict(known[value])
    if isinstance(value, Mapping):
        fields = dict(value)
        base = fields.pop("preset", None)
        name = fields.pop("name", None)
        if base is not None:
            if not isinstance(base, str):
                raise ConfigError(f"{what}.preset must be a preset name, got {base!r}")
            base_name, base_fields = resolve(base, kind, what)
            merged = {**base_fields, **fields}
            if "source" not in fields:
                merged["source"] = base_fields.get("source", "")
            return str(name or base_name), merged
        return str(name or f"custom-{what}"), fields
    raise ConfigError(f"{what} must be a preset name, a mapping of fields or a YAML file, got {value!r}")


def is_file(value: object) -> TypeGuard[str | Path]:
    """Whether a model or hardware value names a YAML file (else a preset name, a mapping or a record)."""
    return isinstance(value, Path) or (isinstance(value, str) and value.endswith((".yaml", ".yml")))


@contextlib.contextmanager
def named_file(value: object, what: str) -> Iterator[None]:
    """Re-raise a :class:`ConfigError` about a record read from a YAML file with the file's name in front: a
    study that names ``model: mine.yaml`` said "model.hidden_size must be a whole number" without saying where."""
    try:
        yield
    except ConfigError as exc:
        if not is_file(value) or str(value) in str(exc):
            raise
        raise ConfigError(f"{what} file {str(value)!r}: {exc}") from None


def check_fields(what: str, fields: Mapping[str, Any], accepted: tuple[str, ...]) -> None:
    """Raise :class:`ConfigError` for a key that is not a field of the record (a typo would otherwise be lost)."""
    unknown = [key for key in fields if key not in accepted]
    if unknown:
        raise ConfigError(f"unknown {what} field {unknown[0]!r}{did_you_mean(unknown[0], accepted)}; valid fields: "
                          f"{', '.join(accepted)}")


def positive_number(what: str, name: str, value: object, whole: bool = False,
                    allow_zero: bool = False) -> int | float:
    """``value`` as a Python int (``whole``) or number, or a :class:`ConfigError` naming ``what.name`` (``name``
    alone when ``what`` is empty: a keyword, or a study's top-level key) unless it is a positive (or >= 0) number.
    NumPy's numbers count (a row of a sweep's table holds them)."""
    field = f"{what}.{name}" if what else name
    if isinstance(value, (bool, *np_bool_types())) or not isinstance(value, numbers.Integral if whole else
                                                                     numbers.Real):
        kind = "a whole number" if whole else "a number"
        write = ""
        if isinstance(value, float) and math.isfinite(value) and value.is_integer() and (
                value >= 0 if allow_zero else value > 0):  # "(write 0)" for a value that must be > 0 misleads
            write = f" (write {int(value)})"
        raise ConfigError(f"{field} must be {kind}, got {value!r}{write}")
    number = float(value)
    if not math.isfinite(number) or (number < 0 if allow_zero else number <= 0):
        raise ConfigError(f"{field} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else number


def set_positive(record: object, what: str, name: str, whole: bool = False, allow_zero: bool = False) -> None:
    """Check the field ``name`` of a frozen ``record`` with :func:`positive_number` and store it as a Python
    number."""
    object.__setattr__(record, name, positive_number(what, name, getattr(record, name), whole, allow_zero))
