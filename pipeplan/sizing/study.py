"""Study files for ``pipeplan size``: a model, a GPU, GPU counts, batch, sequence length and a search space.

The format (keys are a contract; unknown keys are errors, so a typo is never silently ignored)::

    name: llama3.1-70b on H100          # optional, for reports (default: the file name)
    model: llama3.1-70b                 # preset name, mapping of shape fields (optionally preset: + overrides)
    hardware: h100-80gb                 # preset name or mapping (preset: + overrides), or a YAML file path
    num_gpus: [64, 128, 256, 512]       # one count or a list
    global_batch_size: 512              # sequences per optimizer step
    seq_len: 8192
    search:                             # each a single value or a list
      tensor_parallel: [4, 8]
      pipeline_parallel: [2, 4, 8]
      microbatch_size: [1, 2]
      num_chunks: [1, 2]
      recompute: [selective]            # none, selective, full
      schedules: [1f1b, zb-h1, interleaved-1f1b, zb-v, optimal]
    options:                            # training options (defaults shown)
      sequence_parallel: true
      flash_attention: true
      distributed_optimizer: true
      overlap_grad_sync: true
      balanced: false                   # uneven layer split that minimises the slowest stage
    processes: 2                        # local worker processes running the tasks (default: CPUs, at most 4)
    optimizer:                          # only used when schedules has "optimal"
      time_limit_s: 10                  # per configuration
      top: 3                            # run it on the 3 configurations whose best named schedule is fastest
      num_workers: 2
      random_seed: 0
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeplan.config import checked_name, load_yaml
from pipeplan.problem import ConfigError, did_you_mean, expect
from pipeplan.reading import SMALL_FILE_BYTES, read_source
from pipeplan.sizing.records import is_file
from pipeplan.sizing.setup import RECOMPUTE_MODES, SWITCHES, check_switches

if TYPE_CHECKING:
    from pipeplan.solver import StopRequest

_TOP_KEYS = ("name", "model", "hardware", "num_gpus", "global_batch_size", "seq_len", "search", "options",
             "optimizer", "processes")
_REQUIRED = ("model", "hardware", "num_gpus", "global_batch_size", "seq_len")
SEARCH_KEYS = ("tensor_parallel", "pipeline_parallel", "microbatch_size", "num_chunks", "recompute", "schedules")
OPTION_KEYS = (*SWITCHES, "balanced")
OPTIMIZER_KEYS = ("time_limit_s", "top", "num_workers", "random_seed")


@dataclass(frozen=True)
class Study:
    """A loaded study: a name for reports and the keywords of :func:`~pipeplan.sizing.sweep.sweep`."""

    name: str
    sweep_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def time_limit_s(self) -> float:
        return float(self.sweep_kwargs.get("time_limit_s", 10.0))


def _mapping(data: dict[str, Any], key: str, accepted: tuple[str, ...]) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a mapping of {', '.join(accepted)}, got {value!r}")
    unknown = [k for k in value if k not in accepted]
    if unknown:
        raise ConfigError(f"unknown key {key}.{unknown[0]}{did_you_mean(unknown[0], accepted)}; valid keys in "
                          f"{key}: {', '.join(accepted)}")
    return dict(value)


def _whole(name: str, value: object, allow_list: bool = True) -> None:
    values = value if allow_list and isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"{name} is an empty list; give at least one value")
    for item in values:
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise ConfigError(f"{name} must be a whole number >= 1{' or a list of them' if allow_list else ''}, "
                              f"got {item!r}")


def _recompute_modes(value: object) -> None:
    """search.recompute: a mode or a list of them, named as a study names it (the sweep's own check says
    "recompute", its keyword)."""
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError("search.recompute is an empty list; give at least one value")
    for mode in values:
        if mode not in RECOMPUTE_MODES:
            raise ConfigError(f"search.recompute must be one of {', '.join(RECOMPUTE_MODES)} or a list of them, got "
                              f"{mode!r}{did_you_mean(mode, RECOMPUTE_MODES)}")


def study_from_dict(data: object, default_name: str = "study", base: Path | None = None) -> Study:
    """Validate a parsed study file (its top-level mapping) and return the :class:`Study`.

    ``base`` is the folder relative paths to model or hardware YAML files are read from.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"a study file must be a mapping with keys {', '.join(_TOP_KEYS)}, got "
                          f"{type(data).__name__}")
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        config = (" (this looks like a pipeline config: run it with 'pipeplan solve FILE', 'simulate' or "
                  "'frontier')") if "pipeline" in data else ""
        raise ConfigError(f"unknown top-level key {unknown[0]!r}{did_you_mean(unknown[0], _TOP_KEYS)}; valid keys: "
                          f"{', '.join(_TOP_KEYS)}{config}")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ConfigError(f"{missing[0]} is missing; a study needs {', '.join(_REQUIRED)}")
    _whole("num_gpus", data["num_gpus"])
    _whole("global_batch_size", data["global_batch_size"], allow_list=False)
    _whole("seq_len", data["seq_len"], allow_list=False)
    search = _mapping(data, "search", SEARCH_KEYS)
    for key in ("tensor_parallel", "pipeline_parallel", "microbatch_size", "num_chunks"):
        if key in search:
            _whole(f"search.{key}", search[key])
    if "recompute" in search:
        _recompute_modes(search["recompute"])
    options = _mapping(data, "options", OPTION_KEYS)
    check_switches("options.", **options)
    optimizer = _mapping(data, "optimizer", OPTIMIZER_KEYS)
    kwargs: dict[str, Any] = {
        "model": _relative(data["model"], base), "hardware": _relative(data["hardware"], base),
        "num_gpus": data["num_gpus"], "global_batch_size": data["global_batch_size"], "seq_len": data["seq_len"],
        **search, **options,
    }
    if "time_limit_s" in optimizer:
        limit = optimizer["time_limit_s"]
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
            raise ConfigError(f"optimizer.time_limit_s must be a positive number of seconds, got {limit!r}")
        kwargs["time_limit_s"] = float(limit)
    if "top" in optimizer:
        _whole("optimizer.top", optimizer["top"], allow_list=False)
        kwargs["optimal_top"] = optimizer["top"]
    else:
        kwargs["optimal_top"] = 3
    if "num_workers" in optimizer:
        _whole("optimizer.num_workers", optimizer["num_workers"], allow_list=False)
        kwargs["num_workers"] = optimizer["num_workers"]
    if "random_seed" in optimizer:
        seed = optimizer["random_seed"]
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ConfigError(f"optimizer.random_seed must be a whole number >= 0, got {seed!r}")
        kwargs["random_seed"] = seed
    if "processes" in data:
        _whole("processes", data["processes"], allow_list=False)
    kwargs["processes"] = data.get("processes", min(4, os.cpu_count() or 1))
    name = checked_name(data.get("name", default_name))
    _check_names(kwargs)
    return Study(name=name, sweep_kwargs=kwargs)


def _check_names(kwargs: dict[str, Any]) -> None:
    """Resolve the model and hardware (presets, overrides, YAML files) and check the schedule names now, so
    that a typo fails when the study loads rather than when it runs."""
    from pipeplan.sizing.estimate import check_schedule
    from pipeplan.sizing.hardware import load_hardware
    from pipeplan.sizing.models import load_model

    load_model(kwargs["model"])
    load_hardware(kwargs["hardware"])
    schedules = kwargs.get("schedules", [])
    for schedule in schedules if isinstance(schedules, list) else [schedules]:
        check_schedule(str(schedule))


def _relative(value: object, base: Path | None) -> object:
    """A model or hardware YAML path read relative to the study file; anything else unchanged."""
    if base is not None and isinstance(value, str) and is_file(value):
        path = Path(value)
        return str(path if path.is_absolute() else base / path)
    return value


# Where a study's layout is shown.
STUDY_HINT = "start from models/size-llama3.1-70b.yaml (the layout is in the README, 'pipeplan size')"


def load_study(path: str | os.PathLike[str]) -> Study:
    """Read and validate the study file at ``path`` (the text ``"-"``: from the standard input, as
    :func:`~pipeplan.config.load_config` reads a config); errors are :class:`ConfigError` naming the key."""
    expect("path", path, (str, os.PathLike), "the path of a YAML study file")
    source = read_source(path, "study file", SMALL_FILE_BYTES, larger="check that this is the right file")
    data = load_yaml(source.text, hint=STUDY_HINT)
    if data is None:
        raise ConfigError(f"{source.named} is empty; {STUDY_HINT}")
    return study_from_dict(data, default_name=source.name, base=source.base)


@dataclass(frozen=True)
class StudyResult:
    """A study run: every row of the sweep, the best plan replayed, and 1F1B against the optimizer on the best
    plan's parallel sizes with one chunk per device."""

    study: Study
    """The study as run: its ``time_limit_s`` is the one the optimizer used (run_study's, when given)."""
    frame: Any
    """The sweep's pandas DataFrame (see :data:`~pipeplan.sizing.sweep.COLUMNS`)."""
    best: dict[str, Any]
    """:func:`~pipeplan.sizing.estimate.estimate`'s record of the best row (with its problem and timeline)."""
    baseline: dict[str, Any]
    """1F1B on the best row's sizes, one chunk per device."""
    optimal: dict[str, Any]
    """The optimizer on the same problem as ``baseline`` (split backward)."""
    stats: Any = None
    """The sweep's :class:`~pipeplan.sizing.sweep.SweepStats`: tasks in all, reused from the store, failures."""
    interrupted: bool = False
    """Every task finished, but a stop request ended the optimizer on the best plan: ``best``, ``baseline`` and
    ``optimal`` are empty, as after a stopped sweep."""

    @property
    def gain_label(self) -> str:
        """The configuration the gain is measured on, as a short label: the best plan's on one chunk per device,
        where 1F1B runs (said when the best plan has more chunks, so the gain is not read as the best plan's)."""
        from pipeplan.sizing.sweep import candidate_label

        label = candidate_label({**self.best, "num_chunks": 1})
        if int(self.best["num_chunks"]) != 1:
            label += " (the best plan's sizes on one chunk per device, where 1F1B runs)"
        return label


def run_study(study: Study, time_limit_s: float | None = None,
              progress: Callable[[Any], None] | None = None, **sweep_options: Any) -> StudyResult:
    """Sweep the study's search space, then replay the best plan and compare the optimizer with 1F1B on it.

    ``time_limit_s`` overrides the study's optimizer time limit; ``sweep_options`` (``executor``, ``store``,
    ``refresh``, ``should_stop``, ``stop``, ``processes``) go to :func:`~pipeplan.sizing.sweep.sweep`. Raises
    :class:`ConfigError` when no configuration runs within memory, naming what removed each candidate. A sweep
    stopped early (``should_stop``, ``stop``) returns its rows so far, with empty ``best``, ``baseline`` and
    ``optimal``; so does a ``stop`` requested while the optimizer runs on the best plan after the sweep (every
    task finished; the result is then ``interrupted``).
    """
    from pipeplan.sizing.estimate import estimate
    from pipeplan.sizing.sweep import best_row, sweep_with_stats

    expect("study", study, Study, "a Study (load_study(path))")
    if time_limit_s is not None:  # the result's study is the one run, so best.yaml carries this limit
        study = replace(study, sweep_kwargs={**study.sweep_kwargs, "time_limit_s": time_limit_s})
    kwargs = dict(study.sweep_kwargs)
    kwargs.update(sweep_options)
    frame, stats = sweep_with_stats(**kwargs, progress=progress)
    if stats.stopped:
        return StudyResult(study, frame, {}, {}, {}, stats)
    best = best_row(frame)
    common: dict[str, Any] = {key: kwargs[key] for key in ("model", "hardware", "global_batch_size", "seq_len")}
    for key in OPTION_KEYS:
        if key in kwargs:
            common[key] = kwargs[key]
    sizes: dict[str, Any] = {key: int(best[key]) for key in ("tensor_parallel", "pipeline_parallel",
                                                             "data_parallel", "microbatch_size")}
    sizes["recompute"] = str(best["recompute"])
    stop: StopRequest | None = kwargs.get("stop")
    solver: dict[str, Any] = {"time_limit_s": kwargs.get("time_limit_s", 10.0),
                              "num_workers": kwargs.get("num_workers"), "random_seed": kwargs.get("random_seed", 0),
                              "stop": stop}
    stopped = StudyResult(study, frame, {}, {}, {}, stats, interrupted=True)
    if progress is not None:
        progress("optimizer on the best configuration")
    baseline = estimate(**common, **sizes, num_chunks=1, schedule="1f1b")
    optimal = estimate(**common, **sizes, num_chunks=1, schedule="optimal", **solver)
    if optimal["interrupted"]:
        return stopped
    if best["schedule"] == "optimal" and int(best["num_chunks"]) == 1:
        best_estimate = optimal
    else:
        best_estimate = estimate(**common, **sizes, num_chunks=int(best["num_chunks"]),
                                 schedule=str(best["schedule"]), **solver)
    if best_estimate["interrupted"]:
        return stopped
    return StudyResult(study, frame, best_estimate, baseline, optimal, stats)
