"""Cluster sizing: from a model's shapes and a GPU's numbers to the fastest pipeline plan that fits.

The flow: a model record (:mod:`~pipeplan.sizing.models`) and a hardware record
(:mod:`~pipeplan.sizing.hardware`), from presets, mappings or YAML files, plus a training
:class:`~pipeplan.sizing.setup.Setup` (parallel sizes, batch, recompute) become an ordinary pipeplan
:class:`~pipeplan.problem.Problem` in seconds and bytes (:mod:`~pipeplan.sizing.costs`,
:mod:`~pipeplan.sizing.memory`, :mod:`~pipeplan.sizing.build`); a named schedule is replayed on it, or the
optimizer solves it, and the result is turned into step time, tokens/s and MFU
(:func:`~pipeplan.sizing.estimate.estimate`). :func:`~pipeplan.sizing.sweep.sweep` does that over a search
space; :mod:`~pipeplan.sizing.study` reads the study files of ``pipeplan size``.
"""

from pipeplan.sizing.estimate import estimate
from pipeplan.sizing.hardware import Hardware, hardware_presets, load_hardware
from pipeplan.sizing.models import Model, load_model, model_presets
from pipeplan.sizing.setup import Setup
from pipeplan.sizing.sweep import sweep

__all__ = [
    "Hardware",
    "Model",
    "Setup",
    "estimate",
    "hardware_presets",
    "load_hardware",
    "load_model",
    "model_presets",
    "sweep",
]
