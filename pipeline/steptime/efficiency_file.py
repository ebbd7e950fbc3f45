"""``--latency FILE`` of the kinds ``fit --vllm-bench`` writes (``FIT_READERS``):
``roofline-efficiency``: ``roofline_from_fit``, the command's own roofline (``--model``,
``--tensor-parallel-size``, ...) on the fitted GPU with the file's ``--mfu-prefill``/
``--mbu-decode`` and step overhead; ``profile-scale`` (``fit --vllm-bench --profile DIR``):
``profile_from_fit``, the file's profile (``--latency profile:DIR``) for the command's model
with its GPU milliseconds scaled. Their provenance names the file and what it was fitted
on."""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.base.errors import UsageError
from pipeline.steptime.efficiency import EFFICIENCY_KIND, FACTORS
from pipeline.steptime.profile import Profiled, read_profile
from pipeline.steptime.roofline import Roofline

__all__ = ["PROFILE_SCALE_KIND", "FIT_READERS", "roofline_from_fit", "profile_from_fit"]

#: the JSON kind of ``fit --vllm-bench --profile DIR``'s output (version 1)
PROFILE_SCALE_KIND = "profile-scale"


def _factor(document: dict, key: str, where: str) -> float:
    entry = document.get(key)
    value = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{where}: {key}.value must be a number in (0, 1], got {value!r}")
    return float(value)


def _overhead(document: dict, where: str) -> float:
    overhead = document.get("step_overhead_ms")
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) \
            or not math.isfinite(overhead) or overhead < 0:
        raise ValueError(f"{where}: step_overhead_ms must be a number >= 0, got {overhead!r}")
    return float(overhead)


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
    overhead = _overhead(document, where)
    for key, option in FACTORS:
        if getattr(args, key, None) is not None:
            raise UsageError(f"{option}: --latency {path} sets the factors fit measured; "
                             f"give one or the other")
    options = argparse.Namespace(**{**vars(args), "mfu_prefill": 1.0, "mbu_decode": 1.0,
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


def profile_from_fit(document: Any, path: Path, args: argparse.Namespace) -> Profiled:
    """``--latency FILE`` of kind ``PROFILE_SCALE_KIND``: ``read_profile`` of the file's
    directory for the command's options, its GPU milliseconds x the file's scale, its step
    overhead the fit's; ValueError naming the file and field for a bad file."""
    where = str(path)
    if document.get("version") != 1:
        raise ValueError(f"{where}: version {document.get('version')!r} is not supported "
                         f"(expected 1)")
    entry = document.get("scale")
    scale = entry.get("value") if isinstance(entry, dict) else None
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{where}: scale.value must be a number > 0, got {scale!r}")
    directory = document.get("directory")
    if not isinstance(directory, str) or not directory:
        raise ValueError(f"{where}: directory must name the profile's folder")
    options = argparse.Namespace(**{**vars(args),
                                    "step_overhead_ms": _overhead(document, where)})
    profile = read_profile(directory, options)
    return replace(profile, scale=float(scale), label=f"{profile.label[:-1]}, x{scale:g})",
                   provenance=f"{profile.provenance}; its GPU milliseconds x {scale:g}, "
                              f"fitted from {path} (fit of "
                              f"{', '.join(map(str, document.get('source') or []))})")


#: the JSON kinds fit --vllm-bench writes and their readers
FIT_READERS = {EFFICIENCY_KIND: roofline_from_fit, PROFILE_SCALE_KIND: profile_from_fit}
