"""Measured per-stage costs as a config's costs (``costs: {profile: file.csv}``): read per device or per model
stage, resolved relative to the config file, and every bad file matched to its message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeplan import ConfigError, load_config
from pipeplan.cli import USER_ERROR, main

PROFILE = "stage,forward,backward,backward_weight\n0,1.2,1.1,0.9\n1,1.0,1.0,0.8\n2,1.0,1.0,0.8\n3,1.4,1.3,1.0\n"


def write_config(folder: Path, costs: str, pipeline: str = "num_stages: 4, num_microbatches: 8") -> Path:
    path = folder / "config.yaml"
    path.write_text(f"name: profiled\npipeline: {{{pipeline}}}\ncosts: {{{costs}}}\n", encoding="utf-8")
    return path


def test_profile_per_device_gives_the_costs(tmp_path: Path) -> None:
    (tmp_path / "stages.csv").write_text(PROFILE, encoding="utf-8")
    problem = load_config(write_config(tmp_path, "profile: stages.csv, comm: 0.05")).problem
    assert problem.forward == (1.2, 1.0, 1.0, 1.4)
    assert problem.backward == (1.1, 1.0, 1.0, 1.3)
    assert problem.backward_weight == (0.9, 0.8, 0.8, 1.0)
    assert problem.comm == (0.05,) * 4


def test_profile_path_is_relative_to_the_config_not_the_working_directory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "stages.csv").write_text(PROFILE, encoding="utf-8")
    config = write_config(tmp_path, "profile: data/stages.csv")
    monkeypatch.chdir(tmp_path / "data")
    assert load_config(config).problem.forward[3] == 1.4


def test_profile_per_model_stage_with_chunks_and_without_weight_column(tmp_path: Path) -> None:
    rows = "".join(f"{s},{1 + s / 10},{2 + s / 10}\n" for s in range(4))
    (tmp_path / "stages.csv").write_text("stage,forward,backward\n" + rows, encoding="utf-8")
    problem = load_config(write_config(tmp_path, "profile: stages.csv",
                                       "num_stages: 2, num_microbatches: 4, num_chunks: 2, placement: v")).problem
    assert problem.forward == pytest.approx((1.0, 1.1, 1.2, 1.3))
    assert not problem.split_backward


BAD_PROFILES = [
    ("empty", "", "is empty; give a header stage,forward,backward,backward_weight"),
    ("header-only", "stage,forward,backward\n", "has a header but no stages"),
    ("bad-header", "stage,fwd,backward\n0,1,1\n", "the header must be stage,forward,backward,backward_weight"),
    ("not-a-number", PROFILE.replace("1.3,", "slow,"), "row 5, column backward: 'slow' is not a number"),
    ("negative", PROFILE.replace("0.8\n2", "-0.8\n2"), "row 3, column backward_weight: '-0.8' must be a finite"),
    ("stage-order", PROFILE.replace("\n2,", "\n7,"), "row 4: stage '7', expected 2"),
    ("short-row", PROFILE.replace("1,1.0,1.0,0.8", "1,1.0,1.0"), "row 3: 3 cells, expected 4"),
    ("row-count", PROFILE.split("3,1.4")[0], "has 3 stage rows; the config needs 4 (one per device)"),
]


@pytest.mark.parametrize(("label", "text", "message"), BAD_PROFILES, ids=[row[0] for row in BAD_PROFILES])
def test_bad_profile_names_file_row_and_column(label: str, text: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "stages.csv").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, "profile: stages.csv"))
    assert message in str(info.value)
    assert "stages.csv" in str(info.value)


@pytest.mark.parametrize(
    ("costs", "message"),
    [
        ("profile: stages.csv, forward: 1.0", "costs.profile replaces costs.forward; give the profile or the times"),
        ("profile: missing.csv", "does not exist; the path is relative to the config file"),
        ("profile: 3", "costs.profile must be the path of a CSV file, got 3"),
    ],
    ids=["profile-and-times", "missing-file", "not-a-path"],
)
def test_bad_profile_key(costs: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "stages.csv").write_text(PROFILE, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, costs))


def test_cli_plans_from_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "stages.csv").write_text(PROFILE, encoding="utf-8")
    config = str(write_config(tmp_path, "profile: stages.csv"))
    assert main(["simulate", config, "--schedule", "zb-h1", "--format", "json"]) == 0
    (tmp_path / "stages.csv").write_text(PROFILE.replace("1.3,", "slow,"), encoding="utf-8")
    assert main(["simulate", config, "--schedule", "zb-h1"]) == USER_ERROR
    assert "column backward: 'slow' is not a number" in capsys.readouterr().err
