"""Every file a user names is read with a size limit: a wrong path such as /dev/zero is refused in one line.

Before, only configs had a limit: a stage profile, a torch CSV, a study, a model file or a result folder's JSON
pointing at /dev/zero was read until the machine's memory ran out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeplan import ConfigError, Problem, generate, load_config
from pipeplan.reading import read_text
from pipeplan.sizing import load_hardware, load_model
from pipeplan.sizing.study import load_study
from pipeplan.torch_csv import from_torch_csv, read_torch_csv, to_torch_csv

ZERO = Path("/dev/zero")
pytestmark = pytest.mark.skipif(not ZERO.exists(), reason="needs /dev/zero")


def _profile_config(tmp_path: Path) -> Path:
    config = tmp_path / "profiled.yaml"
    config.write_text("pipeline: {num_stages: 2, num_microbatches: 4}\ncosts: {profile: /dev/zero}\n",
                      encoding="utf-8")
    return config


def _zero_yaml(tmp_path: Path) -> Path:
    """A YAML file name (model and hardware files are told from preset names by it) for /dev/zero."""
    link = tmp_path / "zero.yaml"
    link.symlink_to(ZERO)
    return link


READERS: list[tuple[str, Callable[[Path], Any], str]] = [
    ("config", lambda tmp: load_config(ZERO), "config file '/dev/zero' is larger than 1000000 bytes, the limit"),
    ("profile", lambda tmp: load_config(_profile_config(tmp)),
     "costs.profile '/dev/zero' is larger than 1000000 bytes, the limit"),
    ("torch-csv", lambda tmp: read_torch_csv(Problem.build(2, 4), ZERO),
     "torch CSV '/dev/zero' is larger than 64000000 bytes, the limit"),
    ("study", lambda tmp: load_study(ZERO), "study file '/dev/zero' is larger than 1000000 bytes, the limit"),
    ("model", lambda tmp: load_model(str(_zero_yaml(tmp))), "zero.yaml' is larger than 1000000 bytes, the limit"),
    ("hardware", lambda tmp: load_hardware(str(_zero_yaml(tmp))), "zero.yaml' is larger than 1000000 bytes, the limit"),
]


@pytest.mark.parametrize(("read", "message"), [row[1:] for row in READERS], ids=[row[0] for row in READERS])
def test_dev_zero_is_refused_by_every_reader(tmp_path: Path, read: Callable[[Path], Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        read(tmp_path)


def test_read_text_names_the_file_and_the_fix(tmp_path: Path) -> None:
    text = tmp_path / "a.txt"
    text.write_bytes(b"\xef\xbb\xbfhello\n")
    assert read_text(text, "note", 100) == "hello\n"  # the byte-order mark dropped
    with pytest.raises(ConfigError, match=r"note '.*a\.txt' is larger than 3 bytes, the limit; check that this"):
        read_text(text, "note", 3)
    with pytest.raises(ConfigError, match=r"note '.*b\.txt' does not exist; look elsewhere"):
        read_text(tmp_path / "b.txt", "note", 100, missing="look elsewhere")
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        read_text(tmp_path, "note", 100)
    text.write_bytes(b"ok\n\xff")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text: byte 0xff at offset 3 \(line 2\)"):
        read_text(text, "note", 100)


def test_a_torch_csv_with_a_byte_order_mark_is_refused_and_a_long_bad_cell_is_cut(tmp_path: Path) -> None:
    """A byte-order mark: torch's reader takes it as part of the first action and fails on every rank, so the
    import, the check before a torch run, refuses it too (it used to drop the mark and replay the file)."""
    problem = Problem.build(2, 4)
    schedule = generate("1f1b", problem)
    text = to_torch_csv(problem, schedule)
    marked = tmp_path / "marked.csv"
    marked.write_text("\ufeff" + text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"marked\.csv starts with a byte-order mark"):
        read_torch_csv(problem, marked)
    marked.write_text(text, encoding="utf-8")
    assert read_torch_csv(problem, marked).orders == schedule.orders
    with pytest.raises(ConfigError) as caught:
        from_torch_csv(problem, "x" * 10_000 + "\n")
    assert "is not a compute action" in str(caught.value) and len(str(caught.value)) < 400
