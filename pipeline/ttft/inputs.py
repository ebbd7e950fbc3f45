"""Reading a measured TTFT file: one reader, one set of checks and flags for every command.

``run --measured F`` and ``measured F`` both read F through ``read_measured``: the lines are
validated (``pipeline.workloads.measured_file``, then kvlab's own exports), an empty file is
refused, the file's setup is resolved (``pipeline.ttft.measured_setup``: the lab's, a sidecar or
the ``--measured-docs/-tokens/-gpu/-cpu`` flags that ``add_setup_arguments`` adds), and a
request reading a document that setup does not have is refused with ``file:line`` (a
warning only for the lab's own file).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from kvlab import make_exports
from kvlab.summarize import InputError
from pipeline.base.arguments import non_negative_int, positive_int
from pipeline.base.errors import CLIError
from pipeline.ttft.measured_setup import (FIELDS, LAB_SETUP, MeasuredSetup, check_docs,
                                          resolve_setup)
from pipeline.workloads.measured_file import load_measured

__all__ = ["MeasuredInput", "add_setup_arguments", "setup_flags", "read_measured"]

_SETUP_OPTIONS = (("docs", positive_int, "documents"),
                  ("tokens", positive_int, "KV tokens per document"),
                  ("gpu", non_negative_int, "GPU KV capacity in tokens"),
                  ("cpu", non_negative_int, "lmcache's CPU tier in tokens"))


@dataclass(frozen=True)
class MeasuredInput:
    """A validated measured file: its path, requests (RECORD_SCHEMA), kvlab's three exports
    of it (ttft.jsonl, measured.json, measured_source.json) and the setup it was taken under."""

    source: str
    requests: pl.DataFrame
    documents: dict[str, object]
    setup: MeasuredSetup


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--measured-docs/-tokens/-gpu/-cpu`` group: the setup a measured file was taken
    under."""
    group = parser.add_argument_group(
        "the measured file's own setup (default: the lab's for the bundled file and the real "
        "fixture; else a sidecar NAME.setup.json beside the file and these flags, flags winning; "
        "with neither the lab's setup is assumed and the outputs say so)")
    for field, kind, meaning in _SETUP_OPTIONS:
        group.add_argument(f"--measured-{field}", type=kind, metavar="N",
                           help=f"{meaning} when the file was measured")


def setup_flags(args: argparse.Namespace) -> dict[str, int | None]:
    """The ``--measured-*`` values of ``args`` by field (None where not given)."""
    return {field: getattr(args, f"measured_{field}") for field in FIELDS}


def read_measured(explicit: str | None, flags: dict[str, int | None],
                  warn: Callable[[str], None]) -> MeasuredInput:
    """Read, validate and place the measured file ``explicit`` (None: the real fixture if
    present, else the bundled synthetic file); CLIError with one line on any problem,
    ``warn`` gets the lab's own file's numbering warning. Nothing is written."""
    source, _ = make_exports.measured_source(explicit)
    try:
        requests = load_measured(source)
        documents = make_exports.measured_exports(source)   # refuses an empty file
    except InputError as exc:
        raise CLIError(str(exc)) from None
    setup = resolve_setup(source, documents["measured_source.json"]["synthetic"], flags)
    try:
        check_docs(requests, setup, source)
    except CLIError as exc:
        if setup != LAB_SETUP:
            raise
        warn(f"warning: {exc}")          # the lab's own file is never refused for its numbering
    return MeasuredInput(source, requests, documents, setup)
