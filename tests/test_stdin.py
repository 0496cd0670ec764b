"""``-`` as CONFIG or STUDY: the YAML is read from the standard input (``generate | pipeplan solve -``); as
``--out`` of ``report`` and ``export`` the standard output, and nowhere else a file or folder.

The text ``"-"`` reads the standard input; a file of that name is ``./-`` on the command line, ``Path("-")`` in
Python. A config read so is named "stdin" unless it sets ``name``, and its relative paths start from the working
folder.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan import ConfigError, load_config
from pipeplan.cli import USER_ERROR, main
from pipeplan.sizing.study import load_study

ROOT = Path(__file__).resolve().parent.parent
V48 = ROOT / "models" / "v-4x8.yaml"
STUDY = ROOT / "models" / "size-llama3.1-70b.yaml"
UNNAMED = "pipeline: {num_stages: 4, num_microbatches: 8}\ncosts: {forward: 1.5, backward: 2.5}\n"


class Stdin:
    """A standard input holding ``text`` (and a terminal or not: ``tty``)."""

    def __init__(self, text: str, tty: bool = False) -> None:
        self.buffer = io.BytesIO(text.encode("utf-8"))
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_piped_config_gives_what_its_file_gives() -> None:
    """Through a real pipe, in a real process: the same JSON as the file's path."""
    script = shutil.which("pipeplan") or str(Path(sys.executable).with_name("pipeplan"))
    command = [script, "simulate", "-", "--schedule", "zb-v", "--format", "json"]
    piped = subprocess.run(command, input=V48.read_bytes(), capture_output=True, timeout=120)
    assert piped.returncode == 0, piped.stderr.decode()
    assert piped.stderr == b""  # not a terminal: no note that it reads the standard input
    by_path = subprocess.run([script, "simulate", str(V48), *command[3:]], capture_output=True, timeout=120)
    assert by_path.returncode == 0, by_path.stderr.decode()
    assert json.loads(piped.stdout) == json.loads(by_path.stdout)
    assert json.loads(piped.stdout)["makespan"] == 21.98


def test_a_config_from_stdin_is_named_stdin_and_reads_paths_from_the_working_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", Stdin(UNNAMED))
    config = load_config("-")
    assert config.name == "stdin" and config.problem.forward == (1.5,) * 4
    (tmp_path / "stages.csv").write_text("stage,forward,backward\n0,1,2\n1,1,2\n2,1,2\n3,1.25,2\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", Stdin("name: mine\npipeline: {num_stages: 4, num_microbatches: 8}\n"
                                            "costs: {profile: stages.csv}\n"))
    config = load_config("-")
    assert config.name == "mine" and config.problem.forward == (1, 1, 1, 1.25)


def test_a_path_named_dash_is_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the text "-" means the standard input; Path("-") is the file of that name."""
    (tmp_path / "-").write_text(UNNAMED, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", Stdin("pipeline: {num_stages: 2, num_microbatches: 2}\n"))
    assert load_config(Path("-")).problem.num_devices == 4
    assert load_config("-").problem.num_devices == 2


@pytest.mark.parametrize(
    ("argv", "text", "message"),
    [
        (["simulate", "-", "--schedule", "1f1b"], "", "the config on the standard input is empty"),
        (["solve", "-"], "pipeline: {num_stages: 2", "YAML syntax error at line 1"),
        (["frontier", "-", "--budgets", "2:4:1"], "x" * 1_000_001, "the config on the standard input is larger than"),
        (["simulate", "-", "--from-torch-csv", "-"], UNNAMED, "CONFIG and '--from-torch-csv' cannot both be '-'"),
        (["size", "-"], "", "the study on the standard input is empty"),
        (["presets", "-"], "model: 3\n", "hardware is missing; a study needs model, hardware"),
        (["report", "-"], "", "a results folder cannot be read from the standard input ('-'); give a folder"),
        (["export", "-"], "", "a results folder cannot be read from the standard input ('-')"),
    ],
)
def test_bad_input_on_stdin_is_named_as_such(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            argv: list[str], text: str, message: str) -> None:
    monkeypatch.setattr(sys, "stdin", Stdin(text))
    code, out, err = run(capsys, *argv)
    assert code == USER_ERROR == 2
    assert message in err and "Traceback" not in err and out == ""


def test_a_study_from_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    text = STUDY.read_text(encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", Stdin(text))
    piped = load_study("-")
    assert piped.sweep_kwargs == load_study(STUDY).sweep_kwargs
    monkeypatch.setattr(sys, "stdin", Stdin(text))
    code, out, err = run(capsys, "presets", "-")
    assert code == 0, err
    assert out == run(capsys, "presets", str(STUDY))[1] and "llama3.1-70b" in out


def test_a_terminal_is_told_where_the_input_is_read(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Typed at a terminal, `pipeplan simulate -` would wait silently: it says first that it reads stdin."""
    monkeypatch.setattr(sys, "stdin", Stdin(UNNAMED, tty=True))
    code, out, err = run(capsys, "simulate", "-", "--schedule", "1f1b")
    assert code == 0, err
    assert err == "pipeplan: reading the YAML from the standard input; end it with Ctrl-D\n"
    assert "stdin: 1f1b" in out


def test_dash_as_out_is_the_standard_output_or_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`report`/`export --out -` write to stdout even where the working folder holds a folder named - (they
    failed: "File '-' is a directory"); `solve`, `frontier`, `size` used to make a folder named -, and --store a
    file named -: refused now, with nothing written; ./- is still that folder."""
    monkeypatch.chdir(tmp_path)
    assert main(["solve", str(V48), "--time-limit", "1", "--workers", "1", "--quiet", "--out", "done"]) == 0
    (tmp_path / "-").mkdir()
    capsys.readouterr()
    code, out, err = run(capsys, "export", "done", "--out", "-")
    assert code == 0, err
    assert out.startswith("0F0,") and len(out.splitlines()) == 4
    code, out, err = run(capsys, "report", "done", "--out", "-")
    assert code == 0, err
    assert out.startswith("<!DOCTYPE html>")
    (tmp_path / "-").rmdir()
    for argv, what in ((["solve", str(V48), "--out", "-"], "'--out': '-' (the standard output) cannot hold a folder"),
                       (["frontier", str(V48), "--budgets", "3:5:1", "--out", "-"], "cannot hold a folder"),
                       (["size", str(STUDY), "--out", "-"], "cannot hold a folder"),
                       (["frontier", str(V48), "--budgets", "3:5:1", "--store", "-"],
                        "'--store': '-' (the standard output) cannot hold a file; give a file name")):
        code, out, err = run(capsys, *argv)
        assert code == USER_ERROR, err
        assert what in err and out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done"]
    code, _, err = run(capsys, "solve", str(V48), "--time-limit", "1", "--workers", "1", "--quiet", "--out", "./-")
    assert code == 0, err
    assert (tmp_path / "-" / "summary.json").is_file()
    # ./- is that folder to read, and a file of that name to write (it was the standard output: Path("./-") is "-").
    code, out, err = run(capsys, "report", "./-", "--force")
    assert code == 0 and out == "wrote -/report.html\n", err
    code, out, err = run(capsys, "export", "done", "--out", "plan/../-/plan.csv")
    assert code == 0, err
    (tmp_path / "-" / "plan.csv").unlink()
    shutil.rmtree(tmp_path / "-")
    code, out, err = run(capsys, "export", "done", "--out", "./-")
    assert code == 0 and out.startswith("wrote -"), err
    assert (tmp_path / "-").read_text(encoding="utf-8").startswith("0F0,")
    code, out, err = run(capsys, "report", "./-")
    assert code == USER_ERROR and "Directory './-' is a file" in err, err


def test_stdin_that_is_text_only_or_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in stdin without bytes underneath (an IDE's, a test's StringIO) is read as text; a closed one is a
    message, not an internal error."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(UNNAMED))
    assert load_config("-").problem.forward == (1.5,) * 4
    closed = io.StringIO(UNNAMED)
    closed.close()
    monkeypatch.setattr(sys, "stdin", closed)
    with pytest.raises(ConfigError, match=r"^cannot read the config on the standard input \(I/O operation on closed "
                                          r"file\); give the file's path$"):
        load_config("-")


def test_a_torch_csv_typed_at_a_terminal_is_announced(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", Stdin("0F0\n", tty=True))
    code, _, err = run(capsys, "simulate", str(V48), "--from-torch-csv", "-")
    assert code == USER_ERROR
    assert err.startswith("pipeplan: reading the torch CSV from the standard input; end it with Ctrl-D\n"), err
