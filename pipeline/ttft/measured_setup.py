"""The setup a measured TTFT file was measured under, kept apart from the swept workload.

A measured file belongs to the serving setup it was taken with: how many documents, how many
KV tokens each, the GPU KV capacity and lmcache's CPU tier. Its requests are attributed to
tiers under *that* setup, never under the options of the run that reads it. The setup is:

* the lab's (10 x 5011 tokens, GPU 21520, CPU 56000) for the bundled synthetic file (known by
  content) and the real fixture ``/opt/fixtures/kvoffload/ttft.jsonl``;
* for any other file: a sidecar ``<name>.setup.json`` beside it (``{"docs": 10, "tokens":
  5011, "gpu": 21520, "cpu": 56000}``) and/or the ``--measured-docs/-tokens/-gpu/-cpu``
  flags (flags win; a field neither gives is the lab's); with neither, the lab's setup is
  *assumed* and every output says so. A sidecar's optional ``configs`` names a cache model
  per config (``pipeline.ttft.configs``: llama.cpp's prompt cache, or kvlab's two-tier
  LRU) for files whose configs are not kvlab's baseline/lmcache.

Tier latencies are per request at the measured document size (concurrency 1), so they carry
over to any number of documents of the same size, but not to another document size:
``prediction_problem`` then says why the TTFT predictions are withheld.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field as dataclass_field, replace
from pathlib import Path

import polars as pl

from pipeline.base.config import LAB_CPU, LAB_DOCS, LAB_GPU, LAB_TOKENS, REAL_MEASURED
from pipeline.base.errors import CLIError
from pipeline.sizes.limits import check_value

__all__ = ["MeasuredSetup", "LAB_SETUP", "FIELDS", "sidecar_path", "resolve_setup",
           "sidecar_configs",
           "check_docs", "prediction_problem"]

FIELDS = ("docs", "tokens", "gpu", "cpu")


@dataclass(frozen=True)
class MeasuredSetup:
    """docs x tokens read through GPU ``gpu`` (+ lmcache's CPU ``cpu``); ``origin`` says
    where these numbers come from."""

    docs: int
    tokens: int
    gpu: int
    cpu: int
    origin: str
    #: the sidecar's per-config cache models (``pipeline.ttft.configs``); empty: kvlab's
    configs: dict = dataclass_field(default_factory=dict, compare=False)

    def describe(self) -> str:
        return (f"{self.docs} docs x {self.tokens} tokens, GPU {self.gpu}, CPU {self.cpu} "
                f"({self.origin})")

    def as_dict(self) -> dict[str, object]:
        return {"docs": self.docs, "tokens": self.tokens, "gpu": self.gpu, "cpu": self.cpu,
                "origin": self.origin}

    def numbers(self) -> tuple[int, int, int, int]:
        return self.docs, self.tokens, self.gpu, self.cpu


LAB_SETUP = MeasuredSetup(LAB_DOCS, LAB_TOKENS, LAB_GPU, LAB_CPU, "the lab's setup")


def sidecar_path(measured: str | os.PathLike) -> Path:
    """``ttft.jsonl`` -> ``ttft.setup.json`` beside it."""
    return Path(measured).with_suffix(".setup.json")


def _is_lab_file(measured: str, synthetic: bool) -> bool:
    return synthetic or os.path.realpath(measured) == os.path.realpath(REAL_MEASURED)


def _read_sidecar(path: Path) -> dict[str, object]:
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read the measured setup ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CLIError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise CLIError(f"{path}: expected a JSON object with {', '.join(FIELDS)}")
    unknown = sorted(set(document) - set(FIELDS) - {"configs"})
    if unknown:
        raise CLIError(f"{path}: unknown field {unknown[0]!r} (expected "
                       f"{', '.join(FIELDS)}, configs)")
    if "configs" in document:
        from pipeline.ttft.configs import parse_configs
        document["configs"] = parse_configs(path, document["configs"])
    for field, value in document.items():
        if field == "configs":
            continue
        check_value(f"{path}: {field}", value)
    if document.get("docs", 1) < 1 or document.get("tokens", 1) < 1:
        raise CLIError(f"{path}: docs and tokens must be >= 1")
    return document


def resolve_setup(measured: str, synthetic: bool,
                  flags: dict[str, int | None] | None = None) -> MeasuredSetup:
    """The setup ``measured`` was taken under (see the module docstring); CLIError when the
    flags or a sidecar contradict the lab's own file, or a sidecar is malformed."""
    given = {field: value for field, value in (flags or {}).items() if value is not None}
    sidecar = sidecar_path(measured)
    if _is_lab_file(measured, synthetic):
        clash = [field for field, value in given.items() if getattr(LAB_SETUP, field) != value]
        if clash:
            raise CLIError(f"--measured-{clash[0]} {given[clash[0]]}: {measured} was measured "
                           f"under the lab's setup ({clash[0]} = {getattr(LAB_SETUP, clash[0])})")
        return LAB_SETUP
    from_file = _read_sidecar(sidecar) if sidecar.is_file() else {}
    configs = from_file.pop("configs", {})
    if not from_file and not given and not configs:
        return replace(LAB_SETUP, origin="ASSUMED the lab's setup: give --measured-docs/"
                                         "-tokens/-gpu/-cpu or a sidecar " + sidecar.name)
    parts = ([f"sidecar {sidecar.name}"] if from_file or configs else []) + (
        ["--measured-* flags"] if given else [])
    numbers = {**LAB_SETUP.as_dict(), **from_file, **given}
    return MeasuredSetup(numbers["docs"], numbers["tokens"], numbers["gpu"], numbers["cpu"],
                         " + ".join(parts) + (", the lab's for the rest"
                                              if len({**from_file, **given}) < 4 else ""),
                         configs)


def sidecar_configs(measured: str) -> dict:
    """The per-config cache models of ``measured``'s sidecar (``{}`` for the lab's files and
    for a file without a sidecar or without ``configs``); CLIError on a malformed sidecar."""
    from kvlab.make_exports import is_synthetic

    sidecar = sidecar_path(measured)
    if not sidecar.is_file() or _is_lab_file(measured, is_synthetic(measured)):
        return {}
    return _read_sidecar(sidecar).get("configs", {})


def check_docs(requests: pl.DataFrame, setup: MeasuredSetup, path: str) -> None:
    """CLIError ``file:line`` when a request reads a document the setup does not have."""
    outside = requests.filter(pl.col("doc") >= setup.docs).sort("line")
    if outside.height:
        row = outside.row(0, named=True)
        raise CLIError(f"{path}:{row['line']}: doc {row['doc']} is outside the measured "
                       f"setup's {setup.docs} documents ({setup.origin})")


def prediction_problem(setup: MeasuredSetup, tokens: int) -> str | None:
    """Why the measured tier latencies cannot predict TTFT for documents of ``tokens``, or
    None when they can (same document size; the number of documents may differ)."""
    if setup.tokens == tokens:
        return None
    return (f"TTFT predictions withheld: the measured file's documents are {setup.tokens} "
            f"tokens, this run's are {tokens}; a tier's latency (recompute, reload) depends on "
            f"the document size, so the measured medians do not carry over")
