"""Schedule generators, found by name.

Every generator has the same signature, ``(problem) -> Schedule``, is a pure function of the problem, and is
registered here with its name. :data:`REGISTRY` keeps registration order, which is also the order of
simplicity used to break ties (GPipe is simpler than 1F1B, which is simpler than the zero-bubble family).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeplan.problem import A_PROBLEM, ConfigError, Problem, did_you_mean, expect
from pipeplan.schedule import NotApplicable, Schedule

Generator = Callable[[Problem], Schedule]

# name -> generator, in order of simplicity.
REGISTRY: dict[str, Generator] = {}


def register(name: str) -> Callable[[Generator], Generator]:
    """Decorator that registers a generator under ``name``."""

    def wrap(generator: Generator) -> Generator:
        assert name not in REGISTRY, f"schedule {name} registered twice"
        REGISTRY[name] = generator
        return generator

    return wrap


@dataclass(frozen=True)
class ChunkLayout:
    """The layout a chunked schedule is built for: 2 chunks per device (or at least 2 unless ``exactly_two``) in
    ``placement``, and a split backward if ``split_backward``."""

    placement: str
    exactly_two: bool
    split_backward: bool


# Every registered schedule that runs several chunks per device, with its layout.
CHUNKED: dict[str, ChunkLayout] = {
    "interleaved-1f1b": ChunkLayout("loop", exactly_two=False, split_backward=False),
    "interleaved-zb": ChunkLayout("loop", exactly_two=False, split_backward=True),
    "zb-v": ChunkLayout("v", exactly_two=True, split_backward=True),
    "dualpipe-v": ChunkLayout("v", exactly_two=True, split_backward=True),
    "v-half": ChunkLayout("v", exactly_two=True, split_backward=True),
    "v-min": ChunkLayout("v", exactly_two=True, split_backward=True),
}


def _fixes(problem: Problem, layout: ChunkLayout) -> list[str]:
    """The config settings ``problem`` lacks for ``layout`` (none when it has that layout)."""
    chunks_ok = problem.num_chunks == 2 if layout.exactly_two else problem.num_chunks >= 2
    return [fix for fix, needed in (("pipeline.num_chunks: 2", not chunks_ok),
                                    (f"pipeline.placement: {layout.placement}", problem.placement != layout.placement),
                                    ("costs.backward_weight > 0", layout.split_backward and not problem.split_backward))
            if needed]


def _where(placement: str) -> str:
    return "V placement" if placement == "v" else f"{placement} placement"


def require_chunks(problem: Problem, name: str) -> None:
    """Raise :class:`NotApplicable` unless ``problem`` has the layout of :data:`CHUNKED` that schedule ``name`` is
    built for. The message says what the schedule needs, what the problem has, and which config keys to set."""
    layout = CHUNKED[name]
    fixes = _fixes(problem, layout)
    if not fixes:
        return
    needs = (f"num_chunks {'2' if layout.exactly_two else '>= 2'} in {_where(layout.placement)}"
             + (" and a split backward" if layout.split_backward else ""))
    got = f"num_chunks {problem.num_chunks}, placement {problem.placement!r}"
    if layout.split_backward:
        got += f", {'split' if problem.split_backward else 'unsplit'} backward"
    raise NotApplicable(f"{name} needs {needs} (got {got}); set " + ", ".join(fixes))


def require_one_chunk(problem: Problem, name: str) -> None:
    """Raise :class:`NotApplicable` when ``problem`` has several chunks per device, naming the chunked schedules
    that apply to its layout (or, when none does, each placement's)."""
    if problem.num_chunks == 1:
        return
    fitting = [other for other, layout in CHUNKED.items() if not _fixes(problem, layout)]
    if fitting:
        instead = f"with this layout, {', '.join(fitting)} {'applies' if len(fitting) == 1 else 'apply'}"
    else:
        by_placement: dict[str, list[str]] = {}
        for other, layout in CHUNKED.items():
            by_placement.setdefault(layout.placement, []).append(other)
        instead = "with chunks, " + "; ".join(f"{', '.join(others)} ({_where(placement)})"
                                              for placement, others in by_placement.items()) + " apply"
    raise NotApplicable(f"{name} runs one chunk per device (got num_chunks {problem.num_chunks}); {instead}")


def group_reasons(skipped: dict[str, str]) -> list[tuple[list[str], str]]:
    """``skipped`` (schedule -> why it does not apply, a text that starts with its name) as (schedules, reason)
    pairs, one per reason, the reason without the name and its verb agreeing ("zb-v, v-min need num_chunks 2
    ...")."""
    groups: dict[str, list[str]] = {}  # keyed by the reason without the schedule's name
    for name, reason in skipped.items():
        groups.setdefault(reason.removeprefix(f"{name} "), []).append(name)
    return [(schedules, re.sub(r"^(need|run)s ", r"\1 ", reason) if len(schedules) > 1 else reason)
            for reason, schedules in groups.items()]


def names() -> list[str]:
    """Registered schedule names, simplest first."""
    return list(REGISTRY)


def get(name: str) -> Generator:
    """The generator called ``name``; an unknown name raises :class:`ConfigError` listing the valid ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown schedule {name!r}{did_you_mean(name, REGISTRY)}; valid names: "
                          f"{', '.join(REGISTRY)}") from None


def generate(name: str, problem: Problem) -> Schedule:
    """Build the schedule called ``name`` for ``problem``."""
    expect("problem", problem, Problem, A_PROBLEM)
    return get(name)(problem)


def generate_applicable(problem: Problem, skip: tuple[str, ...] = ()) -> tuple[list[Schedule], dict[str, str]]:
    """Every registered schedule that applies to ``problem`` (but those in ``skip``), simplest first, and,
    keyed by name, why each of the others does not apply."""
    built: list[Schedule] = []
    reasons: dict[str, str] = {}
    for name, generator in REGISTRY.items():
        if name in skip:
            continue
        try:
            built.append(generator(problem))
        except NotApplicable as exc:
            reasons[name] = str(exc)
    return built, reasons


# Importing the modules registers their generators, in order of simplicity.
from pipeplan.schedules import gpipe, one_f_one_b  # noqa: E402, F401, I001 (registration order)
from pipeplan.schedules import zero_bubble  # noqa: E402, F401
from pipeplan.schedules import interleaved  # noqa: E402, F401
from pipeplan.schedules import vshape  # noqa: E402, F401
from pipeplan.schedules import interleaved_zb  # noqa: E402, F401
from pipeplan.schedules import dualpipe_v  # noqa: E402, F401
from pipeplan.schedules import controllable  # noqa: E402, F401
