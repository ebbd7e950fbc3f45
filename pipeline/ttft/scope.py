"""Where a fitted TTFT model may price requests: the KV size it was measured with and the
prompt lengths it covers. Outside them ``plan`` withholds TTFT and says why.

* KV size: a reload moves the KV bytes of the tokens it serves and a recompute rebuilds them,
  so a model measured with one model's KV bytes per token does not price another's. The lab's
  files (the bundled synthetic one and the real fixture) were measured with the lab's model
  (Qwen2.5-1.5B); another file says its bytes per token in ``NAME.provenance.json``
  (``state_size.bytes_per_token``, as ``measure`` writes it); a file without one is ASSUMED
  to be the lab's model, and the output says so.
* Prompt lengths: per-tier medians hold at the one measured length only (``--measured-tokens``
  simulator tokens per document); a least-squares fit holds between the shortest and the
  longest measured prompt.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.base.config import REAL_MEASURED
from pipeline.sizes.units import DEFAULT_PRESET, KVSize, preset
from pipeline.ttft.model import TOKEN_COLUMNS, TTFTModel

__all__ = ["MeasuredKV", "measured_kv", "ttft_problem"]


@dataclass(frozen=True)
class MeasuredKV:
    """The KV bytes per token a measured file was taken with, and where that comes from."""

    bytes_per_token: int
    origin: str


def _provenance_bytes(source: str) -> int | None:
    """``state_size.bytes_per_token`` of ``NAME.provenance.json`` beside ``source``, if any."""
    path = Path(source).with_suffix(".provenance.json")
    try:
        document = json.loads(path.read_text(encoding="utf-8-sig"))
        value = document["state_size"]["bytes_per_token"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def measured_kv(source: str, synthetic: bool) -> MeasuredKV:
    """The KV size ``source`` was measured with (see the module docstring)."""
    lab = preset(DEFAULT_PRESET)
    if synthetic or os.path.realpath(source) == os.path.realpath(REAL_MEASURED):
        return MeasuredKV(lab.bytes_per_token, f"the lab's model, {lab.name}")
    found = _provenance_bytes(source)
    if found is not None:
        return MeasuredKV(found, f"{Path(source).with_suffix('.provenance.json').name}")
    return MeasuredKV(lab.bytes_per_token, f"ASSUMED the lab's model, {lab.name} (no "
                                           f"{Path(source).with_suffix('.provenance.json').name})")


def _covered(models: dict[str, TTFTModel], measured: pl.DataFrame,
             measured_tokens: int) -> tuple[int, int]:
    """(shortest, longest) prompt the models price: the one measured length for per-tier
    medians, the measured range for a least-squares fit (the narrowest over the configs)."""
    low, high = 0, 2**63
    for config, model in models.items():
        if model.method != "least squares":
            low, high = max(low, measured_tokens), min(high, measured_tokens)
            continue
        lengths = measured.filter(pl.col("config") == config).select(
            pl.sum_horizontal(TOKEN_COLUMNS).alias("length"))["length"]
        low, high = max(low, int(lengths.min())), min(high, int(lengths.max()))
    return low, high


def ttft_problem(kv: KVSize, found: MeasuredKV, models: dict[str, TTFTModel],
                 measured: pl.DataFrame, measured_tokens: int, prompts: pl.Series
                 ) -> str | None:
    """Why TTFT cannot be predicted for ``prompts`` (prompt tokens per request) with ``kv``,
    or None when the models were measured with this KV size and cover every prompt."""
    problems = []
    if kv.bytes_per_token != found.bytes_per_token:
        problems.append(f"the TTFT model was measured with {found.bytes_per_token:,} KV bytes "
                        f"per token ({found.origin}), not {kv.name}'s {kv.bytes_per_token:,}: "
                        f"reload and recompute costs do not carry over")
    low, high = _covered(models, measured, measured_tokens)
    shortest, longest = int(prompts.min() or 0), int(prompts.max() or 0)
    if shortest < low or longest > high:
        measured_range = f"{low:,} tokens" if low == high else f"{low:,} to {high:,} tokens"
        asked = f"{shortest:,} tokens" if shortest == longest else \
            f"{shortest:,} to {longest:,} tokens"
        problems.append(f"the TTFT model covers prompts of {measured_range}, this workload's are {asked}")
    return "; ".join(problems) or None
