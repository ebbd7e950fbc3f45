"""Where a measurement goes: checking OUTPUT before anything is sent, and its provenance file."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import CLIError
from pipeline.measure.runner import done_keys

__all__ = ["check_output", "provenance_path"]


def provenance_path(output: Path) -> Path:
    """OUTPUT's provenance file: ``x.jsonl`` -> ``x.provenance.json``."""
    stem = output.name[:-len(".jsonl")] if output.name.endswith(".jsonl") else output.name
    return output.with_name(stem + ".provenance.json")


def check_output(path: Path, resume: bool) -> set[tuple]:
    """Validate OUTPUT before anything is sent; the keys already done when resuming."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise CLIError(f"--output {path}: folder {directory} does not exist")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CLIError(f"--output {path}: not writable")
    if path.exists() and path.stat().st_size and not resume:
        raise CLIError(f"--output {path} already has lines: pass --resume to continue it, "
                       f"or choose another file")
    try:
        return done_keys(path) if resume else set()
    except ValueError as exc:
        raise CLIError(str(exc)) from None
