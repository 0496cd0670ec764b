"""Long runs improved through short ones: search a run of fewer microbatches, splice its changes into the long one.

A named schedule such as interleaved zero bubble runs the same steady state from its fill to its drain: run with
N microbatches, each device's order is its order with n < N microbatches, the first part as it is and the rest
with every microbatch number raised by N - n, a stretch of steady state in between. The fill and the drain are
where such a schedule loses time, and they are the same whatever N. So the neighbourhood search
(:mod:`pipeplan.lns`) can look for a better fill and drain on the short run, whose sub-models are half the size
and whose sub-solves find in seconds what they do not find in the long run's time: on P = 32, N = 128, two chunks
in loop placement, 32 activations (24,576 ops), the search from interleaved zero bubble (347.93) found nothing in
209 neighbourhoods over 300 s, while the same search on N = 64 found a drain 0.03 shorter in 17 s, and spliced
into N = 128 that drain gives 347.90.

**The splice.** On each device, with ``long`` the long run's order of the named schedule, ``short`` the short
run's and ``better`` the order the search found on the short run (the same ops as ``short``), a cut c splits
the short orders into a head and a tail with:

- ``long`` starting with ``short[:c]`` and ending with ``short[c:]`` shifted (each microbatch number raised by
  N - n), so that the long order is head, middle, shifted tail;
- ``better[:c]`` holding the same ops as ``short[:c]`` (so ``better[c:]`` holds those of ``short[c:]``).

The spliced order is ``better[:c]``, the middle, then ``better[c:]`` shifted: every op of the long run once,
on its own device. Of the cuts that qualify, the one taken starts the longest stretch where ``better`` and
``short`` agree, so that a change in the short run's fill lands in the long run's fill and one in its drain in
its drain. Whether the spliced orders run without deadlock and within the budget is the replay's to say, as
for every schedule the optimizer considers; none is kept that does not.

It applies only where the long run's orders are the short run's with a middle inserted (checked device by
device: :func:`cuts`), which holds for the named schedules whose steady state repeats a microbatch at a time
once N is large enough (interleaved zero bubble with groups of P at N = 2P and 4P, V-shape zero bubble,
ZB-H1), not for the list schedulers or the lattice, whose orders depend on N throughout.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from pipeplan import lns
from pipeplan.metrics import compute_metrics
from pipeplan.problem import Op, Problem
from pipeplan.schedule import Schedule, ScheduleError
from pipeplan.schedules import generate
from pipeplan.simulate import Timeline, simulate

log = logging.getLogger(__name__)

# How long each tail window of the short run's search runs: at least the large models' LARGE_TAIL_S, and up to the
# small models' TAIL_SHARE of the time left rather than the large models' LARGE_TAIL_SHARE. The short run is there
# for the fill and the drain, and a move there takes a while to find: on P = 32, N = 64, two chunks in loop
# placement, 32 activations (12,288 ops), the tail window over the last 25 % of interleaved zero bubble shows its
# first better schedule after about 8.5 s, while the sliding windows after the tails are each proven in about 0.2 s
# to hold nothing better.
TAIL = lns.TailRule(lns.LARGE_TAIL_S, lns.TAIL_SHARE)


def short_lengths(problem: Problem) -> list[int]:
    """Microbatch counts of the short runs worth trying for ``problem``, longest first: half of N, and 2P when
    that is shorter still, none below 2P. A run of fewer than 2P microbatches has no steady state between its fill
    and its drain (each spans about P microbatches), so what the search finds there is not the long run's fill or
    drain: on P = 16, N = 32, two chunks in loop placement, 16 activations, half of a 60 s solve spent on N = 16
    left 92.41 where the search on the long run alone reached 91.53 in the same hour, and on P = 32, N = 64 it left
    interleaved zero bubble's 187.93 where the long run's search reached 187.90."""
    n, p = problem.num_microbatches, problem.num_devices
    return [length for length in dict.fromkeys((n // 2, 2 * p)) if 2 * p <= length <= n // 2]


def _shifted(op: Op, shift: int) -> Op:
    return dataclasses.replace(op, microbatch=op.microbatch + shift)


def cuts(long: Sequence[Op], short: Sequence[Op], shift: int) -> range:
    """The cuts c at which ``long`` is ``short[:c]``, a middle, then ``short[c:]`` with every microbatch number
    raised by ``shift``; empty when there is none."""
    if len(long) < len(short):
        return range(0)
    head = 0
    while head < len(short) and long[head] == short[head]:
        head += 1
    tail = 0
    while tail < len(short) and long[len(long) - 1 - tail] == _shifted(short[len(short) - 1 - tail], shift):
        tail += 1
    return range(len(short) - tail, head + 1)


def _cut(long: Sequence[Op], short: Sequence[Op], better: Sequence[Op], shift: int) -> int | None:
    """The cut for one device (see the module docstring), or None when no cut qualifies."""
    allowed = cuts(long, short, shift)
    if not allowed or len(better) != len(short):
        return None
    # agree_from[i]: how many ops from position i on ``short`` and ``better`` have in common, place by place.
    agree_from = [0] * (len(short) + 1)
    for i in range(len(short) - 1, -1, -1):
        agree_from[i] = agree_from[i + 1] + 1 if short[i] == better[i] else 0
    # balance: each op's count in better[:c] less its count in short[:c]; differ: how many ops have one not zero.
    balance: dict[Op, int] = {}
    differ = 0
    chosen, chosen_run = None, -1
    for c in range(len(short) + 1):
        if differ == 0 and c in allowed and agree_from[c] > chosen_run:
            chosen, chosen_run = c, agree_from[c]
        if c < len(short):
            for op, step in ((better[c], 1), (short[c], -1)):
                before = balance.get(op, 0)
                balance[op] = before + step
                differ += (before + step != 0) - (before != 0)
    return chosen


def splice(long_base: Schedule, short_base: Schedule, better: Schedule, shift: int,
           name: str = "spliced") -> Schedule | None:
    """The long run's orders with ``better``'s changes to ``short_base`` spliced in (see the module docstring);
    None when some device has no cut. ``shift`` is N - n, the microbatches the long run has more."""
    orders = []
    for long, short, found in zip(long_base.orders, short_base.orders, better.orders, strict=True):
        c = _cut(long, short, found, shift)
        if c is None:
            return None
        middle = long[c:len(long) - (len(short) - c)]
        orders.append([*found[:c], *middle, *(_shifted(op, shift) for op in found[c:])])
    return Schedule.from_lists(name, orders)


@dataclasses.dataclass(frozen=True)
class ShortRun:
    """A short run that the named schedule's long orders splice onto: the short problem and its orders."""

    problem: Problem
    base: Schedule


def short_run(problem: Problem, name: str, long_base: Schedule) -> ShortRun | None:
    """The longest short run (:func:`short_lengths`) on which the named schedule ``name`` gives orders that
    ``long_base`` (its orders on ``problem``) splices onto, cut by cut on every device; None when none does."""
    for n in short_lengths(problem):
        short = dataclasses.replace(problem, num_microbatches=n)
        try:
            base = generate(name, short)
        except (ScheduleError, ValueError):  # NotApplicable and ConfigError are ValueErrors too
            continue
        shift = problem.num_microbatches - n
        if all(cuts(long, s, shift) for long, s in zip(long_base.orders, base.orders, strict=True)):
            return ShortRun(short, base)
    return None


def improve(problem: Problem, run: ShortRun, ticked_short: Problem, model: lns.LnsModel, long_base: Schedule,
            long_value: float, value_of: Callable[[Timeline], float], deadline: float, num_workers: int,
            seed: int = 0, target: float = 0.0, should_stop: Callable[[], bool] = lambda: False,
            on_improvement: Callable[[Schedule, float], None] = lambda schedule, value: None,
            ) -> tuple[Schedule, float] | None:
    """The best spliced schedule of ``problem`` (replayed on it, within its budget, better than ``long_base``,
    whose objective is ``long_value``) from the neighbourhood search on the short run until ``deadline``
    (time.monotonic()), and its objective; None when none is found.

    ``ticked_short`` is the short run's problem in the model's ticks and ``model`` its CP-SAT model for the
    search; ``value_of`` gives a replayed timeline's objective, in the timeline's own unit (the search's timelines
    are in ticks, the spliced ones in the config's unit). The search ends early once ``should_stop()`` or once the
    best spliced schedule meets ``target``, a proven lower bound (the config's unit). ``on_improvement`` hears each
    better spliced schedule and its objective as it is found.
    """
    shift = problem.num_microbatches - run.problem.num_microbatches
    best: Schedule | None = None
    best_value = long_value
    spliced = unspliceable = deadlocked = 0

    def heard(found: Schedule) -> None:
        nonlocal best, best_value, spliced, unspliceable, deadlocked
        candidate = splice(long_base, run.base, found, shift, name="optimal")
        if candidate is None:
            unspliceable += 1
            return
        try:
            replay = simulate(problem, candidate)
        except ScheduleError:
            deadlocked += 1
            return
        spliced += 1
        value = value_of(replay)
        if compute_metrics(replay).feasible and value < best_value:
            best, best_value = candidate, value
            log.info("short run: a better schedule at N=%d spliced into N=%d: %s", run.problem.num_microbatches,
                     problem.num_microbatches, best_value)
            on_improvement(candidate, value)

    def done() -> bool:
        return should_stop() or best_value <= target * (1 + 1e-9)

    lns.improve(model, ticked_short, run.base, value_of=value_of, deadline=deadline, num_workers=num_workers,
                seed=seed, should_stop=done, on_improvement=heard, tail=TAIL)
    log.info("short run: %d better short schedules spliced (%d of them could not be, %d deadlocked once spliced)",
             spliced + unspliceable + deadlocked, unspliceable, deadlocked)
    return None if best is None else (best, best_value)
