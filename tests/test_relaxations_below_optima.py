"""The relaxation bounds (the window bound, the device relaxation, the fluid bound, the collision bound) against
optima that CP-SAT proves without them on small random problems with unequal costs.

The optimum is proven once per example on the solver's model, which knows the closed-form bounds but none of
these (see ``exhaustive.proven_optimum``), and every one of the bounds must be at most it. Each
bound's own file tests it against every feasible order of tiny problems and against every warm start of larger
ones; this file holds the check against proven optima, so that the costly proof serves all of them."""

from __future__ import annotations

from exhaustive import OBJECTIVES, examples, proven_optimum, small_problems
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_collision_bound import collision
from test_device_bound import _bound as device_relaxation_bound
from test_fluid_bound import _bound as fluid_bound
from test_spacing import _window_bound

from pipeplan import Problem

EPS = 1e-9


@settings(max_examples=examples(6, 8), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(), st.sampled_from(OBJECTIVES))
def test_no_relaxation_bound_exceeds_an_optimum_proven_without_it(problem: Problem, objective: str) -> None:
    optimum = proven_optimum(problem, objective)
    assume(optimum is not None)  # an example CP-SAT does not prove in time is replaced by another
    assert optimum is not None
    assert _window_bound(problem) <= optimum + EPS, "window bound"
    assert device_relaxation_bound(problem, objective) <= optimum + EPS, "device relaxation"
    assert fluid_bound(problem, objective, optimum) <= optimum + EPS, "fluid bound"
    if objective == "makespan":
        assert collision(problem) <= optimum + EPS, "collision bound"
        # As the solver builds it: the window bound's cuts, a warm start as the hint, the closed form as the floor.
        assert collision(problem, as_the_solver=True) <= optimum + EPS, "collision bound with the window cuts"
