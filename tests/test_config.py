"""Loading configs: every bad-input fixture fails with its message; good files load into the right problem."""

from __future__ import annotations

import re
import string
import time
from pathlib import Path
from typing import Any

import pytest
from bad_configs import BAD_CONFIGS, CONFIGS, GOOD_CONFIGS
from hypothesis import given
from hypothesis import strategies as st

from pipeplan import (
    ConfigError,
    Problem,
    Schedule,
    ScheduleError,
    compute_metrics,
    generate,
    load_config,
    memory_timeline,
    simulate,
    solve,
)
from pipeplan.config import SolverSettings, config_from_dict, load_yaml
from pipeplan.frontier import frontier
from pipeplan.planner import compare
from pipeplan.problem import Op, OpKind, shown
from pipeplan.sizing.study import load_study, run_study
from pipeplan.torch_csv import from_torch_csv, read_torch_csv
from pipeplan.torch_run import run_in_torch

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
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "units": {"time": ""}},
         "units.time must be a text such as 'ms' or 'GiB', got ''"),
        ({"pipeline": {"num_stages": 2, "num_microbatches": 2}, "units": {"memory": "  "}},
         "units.memory must be a text such as 'ms' or 'GiB', got '  '"),
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
         "solver-seed-above-int32", "solver-time-limit-nan", "units-type", "units-empty", "units-blank",
         "units-unknown-key",
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


@pytest.mark.parametrize(
    ("text", "value"),
    [("3e-2", 0.03), ("1e308", 1e308), ("1E5", 1e5), ("-2.5e+3", -2500.0), (".5e1", 5.0), ("2.0e-1", 0.2),
     ("8", 8), ("1.5", 1.5), (".inf", float("inf")), ("1e", "1e"), ("e5", "e5"), ("3e-2x", "3e-2x"),
     ("1.2.3", "1.2.3"), ("'3e-2'", "3e-2")],
)
def test_floats_with_an_exponent_are_numbers(text: str, value: object) -> None:
    """YAML 1.1 (PyYAML) reads 3e-2 and 1e308 as text; configs read them as numbers, as YAML 1.2 does."""
    loaded = load_yaml(f"x: {text}\n")["x"]
    assert loaded == value and type(loaded) is type(value)


@pytest.mark.parametrize(
    ("text", "value"),
    [("010", 10), ("-010", -10), ("+7", 7), ("0", 0), ("1_000", 1000), ("0o17", 15), ("0x1f", 31),
     ("1:30", "1:30"), ("1:30.5", "1:30.5"), ("0b11", "0b11"), ("0o9", "0o9"), ("2024-01-01", "2024-01-01"),
     ("'010'", "010"), ("!!int 010", 10), ("0o_", "0o_"), ("0x_", "0x_"), ("._", "._"), (".5", 0.5)],
)
def test_integers_and_dates_are_read_as_yaml_1_2_reads_them(text: str, value: object) -> None:
    """YAML 1.1 (PyYAML) reads 010 as 8, 1:30 as 90, 0b11 as 3 and 2024-01-01 as a date, all silently; configs read
    integers as decimal (0o and 0x for octal and hexadecimal) and the rest as text, as YAML 1.2 does."""
    loaded = load_yaml(f"x: {text}\n")["x"]
    assert loaded == value and type(loaded) is type(value)


def test_an_int_tag_on_what_is_not_a_whole_number_names_its_line() -> None:
    with pytest.raises(ConfigError, match=r"^line 2: '1:30' is tagged !!int but is not a whole number"):
        load_yaml("a: 1\nx: !!int 1:30\n")


def test_a_leading_zero_or_a_colon_never_changes_a_config_value(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pipeline: {num_stages: 010, num_microbatches: 016}\ncosts: {forward: 01.5}\n", encoding="utf-8")
    problem = load_config(path).problem
    assert (problem.num_devices, problem.num_microbatches, problem.forward[0]) == (10, 16, 1.5)
    path.write_text("pipeline: {num_stages: 2, num_microbatches: 4}\nmemory: {budget: 1:00}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"memory\.budget.*'1:00'"):
        load_config(path)


@pytest.mark.parametrize(("text", "told"), [("42", "a number"), ("1.5", "a number"), ("yes", "true or false")])
def test_a_name_yaml_read_as_a_number_or_a_truth_value_is_told_to_be_quoted(tmp_path: Path, text: str,
                                                                           told: str) -> None:
    message = rf"name must be a non-empty text, got .*; YAML read it as {told}: put the name in quotes"
    with pytest.raises(ConfigError, match=message):
        config_from_dict(load_yaml(f"pipeline: {{num_stages: 2, num_microbatches: 2}}\nname: {text}\n"))
    study = tmp_path / "study.yaml"
    study.write_text(f"model: llama2-7b\nhardware: a100-80gb\nnum_gpus: [8]\nglobal_batch_size: 16\n"
                     f"seq_len: 2048\nname: {text}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_study(study)
    assert config_from_dict(load_yaml("pipeline: {num_stages: 2, num_microbatches: 2}\nname: 2024-01-01\n")
                            ).name == "2024-01-01"


def test_exponent_floats_reach_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("pipeline: {num_stages: 2, num_microbatches: 4}\ncosts: {forward: 3e-2, backward: 6e-2}\n"
                    "memory: {activation: 1e0, budget: 1e308}\n", encoding="utf-8")
    problem = load_config(path).problem
    assert problem.forward == (0.03, 0.03)
    assert problem.backward == (0.06, 0.06)
    assert problem.budget == (1e308, 1e308)


def test_merge_keys_and_aliases_are_read() -> None:
    config = load_config(CONFIGS / "good-yaml-features.yaml")
    problem = config.problem
    assert (problem.num_devices, problem.num_microbatches) == (4, 8)  # the key written beside '<<' wins
    assert problem.forward == (0.01,) * 4 and problem.backward_weight == (0.015,) * 4
    assert problem.budget == (2.0, 10.0, 10.0, 10.0)
    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\n")["b"] == {"x": 1, "y": 3}
    with pytest.raises(ConfigError, match="line 2: key 'y' is given twice"):
        load_yaml("a: &a {x: 1}\nb: {<<: *a, y: 3, y: 4}\n")


@pytest.mark.parametrize(("text", "message"), [
    ('name: "evil\\e[2J\\e[31mRED"\n', "line 1: the text 'evil\\x1b[2J\\x1b[31mRED' holds the control character "
     "U+001B; remove it"),
    ('x: 1\nunits: {time: "ms\\e]0;pwned\\a"}\n', "line 2: the text 'ms\\x1b]0;pwned\\x07' holds the control "
     "character U+001B"),
    ("x: 1\nname: a\x01b\n", "line 2: the file holds the character U+0001, which YAML does not allow; remove it"),
    ("name: a\x7fb\n", "line 1: the file holds the character U+007F"),
], ids=["escape", "title", "raw-control", "delete"])
def test_control_characters_are_refused_in_one_line(text: str, message: str) -> None:
    # Escapes reached the terminal as they were (one cleared the screen, one set the window title); a raw control
    # character gave PyYAML's message over two lines, with a character offset instead of a line.
    with pytest.raises(ConfigError) as caught:
        load_yaml(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)
    assert load_yaml("a: |\n  one\n  two\nb: \"tab\\there\"\n") == {"a": "one\ntwo\n", "b": "tab\there"}


def test_a_huge_value_is_never_rendered_in_full(tmp_path: Path) -> None:
    """Messages show a few items of a bad value: rendering a nested list in full could take gigabytes."""
    inner = "[" + ", ".join(["1"] * 5000) + "]"
    path = tmp_path / "c.yaml"
    path.write_text(f"pipeline: {{num_stages: 2, num_microbatches: 4}}\ncosts: {{forward: [{inner}, {inner}]}}\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith("costs.forward must be a finite number or a list of finite numbers, got [1, 1,")
    assert len(message) < 200
    with pytest.raises(ConfigError) as info:
        load_yaml(f"? {'x' * 100_000}\n: 1\n? {'x' * 100_000}\n: 2\n")
    assert "is given twice" in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pipeline: {num_stages: 2, num_microbatches: 4}\ncosts:\n  forward: [" + ",".join(["1"] * 400_000) + "]\n",
         "the file holds more than 20000 values"),
        ("x: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested more than 20 levels deep"),
        ("a: &a [1]\nb: *nope\n", "found undefined alias 'nope'"),
        ("? {a: 1}\n: 2\n", "line 1: a mapping is used as a key"),
        ("x: " + "9" * 5000 + "\n", "a value in the file cannot be read (Exceeds the limit (4300 digits)"),
    ],
    ids=["many-values", "deep-nesting", "undefined-alias", "mapping-as-key", "5000-digits"],
)
def test_yaml_that_would_take_long_or_crash_is_refused_quickly(text: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_yaml(text)
    assert time.monotonic() - started < 10  # well under a second alone; generous for a loaded machine


def test_a_file_over_the_size_limit_is_not_parsed(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"x: [" + b"1," * 10_000_000 + b"1]\n")  # ten million values, 20 MB
    started = time.monotonic()
    with pytest.raises(ConfigError, match="is larger than 1000000 bytes, the limit; a config is a few KB"):
        load_config(path)
    assert time.monotonic() - started < 5


def test_a_huge_whole_number_is_named_by_its_size() -> None:
    with pytest.raises(ConfigError, match="pipeline.num_stages must be >= 1, got a whole number with about 400 digits"):
        config_from_dict({"pipeline": {"num_stages": -(10**400), "num_microbatches": 2}})


def test_a_budget_below_one_chunk_names_the_least_budget_that_admits_a_schedule() -> None:
    """With chunks, one forward needs only its chunk's share of the activation, but no schedule fits below one
    microbatch on all the device's chunks: the message asks for that, so the fix it suggests is enough."""
    from pipeplan import solve

    fields = dict(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0, backward_weight=0.5, activation=1.0,
                  weight_activation=0.35, num_chunks=2, placement="loop")
    with pytest.raises(ConfigError, match=r"memory.budget \(0.3\) on device 0 is below one chunk's activation \(0.5, "
                                          r"memory.activation split over its 2 chunks\): no forward could ever run; "
                                          r"raise memory.budget to at least 1, "):
        Problem.build(**fields, budget=0.3)
    result = solve(Problem.build(**fields, budget=1.0), time_limit_s=2, num_workers=1)
    assert result.metrics.feasible and result.metrics.peak_memory <= 1.0 + 1e-9


def test_with_chunks_a_per_stage_message_says_its_values_are_per_chunk() -> None:
    """A config's 1.5 and 1 become 0.75 and 0.5 per chunk with two chunks: the message says why it shows those."""
    fields = dict(num_stages=4, num_microbatches=8, forward=1.0, backward=1.0, backward_weight=0.5, activation=1.0,
                  weight_activation=1.5)
    with pytest.raises(ConfigError, match=r"\(1.5\) is above memory.activation \(1\) on stage 0; "):
        Problem.build(**fields)
    with pytest.raises(ConfigError, match=r"\(0.75\) is above memory.activation \(0.5\) on stage 0 \(per chunk: a "
                                          r"device's values are split over its 2 chunks\); "):
        Problem.build(**fields, num_chunks=2)
    # The unsplit backward's message says so too (it quoted 0.175 of a file that says 0.35: a trial user's).
    with pytest.raises(ConfigError, match=r"^memory.weight_activation is 0.175 \(per chunk: a device's values are "
                                          r"split over its 2 chunks\) but the backward is not split"):
        Problem.build(4, 8, weight_activation=0.35, num_chunks=2, placement="v")
    # Printed with the digits that tell them apart (it said "(1) is above memory.activation (1)": a trial user's).
    with pytest.raises(ConfigError, match=r"\(1.0000001\) is above memory.activation \(1\) on stage 0; "):
        Problem.build(**{**fields, "weight_activation": 1.0000001})


@pytest.mark.parametrize(("stages", "microbatches", "message"), [
    (10**7, 8, "use at most 125,000 model stages (pipeline.num_stages x pipeline.num_chunks) with 8 microbatches"),
    (8, 10**9, "lower pipeline.num_microbatches to at most 125000"),
    (10**7, 10**7, "lower both pipeline.num_stages and pipeline.num_microbatches"),
])
def test_a_pipeline_too_large_to_replay_is_refused_before_it_is_built(stages: int, microbatches: int,
                                                                       message: str) -> None:
    # Checked before any per-stage list is made: 10**7 stages used to take a minute and gigabytes of memory
    # before the same check said "at most 0" microbatches, and 10**8 ran out of memory.
    with pytest.raises(ConfigError, match=re.escape(message)):
        Problem.build(stages, microbatches)


def _problem() -> Problem:
    return Problem.build(3, 4)


# Wrong types handed to the Python API: each used to fail inside (AttributeError, TypeError) instead of naming
# the argument. (call, error, message)
WRONG_TYPES: list[tuple[Any, type[Exception], str]] = [
    (lambda: simulate(_problem(), Schedule.from_lists("x", [["F0", "B0"], [], []])), ScheduleError,
     "schedule 'x' holds 'F0' at position 0 of device 0, not an Op; make ops with problem.op("),
    (lambda: simulate(_problem(), Schedule.from_lists("x", [[Op(OpKind.F, 0, 0.5)], [], []])), ScheduleError,
     "schedule 'x' has op F0.5@s0, whose stage and microbatch must be ints (got int and float)"),
    (lambda: simulate(_problem(), Schedule.from_lists("x", [[Op(OpKind.F, 0.0, 0)], [], []])), ScheduleError,
     "schedule 'x' has op F0@s0.0, whose stage and microbatch must be ints (got float and int)"),
    (lambda: simulate(_problem(), None), ScheduleError, "schedule must be a pipeplan.Schedule"),
    # Found by a new user's trial: the first raised TypeError (not iterable) inside; a string (a schedule's name)
    # is named as what it is.
    (lambda: Schedule.from_lists("x", 5), ScheduleError, "orders must be a list of one list of ops per device, got"),
    (lambda: Schedule.from_lists("x", [5, 6]), ScheduleError, "orders must be a list of one list of ops per device"),
    (lambda: simulate(_problem(), "gpipe"), ScheduleError, "schedule must be a pipeplan.Schedule (generate(name, "),
    (lambda: simulate("p", generate("1f1b", _problem())), ConfigError, "problem must be a pipeplan.Problem"),
    (lambda: solve("models/seed-8x64.yaml"), ConfigError,
     "problem must be a pipeplan.Problem (Problem.build(...), or load_config(path).problem), got str"),
    (lambda: solve(_problem(), {"time_limit_s": 1}), ConfigError, "settings must be a pipeplan.SolverSettings"),
    (lambda: solve(_problem(), hints="1f1b"), ConfigError, "hints must be a list of schedules"),
    (lambda: solve(_problem(), hints=[None]), ConfigError, "each of hints must be a pipeplan.Schedule"),
    (lambda: generate("1f1b", "x"), ConfigError, "problem must be a pipeplan.Problem"),
    (lambda: load_config(None), ConfigError, "path must be the path of a YAML config file, got NoneType"),
    (lambda: frontier(None, [2], SolverSettings()), ConfigError, "problem must be a pipeplan.Problem"),
    (lambda: _sweep(store="x.sqlite"), ConfigError, "store must be a pipeplan.store.Store"),
    (lambda: _sweep(progress=True), ConfigError, "progress must be a function taking each progress report"),
    (lambda: _sweep(stop=True), ConfigError, "stop must be a pipeplan.solver.StopRequest or None"),
    (lambda: run_study({"name": "x"}), ConfigError, "study must be a Study (load_study(path)), got dict"),
    # Found by a new user's trial: each failed inside (AttributeError, TypeError) or, for the switches, was read as
    # on ("no" is a true value) or made every row a skipped one.
    (lambda: load_study({"name": "x"}), ConfigError, "path must be the path of a YAML study file, got dict"),
    (lambda: _sweep(executor="local"), ConfigError, "executor must be an executor or None: LocalExecutor("),
    (lambda: _sweep(sequence_parallel="no"), ConfigError, "sequence_parallel must be true or false, got 'no'"),
    (lambda: _sweep(flash_attention=None), ConfigError, "flash_attention must be true or false, got None"),
    (lambda: _sweep(balanced="false"), ConfigError, "balanced must be true or false, got 'false'"),
    (lambda: _estimate(balanced="no"), ConfigError, "balanced must be true or false, got 'no'"),
    (lambda: solve(_problem(), stop=True), ConfigError, "stop must be a pipeplan.solver.StopRequest or None"),
    (lambda: solve(_problem(), progress=1), ConfigError, "progress must be a function taking each progress"),
    (lambda: frontier(_problem(), [2], stop=True), ConfigError, "stop must be a pipeplan.solver.StopRequest"),
    (lambda: frontier(_problem(), [2], None, "x"), ConfigError, "progress must be a function taking each"),
    (lambda: frontier(_problem(), [2], task_progress=3), ConfigError, "task_progress must be a function taking"),
    (lambda: frontier(_problem(), [2], store="x.sqlite"), ConfigError, "store must be a pipeplan.store.Store"),
    (lambda: frontier(_problem(), [2], executor="ray"), ConfigError, "executor must be an executor or None"),
    (lambda: compare(_problem(), {"time_limit_s": 1}), ConfigError, "settings must be a pipeplan.SolverSettings"),
    (lambda: compare(_problem(), stop=True), ConfigError, "stop must be a pipeplan.solver.StopRequest or None"),
    (lambda: compare(_problem(), time_limit_s=0), ConfigError, "time_limit_s must be a positive number"),
    (lambda: from_torch_csv(_problem(), b"0F0"), ConfigError, "text must be the CSV's text"),
    (lambda: from_torch_csv(_problem(), None), ConfigError, "text must be the CSV's text"),
    (lambda: run_in_torch(None), ConfigError, "jobs must be a list of TorchJob"),
    # A second new user's trial: AttributeErrors from inside, and a hint of another problem skipped without a word.
    (lambda: compute_metrics(None), ConfigError, "timeline must be a pipeplan Timeline (simulate(problem, schedule))"),
    (lambda: compute_metrics(generate("1f1b", _problem())), ConfigError, "timeline must be a pipeplan Timeline"),
    (lambda: memory_timeline(_problem()), ConfigError, "timeline must be a pipeplan Timeline"),
    (lambda: simulate(_problem(), Schedule.from_lists("x", [[Op("F", 0, 0)], [], []])),  # type: ignore[arg-type]
     ScheduleError, "schedule 'x' holds an op of kind 'F' at position 0 of device 0; a kind is OpKind.F"),
    (lambda: read_torch_csv(None, "plan.csv"), ConfigError, "problem must be a pipeplan.Problem"),
    (lambda: read_torch_csv(_problem(), None), ConfigError, "path must be the path of a torch CSV file"),
    (lambda: from_torch_csv(None, "0F0"), ConfigError, "problem must be a pipeplan.Problem"),
    (lambda: solve(Problem.build(3, 8), hints=[generate("1f1b", _problem())]), ConfigError,
     "hints[0] is not a schedule of this problem: schedule '1f1b' is missing 24 ops"),
]


def _estimate(**options: Any) -> Any:
    from pipeplan.sizing import estimate

    return estimate(model="llama3.1-8b", hardware="h100-80gb", global_batch_size=16, seq_len=256,
                    pipeline_parallel=2, **options)


def _sweep(**hooks: Any) -> Any:
    from pipeplan.sizing import sweep

    return sweep(model="llama3.1-8b", hardware="h100-80gb", num_gpus=8, global_batch_size=16, seq_len=256,
                 tensor_parallel=1, pipeline_parallel=2, **hooks)


@pytest.mark.parametrize(("call", "error", "message"), WRONG_TYPES, ids=[row[2][:30] for row in WRONG_TYPES])
def test_a_wrong_type_names_the_argument(call: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_one_schedule_as_hints_is_taken_as_a_list() -> None:
    problem = _problem()
    assert solve(problem, hints=generate("1f1b", problem), time_limit_s=5, num_workers=1).metrics.feasible


def test_the_early_size_check_counts_w_when_the_backward_is_split() -> None:
    with pytest.raises(ConfigError, match=re.escape("24,000,000 ops per step (8 model stages x 1000000 microbatches "
                                                    "x 3 kinds)") + ".*at most 83333"):
        Problem.build(8, 10**6, backward_weight=1.0)


def test_a_range_counts_as_a_list() -> None:
    assert Problem.build(4, 8, forward=range(1, 5)).forward == (1.0, 2.0, 3.0, 4.0)


def test_numpy_arrays_and_pandas_series_count_as_lists() -> None:
    import numpy as np
    import pandas as pd

    from pipeplan import plan

    problem = Problem.build(4, 8, forward=np.array([1.0, 1.0, 1.0, 1.2]), backward_weight=np.array(0.5),
                            comm=pd.Series([0.1] * 4), budget=np.array([4, 4, 4, 5]))
    listed = Problem.build(4, 8, forward=[1.0, 1.0, 1.0, 1.2], backward_weight=0.5, comm=[0.1] * 4,
                           budget=[4, 4, 4, 5])
    assert problem == listed
    assert listed.with_budget(np.array([3, 3, 3, 3.5])).budget == (3.0, 3.0, 3.0, 3.5)
    assert plan(4, 8, 4, forward=np.array([1.0, 1.0, 1.0, 1.2]))["chosen"] == plan(4, 8, 4, forward=[1.0, 1.0, 1.0,
                                                                                                     1.2])["chosen"]
    # The early size check sees W in an array too (3 kinds: at most 83333 microbatches, not 125000).
    with pytest.raises(ConfigError, match="at most 83333"):
        Problem.build(8, 10**6, backward_weight=np.array([1.0] * 8))
    with pytest.raises(ConfigError, match="costs.forward must be a number or a list of numbers, got ndarray of 2 "
                                          "dimensions"):
        Problem.build(4, 8, forward=np.ones((2, 2)))
    with pytest.raises(ConfigError, match="memory.budget must be a number or a list of numbers, got DataFrame of 2 "
                                          "dimensions"):
        Problem.build(4, 8, budget=pd.DataFrame({"budget": [4, 4, 4, 4]}))
    with pytest.raises(ConfigError, match="costs.forward must be a finite number .* got nan"):
        Problem.build(4, 8, forward=np.array([1.0, np.nan, 1.0, 1.0]))


def test_mixing_per_model_stage_lists_with_device_shares_is_warned_about(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """With chunks a number is each device's share, split over its chunks, and a list of P x v values is per model
    stage: `backward_weight: 0.25` beside an 8-value forward was silently 0.125 a model stage."""
    mixed = ("pipeline: {num_stages: 4, num_microbatches: 8, num_chunks: 2}\n"
             "costs: {forward: [0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.8], backward: 1, backward_weight: 0.25}\n")
    path = tmp_path / "mixed.yaml"
    path.write_text(mixed, encoding="utf-8")
    config = load_config(path)
    assert config.problem.backward_weight[0] == 0.125  # the meaning is unchanged: only said
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith("costs.forward lists one value per model stage, taken as written, while "
                                          "costs.backward, costs.backward_weight are each device's share")
    caplog.clear()
    # A cost left at its default is a share too (the default backward 2.0 is 1.0 a model stage here).
    path.write_text(mixed.replace("backward: 1, backward_weight: 0.25", "backward_weight: 0"), encoding="utf-8")
    load_config(path)
    [record] = caplog.records
    assert "costs.forward lists one value per model stage" in record.getMessage()
    assert "while costs.backward (its default, 2) is each device's share" in record.getMessage()
    caplog.clear()
    stages = "[1, 1, 1, 1, 1, 1, 1, 1]"
    for same in (mixed.replace("[0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.8]", "0.5"),  # all shares
                 mixed.replace("backward: 1, backward_weight: 0.25", f"backward: {stages}, backward_weight: 0"),  # 0
                 mixed.replace("num_chunks: 2", "num_chunks: 1").replace("[0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.8]",
                                                                         "[0.6, 0.5, 0.5, 0.8]")):  # no chunks
        path.write_text(same, encoding="utf-8")
        load_config(path)
    assert not caplog.records


def test_a_comm_value_no_link_uses_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """comm[s] is the link after model stage s: with one chunk the last value, in V placement also the turn's (two
    model stages on one device), has no effect, and was accepted without a word."""
    path = tmp_path / "comm.yaml"
    path.write_text("pipeline: {num_stages: 4, num_microbatches: 8}\ncosts: {comm: [0.1, 0.2, 0.3, 0.4]}\n",
                    encoding="utf-8")
    assert load_config(path).problem.comm == (0.1, 0.2, 0.3, 0.4)  # the values stay: only said
    [record] = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage() == ("costs.comm[3] is 0.4 but is not used: model stage 3 is the last, with no link "
                                   "after it (comm[s] is the link from model stage s to s + 1); set it to 0, or "
                                   "move it to the link it was meant for")
    caplog.clear()
    v = ("pipeline: {num_stages: 4, num_microbatches: 8, num_chunks: 2, placement: v}\n"
         "costs: {backward_weight: 0.5, comm: [0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.3]}\n")
    path.write_text(v, encoding="utf-8")
    load_config(path)
    assert [r.getMessage().split(" (comm[s]")[0] for r in caplog.records] == [
        "costs.comm[3] is 0.2 but is not used: model stages 3 and 4 are both on device 3 (the turn of the V "
        "placement), and a latency applies only between devices",
        "costs.comm[7] is 0.3 but is not used: model stage 7 is the last, with no link after it"]
    caplog.clear()
    # Zeros there, one latency written out (a config record of a run with chunks, best.yaml), a number, or a
    # per-device list with chunks (device 3's value is also the link after model stage 4): nothing to say.
    for comm in ("[0.1, 0.1, 0.1, 0, 0.1, 0.1, 0.1, 0]", "[0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]",
                 "[0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0]", "0.3", "[0.1, 0.1, 0.1, 0.2]"):
        path.write_text(v.replace("[0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.3]", comm), encoding="utf-8")
        load_config(path)
    assert not caplog.records


def test_a_negative_value_in_a_list_is_named_by_its_place() -> None:
    """`costs.forward: [1, -2, 1, 1]` said "costs.forward must be >= 0, got -2", without saying which value."""
    with pytest.raises(ConfigError, match=r"^costs\.forward\[1\] must be >= 0, got -2$"):
        Problem.build(4, 8, forward=[1, -2, 1, 1])
    with pytest.raises(ConfigError, match=r"^memory\.budget\[2\] must be positive, got -1 \(.*; leave memory\.budget "
                                          r"out for no limit\)$"):
        Problem.build(4, 8, budget=[4, 4, -1, 4])
    with pytest.raises(ConfigError, match=r"^costs\.forward must be >= 0, got -2$"):
        Problem.build(4, 8, forward=-2)


def test_a_torch_csv_given_as_the_config_is_told_so(tmp_path: Path) -> None:
    """A torch schedule CSV given where a config goes read as one YAML text ("got str"): now the message says what
    the file looks like and where it goes."""
    path = tmp_path / "plan.csv"
    path.write_text("0F0,0F1,0I0,0W0\n1F0,1I0,1W0,1F1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"got str \(this looks like a torch schedule CSV: replay it with 'pipeplan "
                                          r"simulate CONFIG --from-torch-csv FILE'\)$"):
        load_config(path)
    path.write_text("hello\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"got str$"):
        load_config(path)


def test_a_long_text_in_a_message_is_cut_in_the_middle_inside_its_quotes() -> None:
    cell = "# Two chunks per device in V placement: a config, not a schedule"
    assert shown(cell, 40) == "'# Two chunks per d...g, not a schedule'"
    assert shown("short", 40) == "'short'"
    # A backslash and "ue000" in the text stay what they are; the cut is where it belongs.
    cut = shown("\\ue000" + "x" * 200, 40)
    assert cut.startswith("'\\\\ue000xxx") and cut.endswith("xxx'") and cut.count("...") == 1 and len(cut) == 40


@given(st.text(alphabet=string.ascii_letters + " ,:#", max_size=200), st.integers(min_value=5, max_value=120))
def test_a_cut_text_keeps_its_own_start_and_end(text: str, limit: int) -> None:
    cut = shown(text, limit)
    assert len(cut) <= limit
    if cut == repr(text):
        return
    head, dots, tail = cut[1:-1].partition("...")  # the text holds no "." and no quote: repr adds only quotes
    assert cut[0] == cut[-1] == "'" and dots == "..."
    assert text.startswith(head) and text.endswith(tail) and len(head) + len(tail) < len(text)


@given(st.text(max_size=200), st.integers(min_value=5, max_value=120))
def test_a_shown_text_fits_its_limit_and_opens_with_a_quote(text: str, limit: int) -> None:
    cut = shown(text, limit)
    assert len(cut) <= limit and cut[0] in "'\"" and (cut == repr(text) or "..." in cut)
