"""Lower bounds on the optimizer's objective, and the proof arithmetic that turns (value, bound) into a status.

Every bound here is a theorem about the problem alone: a pure function whose docstring carries its argument,
valid for every schedule within the budget (tested against exhaustive search on tiny problems and against
every generator on random ones). The solver hands them to CP-SAT as data (the objective's domain) and compares
its answers with them; nothing here touches CP-SAT.

The timing model the arguments rely on: F(s, m) follows F(s-1, m) plus the link latency, B(s, m) follows
B(s+1, m) plus the latency (or F(s, m) on the last model stage), W(s, m) follows B(s, m); a device runs one op
at a time. Memory: F allocates its activation when it starts, B and W release it when they end
(:meth:`~pipeplan.problem.Problem.released_by`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeplan.problem import OpKind, Problem

OPTIMAL = "OPTIMAL"
FEASIBLE = "FEASIBLE"

# Relative slack under which a value and its bound are the same number (float noise of a proven optimum,
# e.g. 87.21000000000001 against 87.21); also the slack when comparing bounds with budgets and counts.
_EPS = 1e-9


@dataclass(frozen=True)
class Proof:
    """How far a schedule's value can be from optimal: the bound (never above the value), the relative gap
    (value - bound) / value, and OPTIMAL when the gap is zero, else FEASIBLE."""

    lower_bound: float
    gap: float
    status: str


def prove(value: float, bound: float) -> Proof:
    """The one place that decides what a (value, lower bound) pair proves.

    The bound is clipped to the value (a proven bound is never above a feasible schedule's value; above it by
    float noise only); a gap within relative 1e-9 is float noise of a proven optimum, so the bound is set to
    the value and the status is OPTIMAL.
    """
    lower = min(value, bound)
    gap = (value - lower) / value if value > 0 else 0.0
    if gap <= _EPS:
        return Proof(lower_bound=value, gap=0.0, status=OPTIMAL)
    return Proof(lower_bound=lower, gap=gap, status=FEASIBLE)


def minimum_budget(problem: Problem) -> list[float]:
    """Per device, the least budget that admits any schedule: one microbatch's activations on all its chunks.

    A microbatch's forward on a device's first chunk stays live until its backward there, which needs its
    forwards on every later chunk: so one microbatch alone holds all its chunks' activations at once.
    """
    return [problem.footprint(d) for d in range(problem.num_devices)]



def _first_forward_time(problem: Problem) -> list[float]:
    """Per model stage, the earliest start of its first forward: all forwards and links before it."""
    starts = [0.0]
    for s in range(1, problem.num_model_stages):
        starts.append(starts[-1] + problem.forward[s - 1] + problem.link_latency(s - 1))
    return starts


def round_trips(problem: Problem) -> list[float]:
    """Per model stage s, the least time from the start of F(s, m) to the start of B(s, m): the forwards from s
    up to the last stage, then the backwards down to s + 1, with a link latency each way between devices.
    Accumulated from the last stage down, so all stages cost one pass."""
    last = problem.num_model_stages - 1
    trips = [0.0] * (last + 1)
    trips[last] = problem.forward[last]
    for s in range(last - 1, -1, -1):
        trips[s] = trips[s + 1] + problem.forward[s] + problem.backward[s + 1] + 2 * problem.link_latency(s)
    return trips


def _tail_fill(problem: Problem, stage: int, in_flight: int) -> float:
    """The most work device ``stage`` can do between the end of its last forward and the start of its last B.

    When F(s, N-1) starts, x microbatches are past their forward but not their B (activation each) and y past
    their B but not their W (weight_activation each), and the budget must still fit the new forward. Only
    their B and W (and the x new W) can fill the window: x (B + W) + y W at most, maximised here over x, y.
    """
    n = problem.num_microbatches
    act = problem.activation[stage]
    wact = problem.weight_activation[stage]
    b, w = problem.backward[stage], problem.backward_weight[stage]
    budget = problem.budget
    room = math.inf if budget is None else budget[problem.device_of(stage)] - act
    best = 0.0
    for x in range(min(in_flight - 1, n - 1) + 1):
        left = room - x * act
        if left < -_EPS:
            break
        y_max = n - 1 - x
        if wact > 0 and math.isfinite(left):
            y_max = min(y_max, int(math.floor(left / wact + 1e-9)))
        best = max(best, x * (b + w) + (y_max * w if problem.split_backward else 0.0))
    return best


def _memory_chain(problem: Problem, stage: int, in_flight: int, window: float) -> float:
    """A span the budget forces on the device of ``stage`` (one chunk per device): with room for k in flight,
    F(m + k) cannot start before B(m) ends, and B(m) not before a round trip after F(m) starts.

    (Were B(m) still running or waiting, microbatches m .. m+k-1 would all hold their activation.) If even
    k weight activations and one activation overflow the budget, F(m + k) also waits for W(m) (were W(m)
    pending, so would W(m+1) .. W(m+k-1), each kind running in microbatch order). Otherwise, if k activations
    and one weight activation overflow it, F(m + k) waits for W(m) or for B(m + 1), both after B(m): were
    W(m) pending and B(m + 1) not ended, neither would B(m+2) .. B(m+k-1) have, so m+1 .. m+k would hold k
    activations beside W(m)'s share. So each step also takes min(W, B) more. Then F(N-1) starts at least
    r F + q (trip + B + that extra) after F(0), with N - 1 = q k + r, and the device still runs its B and W
    after another trip.
    """
    f, b, w = (problem.forward[stage], problem.backward[stage],
               problem.backward_weight[stage])
    step = window + b
    budget = problem.budget
    act, wact = problem.activation[stage], problem.weight_activation[stage]
    if problem.split_backward and budget is not None:
        room = budget[problem.device_of(stage)] * (1 + _EPS)
        if in_flight * wact + act > room:
            step += w
        elif in_flight * act + wact > room:
            step += min(w, b)
    q, r = divmod(problem.num_microbatches - 1, in_flight)
    return r * f + q * step + window + b + w


def nested_in_flight(problem: Problem, stage: int) -> int:
    """How many microbatches can be live on ``stage`` at once (past its forward's start, before its B's end).

    A microbatch live on ``stage`` also holds its whole activation on every lower stage of the same device: its
    forward there came first and its B there comes after. So each holds the sum of those activations and the
    stage's own, and the budget fits at most that many of them (all of them without a budget).
    """
    n = problem.num_microbatches
    device = problem.device_of(stage)
    budget = problem.budget
    nested = nested_activation(problem, stage)
    if budget is None or nested <= 0:
        return n
    return max(1, min(n, int(math.floor(budget[device] / nested + _EPS))))


def nested_activation(problem: Problem, stage: int) -> float:
    """What a microbatch live on ``stage`` holds on its device: its activations there and on every lower stage
    of the device (its forward there came first and its B there comes after)."""
    device = problem.device_of(stage)
    return sum(problem.activation[s] for s in problem.stages_on_device(device) if s <= stage)


def _nested_memory_chain(problem: Problem, device: int, trips: list[float]) -> float:
    """A span the budget forces on ``device`` through any pair of its stages s <= s' (any number of chunks).

    Take j microbatches m .. m+j-1 past their forward on s: if B(s, m) has not ended when F(s', m+j) starts,
    none of their B(s) has (each kind runs in microbatch order), so each holds its nested activations on s
    (:func:`nested_activation`), and m+j holds its nested activations on s'. With j = J = floor((budget - nested(s')) /
    nested(s)) + 1 that overflows the budget, so F(s', m+J) starts after B(s, m) ends, which is at least
    D = trip(s') + B(s') [+ the backwards and links from s' down to s, + B(s), when s < s'] after F(s', m)
    starts (for s = s', J is :func:`nested_in_flight`). So with N - 1 = q J + r, F(s', N-1) starts at least
    r F(s') + q D after F(s', 0), and B(s', N-1) ends a trip and a B later. The device's first op is F of its
    lowest stage s0 for microbatch 0 (every op of the device follows it), which precedes F(s', 0) by the
    forwards and links from s0 up to s'. After B(s', N-1) the device still runs W(s', N-1), and B(t, N-1) of
    each lower stage t of the device follows it by the backwards and links down to t (then W(t, N-1)). The span
    is at least the largest such sum.
    """
    n = problem.num_microbatches
    budget = problem.budget
    if budget is None:
        return 0.0
    stages = problem.stages_on_device(device)
    lowest = min(stages)
    best = 0.0
    for upper in stages:
        trip = trips[upper] + problem.backward[upper]
        up = sum(problem.forward[t] + problem.link_latency(t) for t in range(lowest, upper))
        after = problem.backward_weight[upper]
        down = 0.0
        down_to: dict[int, float] = {upper: 0.0}  # lower stage of the device -> backwards and links from upper
        for t in range(upper - 1, lowest - 1, -1):
            down += problem.link_latency(t)
            if t in stages:
                down_to[t] = down
                after = max(after, down + problem.backward[t] + problem.backward_weight[t])
            down += problem.backward[t]
        for lower, path in down_to.items():
            if nested_activation(problem, lower) <= 0:
                continue
            if lower == upper:
                j, step = nested_in_flight(problem, upper), trip
            else:
                room = budget[device] - nested_activation(problem, upper)
                j = max(1, min(n, int(math.floor(room / nested_activation(problem, lower) + _EPS)) + 1))
                step = trip + path + problem.backward[lower]
            q, r = divmod(n - 1, j)
            best = max(best, up + r * problem.forward[upper] + q * step + trip + after)
    return best


def _most_work(items: list[tuple[float, float, int]], room: float) -> float:
    """The most time ops can fill when each kind (time, memory it holds, how many there are) may be taken
    fractionally, best time per memory first, within ``room``: a fractional knapsack, so at least the most that
    whole ops can fill. Kinds that hold no memory are all taken."""
    best = 0.0
    room = max(0.0, room)
    for length, need, count in sorted(items, key=lambda item: -item[0] / item[1] if item[1] > 0 else -math.inf):
        take = count if need <= 0 else min(count, room / need)
        best += length * take
        room -= need * take
    return best


def _chunk_windows_idle(problem: Problem, device: int, trips: list[float]) -> float:
    """The idle time a budget forces on ``device`` (several chunks per device) in two windows of its span.

    Let lo and hi be the device's lowest and highest stages and T0 the start of its first op.

    - Head window: every B and W of the device starts at least L after T0, L being the least time from the start
      of F(lo, m) to the start of B(hi, m) (the forwards and links from lo up to hi, then hi's round trip): a
      B(s, m) of the device follows B(hi, m), which follows F(lo, m), and F(lo, m) starts at T0 or later. So in
      [T0, T0 + L) the device runs only forwards that start there, and just before T0 + L all of them still
      hold their activation (no B of the device has ended). Their activations fit the budget, so their time is
      at most :func:`_most_work` of the device's forwards; the rest of L is idle.
    - Tail window: let F(hi, m*) end last among the forwards of hi, at t1. Every forward of the device ends by
      t1 (a forward of a lower stage of the device precedes the forward of hi of the same microbatch), and
      B(hi, m*) starts no earlier than t1 + trip(hi) - F(hi). In that window only B and W run, and each that
      does was live at t1: a B with its activation (it and its W fill at most B + W), a W whose B had ended with
      its weight share. Microbatch m* itself holds its activations on hi and every lower stage of the device
      (their B come after B(hi, m*)), and none of its ops runs in the window. So the window's work is at most
      :func:`_most_work` of the B + W and W kinds within the budget less m*'s share; the rest is idle.
    - Longer tail window: the same from t1 to the end of B(lo, m*), which comes no earlier than B(hi, m*)'s start
      plus B(hi), then the link into hi - 1 and the backwards and links from there down to the end of B(lo) (a
      chain that may pass through other devices; links between stages of one device take no time). No forward
      runs there either, and every op in it still belongs to a microbatch live at t1; m*'s own ops in it are at
      most its B on every stage of the device and its W on every stage but lo (W(lo, m*) follows B(lo, m*)).
      The tail idle is the larger of the two windows' (the longer window pays for m*'s ops, which pays off when
      lo and hi are far apart in the model, as in loop placement).

    When the budget cannot hold all N microbatches on hi (each holding its activations on hi and the lower
    stages of the device), some B(hi, m) ended by the start of F(hi, m*), when every forward of hi had started;
    that B started at T0 + L or later, so the head window ends before t1 and the two idle times add. Otherwise
    the larger one counts. Every window lies within the device's span.
    """
    budget = problem.budget
    if budget is None:
        return 0.0
    n = problem.num_microbatches
    room = budget[device] * (1 + _EPS)
    stages = problem.stages_on_device(device)
    lo, hi = min(stages), max(stages)
    firsts = _first_forward_time(problem)  # F(lo, m) to F(hi, m): the forwards and links between
    head_window = firsts[hi] - firsts[lo] + trips[hi]
    forwards = [(problem.forward[s], problem.activation[s], n) for s in stages]
    head = max(0.0, head_window - _most_work(forwards, room))
    backwards = [(problem.backward[s] + problem.backward_weight[s], problem.activation[s], n) for s in stages]
    backwards += [(problem.backward_weight[s], problem.weight_activation[s], n) for s in stages]
    tail_window = trips[hi] - problem.forward[hi]
    footprint = problem.footprint(device)  # what one microbatch holds on the device while live on hi
    others = _most_work(backwards, room - footprint)
    down = sum(problem.link_latency(u) + problem.backward[u] for u in range(lo, hi))
    longer_window = tail_window + problem.backward[hi] + down
    own = sum(problem.backward[s] + problem.backward_weight[s] for s in stages) - problem.backward_weight[lo]
    tail = max(0.0, tail_window - others, longer_window - own - others)
    return head + tail if n * footprint > room else max(head, tail)


def memory_binds(problem: Problem) -> bool:
    """Whether the budget keeps some device from holding every microbatch at once."""
    budget = problem.budget
    return budget is not None and any(
        problem.num_microbatches * problem.footprint(d) > b for d, b in enumerate(budget)
    )


def memory_area(problem: Problem, device: int, trips: list[float]) -> float:
    """The least memory-time area one microbatch's activations take on ``device``.

    Microbatch m's activation on a stage s of the device is live from the start of F(s, m) to the end of
    B(s, m), at least a round trip (``trips``, :func:`round_trips`) plus B later; the weight share stays until
    W(s, m) ends, at least W after that. So the area is the sum over the device's stages of
    activation x (trip + B) + weight_activation x W.
    """
    return sum(
        problem.activation[s] * (trips[s] + problem.backward[s])
        + problem.weight_activation[s] * problem.backward_weight[s]
        for s in problem.stages_on_device(device)
    )


def _rate_and_first(amounts_and_times: list[tuple[float, float]]) -> tuple[float, float]:
    """(the most amount per unit of time, the largest amount) over ops given as (amount, time); the rate is
    infinite when an op with an amount takes no time."""
    rate = max((a / t if t > 0 else (math.inf if a > 0 else 0.0)) for a, t in amounts_and_times)
    return rate, max(a for a, _ in amounts_and_times)


def _live_ceiling_area(span: float, budget: float, head: tuple[float, float], tail: tuple[float, float]) -> float:
    """The integral over [0, span] of min(budget, first + rate x, last + rate' (span - x)), with head = (rate,
    first) and tail = (rate', last) (an infinite rate drops its line): exact, since the integrand is linear
    between the points where two of the three lines cross, so the trapezoid rule on those points is exact."""
    (rho, first), (sigma, last) = head, tail

    def ceiling(x: float) -> float:
        value = budget
        if math.isfinite(rho):
            value = min(value, first + rho * x)
        if math.isfinite(sigma):
            value = min(value, last + sigma * (span - x))
        return value

    points = {0.0, span}
    if math.isfinite(rho) and rho > 0:
        points.add((budget - first) / rho)
    if math.isfinite(sigma) and sigma > 0:
        points.add(span - (budget - last) / sigma)
    if math.isfinite(rho) and math.isfinite(sigma) and rho + sigma > 0:
        points.add((last + sigma * span - first) / (rho + sigma))
    cuts = sorted(x for x in points if 0.0 <= x <= span)
    return sum((b - a) * (ceiling(a) + ceiling(b)) / 2 for a, b in zip(cuts, cuts[1:]))


def _memory_area_span(problem: Problem, device: int, trips: list[float]) -> float:
    """A span the budget forces on ``device`` by the memory-time area its activations need.

    Every live interval lies within the device's span [T0, T1] (it opens with one of its ops and closes with
    another), so the live sum's integral over the span is at least the sum of all N microbatches' areas
    (:func:`memory_area`). At any time the live sum is at most:

    - the budget;
    - at T0 + x, what the forwards started by then allocated: all of them but the last ran before it within x,
      so at most the largest activation plus rho x, rho being the most activation per unit of forward time
      among the device's stages;
    - at T1 - x, what is still to be released: every live interval closes at the end of a B (activation less
      weight share; the whole activation when the backward is not split) or a W (the weight share) ending after
      that time, and all those ops but the one running then run within the last x, so at most the largest
      release of one op plus sigma x, sigma being the most release per unit of op time.

    The integral over a span S of the least of the three (:func:`_live_ceiling_area`) does not shrink as S
    grows (shift the head line by the extra length: no point's ceiling falls), so the span is at least every S
    whose integral stays below the areas' sum; bisection finds the largest such S it can certify. Without the
    two ramps this is the plain area bound, budget x span >= the areas' sum.
    """
    budget = problem.budget
    if budget is None or budget[device] <= 0:
        return 0.0
    room = budget[device] * (1 + _EPS)
    stages = problem.stages_on_device(device)
    need = problem.num_microbatches * memory_area(problem, device, trips) * (1 - _EPS)
    head = _rate_and_first([(problem.activation[s], problem.forward[s]) for s in stages])
    kinds = (OpKind.B, OpKind.W) if problem.split_backward else (OpKind.B,)
    tail = _rate_and_first([(problem.released_by(kind, s), problem.duration(problem.op(kind, s, 0)))
                            for s in stages for kind in kinds])
    low = need / room
    # Over low + the two ramps' rise times the ceiling loses at most room x those times, so this meets `need`.
    high = low + sum(max(0.0, (room - first) / rate) for rate, first in (head, tail) if 0 < rate < math.inf)
    high += _EPS * (1 + high)
    for _ in range(60):
        middle = (low + high) / 2
        if _live_ceiling_area(middle, room, head, tail) < need:
            low = middle
        else:
            high = middle
    return low


def device_lower_bounds(problem: Problem) -> list[tuple[float, float]]:
    """Per device, (earliest first start, least span) that every schedule within the budget obeys.

    The span is at least the device's work plus the idle time it cannot avoid. With one chunk per device:

    - head window: from the start of F(d, 0) to the start of B(d, 0) lies a round trip up and down the
      pipeline; only forwards can run in it (backwards go in microbatch order and W follows its B), at most as
      many as the budget holds, so the rest of it is idle;
    - tail window: from the end of F(d, N-1) to the start of B(d, N-1) lies the same trip less one forward;
      only the B and W of microbatches still held in memory can fill it (:func:`_tail_fill`);
    - memory chain: a tight budget spaces the forwards a round trip apart (:func:`_memory_chain`).

    With several chunks per device, the idle time the budget forces at its head and tail
    (:func:`_chunk_windows_idle`), and the memory chain through each of its stages, where a live microbatch
    holds its activations on all the device's lower stages too (:func:`_nested_memory_chain`); and with any
    number of chunks, the memory-time area all activations need within the budget (:func:`_memory_area_span`).

    When the budget cannot hold all N microbatches, B(d, 0) starts before F(d, N-1) and the windows are
    disjoint, so their idle times add; otherwise the larger counts. Valid for the symmetry-broken model, hence
    for the problem (the solver's symmetry breaking keeps an optimal schedule: see ``_Model._add_symmetry`` in
    :mod:`pipeplan.solver`).
    """
    head = _first_forward_time(problem)
    trips = round_trips(problem)
    n = problem.num_microbatches
    bounds = []
    for d in range(problem.num_devices):
        stages = problem.stages_on_device(d)
        start = min(head[s] for s in stages)
        span = problem.device_work(d)
        if problem.num_chunks == 1:
            (s,) = stages
            in_flight = min(n, problem.max_in_flight(d) or n)
            window = trips[s]
            idle_head = max(0.0, window - in_flight * problem.forward[s])
            idle_tail = max(0.0, window - problem.forward[s] - _tail_fill(problem, s, in_flight))
            span += idle_head + idle_tail if n > in_flight else max(idle_head, idle_tail)
            span = max(span, _memory_chain(problem, s, in_flight, window))
        elif problem.budget is not None:
            span = max(span + _chunk_windows_idle(problem, d, trips), _nested_memory_chain(problem, d, trips))
        span = max(span, _memory_area_span(problem, d, trips))
        bounds.append((start, span))
    return bounds


def device_end_lower_bounds(problem: Problem) -> list[float]:
    """Per device, a time before which it cannot finish, in any schedule within the budget.

    Besides its first start plus its least span: the last B on device d is B(s, N-1) of its lowest stage s (it
    depends on every other B there). By its end the device has done all its work except the W it still holds;
    those hold weight_activation each, so the budget limits how many. From there a chain of backwards (and
    links) runs down to every lower stage s', whose device then still runs W(s', N-1).
    """
    n = problem.num_microbatches
    split = problem.split_backward
    budget = problem.budget
    ends = [start + span for start, span in device_lower_bounds(problem)]
    head = _first_forward_time(problem)
    num_stages = problem.num_model_stages
    # below[t]: the sum over stages u < t of B(u) and the link after u; the chain of backwards from a device's
    # lowest stage down to a lower `target` takes below[lowest] - below[target].
    below = [0.0] * (num_stages + 1)
    for t in range(num_stages):
        below[t + 1] = below[t] + problem.link_latency(t) + problem.backward[t]
    # reach[s]: the latest (end of a device's last B) + below[its lowest stage] over devices whose lowest stage
    # is s or above; the chain from each reaches every lower stage, so a suffix maximum serves all targets.
    reach = [-math.inf] * (num_stages + 1)
    for d in range(problem.num_devices):
        stages = problem.stages_on_device(d)
        lowest = min(stages)
        work_fb = n * sum(problem.forward[s] + problem.backward[s] for s in stages)
        last_b_end = head[lowest] + work_fb
        if split:
            held_max = n * len(stages)
            min_wact = min(problem.weight_activation[s] for s in stages)
            if budget is not None and min_wact > 0:
                held_max = min(held_max, int(math.floor(budget[d] / min_wact + 1e-9)))
            w_max = max(problem.backward_weight[s] for s in stages)
            last_b_end = max(last_b_end, head[lowest] + problem.device_work(d) - held_max * w_max)
        reach[lowest] = max(reach[lowest], last_b_end + below[lowest])
    for target in range(num_stages - 1, -1, -1):
        reach[target] = max(reach[target], reach[target + 1])
        if reach[target] > -math.inf:
            device = problem.device_of(target)
            ends[device] = max(ends[device], reach[target] - below[target] + problem.backward_weight[target])
    return ends


def makespan_lower_bound(problem: Problem) -> float:
    """A makespan no schedule within the budget beats: the latest of the devices' earliest ends."""
    return max(device_end_lower_bounds(problem))


def stage_span_lower_bound(problem: Problem) -> float:
    """A stage span no schedule within the budget beats: per device, its least span, and its earliest end
    less its earliest start. The latter holds when a device starts late too: the chains that bound its end
    start from its own first forward (or a stage feeding it), so they move later with it."""
    head = _first_forward_time(problem)
    starts = [head[min(problem.stages_on_device(d))] for d in range(problem.num_devices)]
    spans = [span for _, span in device_lower_bounds(problem)]
    ends = device_end_lower_bounds(problem)
    return max(max(spans), max(end - start for end, start in zip(ends, starts)))
