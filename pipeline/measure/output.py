"""Where a measurement goes: checking OUTPUT before anything is sent, and its provenance file."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.base.errors import CLIError
from pipeline.measure.runner import done_keys

__all__ = ["check_output", "provenance_path", "kept_note"]


def provenance_path(output: Path) -> Path:
    """OUTPUT's provenance file: ``x.jsonl`` -> ``x.provenance.json``."""
    stem = output.name[:-len(".jsonl")] if output.name.endswith(".jsonl") else output.name
    return output.with_name(stem + ".provenance.json")


def _check_writable(path: Path) -> None:
    """CLIError unless ``path`` can be opened for appending; leaves no new file behind (a
    missing one is created and removed again: os.access says yes to root anywhere)."""
    try:
        if path.exists():
            with path.open("ab"):
                pass
            return
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        os.unlink(path)
    except OSError as exc:
        raise CLIError(f"--output {path}: cannot write it ({exc.strerror or exc})") from None


def check_output(path: Path, resume: bool) -> set[tuple]:
    """Validate OUTPUT before anything is sent; the keys already done when resuming."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise CLIError(f"--output {path}: folder {directory} does not exist")
    if path.is_dir():
        raise CLIError(f"--output {path} is a folder: give a file to append to, e.g. "
                       f"{path / 'ttft.jsonl'}")
    _check_writable(path)
    if path.exists() and path.stat().st_size and not resume:
        raise CLIError(f"--output {path} already has lines: pass --resume to continue it, "
                       f"or choose another file")
    try:
        return done_keys(path) if resume else set()
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"--output {path}: cannot read it to resume "
                       f"({getattr(exc, 'strerror', None) or exc})") from None


def kept_note(path: Path) -> str:
    """What a failed measurement left in OUTPUT, for its one-line error."""
    if path.exists() and path.stat().st_size:
        return f"lines so far are kept in {path}, rerun with --resume to continue"
    return f"nothing written ({path} has no line)"
