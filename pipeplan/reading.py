"""Reading the text files a user points pipeplan at, with a size limit.

Every file pipeplan reads (configs, studies, model and hardware files, stage profiles, torch CSVs, result
folders) goes through :func:`read_text`: at most a limit's worth of bytes is read, so a wrong path such as
``/dev/zero`` or a huge file is refused in a line instead of filling the machine's memory, and every failure is
a :class:`~pipeplan.problem.ConfigError` that names the file and what to do.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeplan.problem import ConfigError

# Size limits, bytes. A config, study, model or hardware file or a stage profile is a few KB.
SMALL_FILE_BYTES = 1_000_000
# A torch CSV lists every op of a step, a few bytes each: 2,000,000 ops (the most a config may have) take about
# 16 MB.
TORCH_CSV_BYTES = 64_000_000
# A result folder's files hold every op of a step with its times, about 80 bytes each: 2,000,000 ops take about
# 160 MB.
RESULT_FILE_BYTES = 400_000_000


def read_text(file: Path, what: str, limit: int, missing: str = "check the path",
              larger: str = "check that this is the right file", keep_mark: bool = False) -> str:
    """The UTF-8 text of ``file`` (a byte-order mark dropped unless ``keep_mark``), which must hold at most
    ``limit`` bytes.

    ``what`` names the file in messages (e.g. "study file"); ``missing`` is the advice when it does not exist,
    ``larger`` when it is over the limit. Raises :class:`ConfigError`.
    """
    try:
        with file.open("rb") as handle:
            raw = handle.read(limit + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} {str(file)!r} does not exist; {missing}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {str(file)!r} is a folder, not a file; give the file's path") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(file)!r} ({exc.strerror or exc}); check the path and its "
                          "permissions") from None
    return decoded(raw, f"{what} {str(file)!r}", limit, larger, keep_mark)


def decoded(raw: bytes, named: str, limit: int, larger: str = "check that this is the right file",
            keep_mark: bool = False) -> str:
    """``raw`` (at most ``limit`` + 1 bytes read from a file or stream) as text, as :func:`read_text` reads it;
    ``named`` names the file in messages ("torch CSV 'a.csv'")."""
    if len(raw) > limit:
        raise ConfigError(f"{named} is larger than {limit} bytes, the limit; {larger}")
    try:
        return raw.decode("utf-8" if keep_mark else "utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{named} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start} (line "
                          f"{line}) is not valid UTF-8; save the file as UTF-8") from None


# The path that names the standard input (as typed: the file of that name is ./-).
STDIN = "-"


@dataclass(frozen=True)
class Source:
    """The text of a YAML input (a config or a study) and where it came from: ``name`` is the default name of
    what it describes (the file's stem, or "stdin"), ``base`` the folder its relative paths start from (the
    file's, or the working folder for the standard input), ``named`` how messages name it."""

    text: str
    name: str
    base: Path
    named: str


def read_source(path: str | os.PathLike[str], what: str, limit: int, larger: str) -> Source:
    """The text of the ``what`` ("config file") at ``path``, read as :func:`read_text` reads it, or from the
    standard input when ``path`` is the text ``"-"`` (a Path of that name is the file)."""
    if isinstance(path, str) and path == STDIN:
        named = f"the {what.removesuffix(' file')} on the standard input"
        return Source(read_stdin(named, limit, larger), "stdin", Path.cwd(), named)
    file = Path(path)
    return Source(read_text(file, what, limit, larger=larger), stem_text(file), file.parent, f"the {what}")


def stem_text(path: Path) -> str:
    """``path``'s stem as text, for a default name: bytes of a file name that are not UTF-8 (which Python keeps as
    lone surrogates, which no file or JSON can hold) become U+FFFD, as a terminal shows them."""
    return os.fsencode(path.stem).decode("utf-8", "replace")


def read_stdin(named: str, limit: int, larger: str = "check that this is the right file",
               keep_mark: bool = False) -> str:
    """The standard input's text, read as :func:`read_text` reads a file; ``named`` names it in messages ("the
    config on the standard input"). A missing or closed stdin is a :class:`ConfigError`, and a stand-in without
    bytes underneath (a test's, an IDE's) is read as it reads."""
    if sys.stdin is None:  # e.g. a GUI launcher: there is nothing to read
        raise ConfigError(f"{named} cannot be read: this process has no standard input; give the file's path")
    try:  # the bytes under a text stdin
        raw = getattr(sys.stdin, "buffer", sys.stdin).read(limit + 1)
    except (OSError, ValueError) as exc:  # ValueError: a closed stdin
        raise ConfigError(f"cannot read {named} ({getattr(exc, 'strerror', None) or exc}); give the file's "
                          "path") from None
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    return decoded(raw, named, limit, larger, keep_mark)
