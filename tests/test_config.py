"""Loading configs: every bad-input fixture fails with its message; good files load into the right problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_configs import BAD_CONFIGS, CONFIGS, GOOD_CONFIGS

from pipeplan import ConfigError, Problem, load_config
from pipeplan.config import SolverSettings, config_from_dict

SEED = CONFIGS.parent.parent / "models" / "seed-8x64.yaml"


@pytest.mark.parametrize(("fixture", "message"), BAD_CONFIGS, ids=[row[0] for row in BAD_CONFIGS])
def test_bad_config_raises_config_error_with_its_message(fixture: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / fixture)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_every_bad_fixture_is_in_the_table() -> None:
    on_disk = {path.name for path in CONFIGS.glob("bad-*.yaml")}
    in_table = {fixture for fixture, _ in BAD_CONFIGS}
    assert on_disk == in_table - {"bad-missing-file.yaml"}


def test_missing_file_is_not_a_fixture() -> None:
    assert not (CONFIGS / "bad-missing-file.yaml").exists()


def test_a_folder_is_not_a_config() -> None:
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(CONFIGS)


@pytest.mark.parametrize("path", GOOD_CONFIGS, ids=[p.name for p in GOOD_CONFIGS])
def test_good_configs_load(path: Path) -> None:
    config = load_config(path)
    assert isinstance(config.problem, Problem)
    assert config.name


def test_seed_config_is_the_seed_problem() -> None:
    config = load_config(SEED)
    problem = config.problem
    assert config.name == "seed-8x64"
    assert (problem.num_devices, problem.num_microbatches, problem.num_chunks) == (8, 64, 1)
    assert problem.forward == (1.0,) * 8
    assert problem.backward == (2.0,) * 8
    assert not problem.split_backward
    assert problem.comm == (0.0,) * 8
    assert problem.activation == (1.0,) * 8
    assert problem.budget == (8.0,) * 8


def test_per_stage_lists_units_and_split_backward() -> None:
    config = load_config(CONFIGS / "good-per-stage-split.yaml")
    problem = config.problem
    assert config.name == "uneven-4x12"
    assert problem.forward == (1.2, 1.0, 1.0, 1.4)
    assert problem.backward_weight == (0.9, 0.8, 0.8, 1.0)
    assert problem.split_backward
    assert problem.weight_activation == (0.5,) * 4
    assert problem.budget == (8, 8, 6, 5)
    assert (config.units.time, config.units.memory) == ("ms", "GiB")


def test_defaults_and_name_from_file_stem() -> None:
    config = load_config(CONFIGS / "good-minimal.yaml")
    problem = config.problem
    assert config.name == "good-minimal"
    assert problem.forward == (1.0,) * 3
    assert problem.backward == (2.0,) * 3
    assert problem.budget is None
    assert config.solver.objective == "makespan"
    assert (config.units.time, config.units.memory) == ("units", "slots")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"time_limit": 5}},
         "unknown key solver.time_limit"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"time_limit_s": 0}},
         "solver.time_limit_s must be a positive number"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"num_workers": 0}},
         "solver.num_workers must be a whole number from 1 to 10000, got 0"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"num_workers": 100000}},
         "solver.num_workers must be a whole number from 1 to 10000, got 100000"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"random_seed": 2**31}},
         "solver.random_seed must be a whole number from 0 to 2147483647, got 2147483648"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "solver": {"time_limit_s": float("nan")}},
         "solver.time_limit_s must be a positive number"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "units": {"time": 3}},
         "units.time must be a text"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "units": {"money": "EUR"}},
         "unknown key units.money"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "name": ""}, "name must be a non-empty text"),
        ({"pipeline": {"num_stages": True, "num_microbatches": 2}}, "pipeline.num_stages must be a whole number"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2, "placement": "zigzag"}},
         "pipeline.placement must be one of loop, v"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "costs": {"forward": 0, "backward": 0}},
         "stage 0 has zero forward and backward time"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "memory": {"weight_activation": 0.5}},
         "memory.weight_activation is 0.5 but the backward is not split"),
        ("pipeline", "the top level must be a mapping"),
    ],
    ids=["solver-unknown-key", "solver-time-limit", "solver-workers", "solver-workers-above-cp-sat",
         "solver-seed-above-int32", "solver-time-limit-nan", "units-type", "units-unknown-key",
         "empty-name", "bool-count", "placement", "zero-work", "weight-activation-unsplit", "scalar-top-level"],
)
def test_config_from_dict_errors(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


def test_solver_section_is_read() -> None:
    config = config_from_dict({
        "pipeline": {"num_stages": 2, "num_microbatches": 2},
        "solver": {"objective": "stage_span", "time_limit_s": 5, "num_workers": 1, "random_seed": 7},
    })
    assert config.solver == SolverSettings(objective="stage_span", time_limit_s=5, num_workers=1, random_seed=7)
