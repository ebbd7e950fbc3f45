"""``--latency FILE`` of kind ``roofline-efficiency`` (``fit --vllm-bench``'s output):
``roofline_from_fit`` is the command's own roofline (``--model``, ``--tensor-parallel-size``,
...) on the fitted GPU with the file's ``--mfu-prefill``/``--mbu-decode`` and step overhead,
its provenance naming the file and what it was fitted on."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.base.errors import UsageError
from pipeline.steptime.efficiency import FACTORS
from pipeline.steptime.roofline import Roofline

__all__ = ["roofline_from_fit"]


def _factor(document: dict, key: str, where: str) -> float:
    entry = document.get(key)
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{where}: {key}.value must be a number in (0, 1], got {value!r}")
    return float(value)


def roofline_from_fit(document: Any, path: Path, args: argparse.Namespace) -> Roofline:
    """``--latency FILE`` of kind ``EFFICIENCY_KIND``: ``Roofline.from_args`` of the command's
    options with the file's factors and step overhead (module docstring); ValueError naming
    the file and field for a bad file, UsageError for a GPU or weight dtype other than the
    fit's or a factor also given as an option."""
    where = str(path)
    if document.get("version") != 1:
        raise ValueError(f"{where}: version {document.get('version')!r} is not supported "
                         f"(expected 1)")
    mfu, mbu = (_factor(document, key, where) for key, _ in FACTORS)
    overhead = document.get("step_overhead_ms")
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) \
            or not math.isfinite(overhead) or overhead < 0:
        raise ValueError(f"{where}: step_overhead_ms must be a number >= 0, got {overhead!r}")
    for key, option in FACTORS:
        if getattr(args, key, None) is not None:
            raise UsageError(f"{option}: --latency {path} sets the factors fit measured; "
                             f"give one or the other")
    options = argparse.Namespace(**{**vars(args), "mfu_prefill": None, "mbu_decode": None,
                                    "step_overhead_ms": float(overhead)})
    roofline = Roofline.from_args(options)
    fitted = document.get("fitted_on") or {}
    if roofline.gpu.name != fitted.get("gpu"):
        raise UsageError(f"--gpu-type: {path} was fitted on {fitted.get('gpu')}, this roofline "
                         f"is {roofline.gpu.name}: efficiency factors are one GPU's")
    if roofline.weights != fitted.get("weights"):
        raise UsageError(f"--weights: {path} was fitted with {fitted.get('weights')} weights, "
                         f"this roofline has {roofline.weights}")
    how = ", ".join(f"{option} {value:g} " + ("fitted" if document[key].get("fitted") else
                                              f"not fitted ({document[key].get('why')})")
                    for (key, option), value in zip(FACTORS, (mfu, mbu)))
    source = (f"{how}, step overhead {overhead:g} ms, from {path} (fit of "
              f"{', '.join(map(str, document.get('source') or []))}: "
              f"{fitted.get('model')}, TP {fitted.get('tensor_parallel')})")
    return replace(roofline, mfu=mfu, mbu=mbu, efficiency_source=source)
