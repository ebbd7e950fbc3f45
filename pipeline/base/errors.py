"""The user-error types of the pipeline's commands."""

from __future__ import annotations

from pathlib import Path


class CLIError(Exception):
    """A user error in the data or the environment: the CLI prints it as one line on stderr
    and exits with status 1."""

    status = 1


class UsageError(CLIError):
    """A usage error found after parsing (options that contradict each other or the chosen
    model): one line on stderr, exit status 2, as argparse's own errors."""

    status = 2


def read_text(path: Path, where: str) -> str:
    """``path``'s UTF-8 text, or a ``UsageError`` "WHERE: cannot read (REASON)" (a folder, no
    such file, or the OS's or the decoder's reason)."""
    if not Path(path).is_file():
        what = "is a folder" if Path(path).is_dir() else "no such file"
        raise UsageError(f"{where}: cannot read ({what})")
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: cannot read ({exc})") from None
