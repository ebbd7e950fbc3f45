"""The one-screen summary at the top of the simulate and fleet pages, and their tables.

``summary_html(items, headline)`` is a definition list (configuration, overload, step-time
provenance) over a small table; ``engine_configuration(args, model)`` the configuration
items every engine command shares; ``overload_text(rows)`` reads the overload detector's
keys (``overloaded``, ``offered_rate``, ``served_rate``, ``queue_at_last_arrival``) when
the rows carry them, else says "not assessed"; ``provenance_text(model)`` names where the
step times come from; ``table_html(frame)`` words every ``*_ms`` cell with
``format_duration`` and every ratio as a percentage.
"""

from __future__ import annotations

import argparse
import html
import math
from collections.abc import Iterable, Sequence

import polars as pl

from pipeline.charts.durations import format_duration

__all__ = ["OVERLOAD_KEYS", "NOT_MODELLED", "summary_html", "engine_configuration", "overload_text",
           "provenance_text", "tier_text", "table_html", "percent", "cell_text"]

OVERLOAD_KEYS = ("overloaded", "offered_rate", "served_rate", "queue_at_last_arrival")
RATIO_SUFFIXES = ("_ratio", "_rate_share")
NOT_MODELLED = "not modelled (needs finish times and requests of 2+ output tokens)"


def percent(value: float | None) -> str:
    """``0.326`` -> ``"32.6 %"``; ``n/a`` for None."""
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:.1f} %"


def tier_text(gpu: float | None, cpu: float | None) -> str:
    """Token shares by tier: ``GPU 32.6 % / CPU 10.0 % / recomputed 57.4 %``."""
    if gpu is None:
        return "n/a"
    cpu = cpu or 0.0
    return f"GPU {percent(gpu)} / CPU {percent(cpu)} / recomputed {percent(1 - gpu - cpu)}"


def provenance_text(model) -> str:
    """Where the step times come from: the roofline with its figures, the fitted file, or
    the steps clock."""
    if model is None:
        return "steps clock: no time model"
    return f"{model.label}: {model.provenance}"


def _rate(value) -> str:
    return "n/a" if value is None else f"{value:,.3g} requests/s"


def overload_text(rows: Sequence[dict]) -> str:
    """``overloaded: yes (2 of 6 points: rate 16/s ...)`` or ``no``, with offered and served
    rates, from the overload detector's keys; ``overload: not assessed`` without them."""
    judged = [r for r in rows if r.get("overloaded") is not None]
    if not judged:
        return "overload: not assessed"
    over = [r for r in judged if r["overloaded"]]
    if not over:
        return f"overloaded: no ({len(judged)} of {len(judged)} points keep up with arrivals)"
    worst = max(over, key=lambda r: r.get("offered_rate") or 0)
    where = worst.get("label", "")
    queue = worst.get("queue_at_last_arrival")
    queued = "n/a" if queue is None else f"{queue:,.0f}"
    return (f"overloaded: yes ({len(over)} of {len(judged)} points; {where} offered "
            f"{_rate(worst.get('offered_rate'))}, served {_rate(worst.get('served_rate'))}, "
            f"{queued} queued at the last arrival)")


def engine_configuration(args: argparse.Namespace, model) -> list[tuple[str, str]]:
    """Model, GPU type, block size, engine limits and CPU tier of an engine command."""
    shape = getattr(model, "model", None)
    gpu = getattr(model, "gpu", None)
    name = getattr(shape, "name", None) or getattr(args, "model", None) or "default preset"
    limits = (f"max_num_seqs {args.max_num_seqs}, max_num_batched_tokens "
              f"{args.max_num_batched_tokens:,}, max_model_len "
              f"{args.max_model_len or 'the longest request'}, chunked prefill "
              f"{'off' if args.no_chunked_prefill else 'on'}, async scheduling "
              f"{'on' if args.async_scheduling else 'off'}")
    cpu = getattr(args, "cpu", 0) or 0                 # tokens by then (resolve_capacities)
    tier = (f"{cpu:,} tokens ({getattr(args, 'cpu_tier_model', None) or 'lmcache'})"
            if cpu else "none")
    engine = getattr(args, "engine", None)               # named when not the default, vllm
    if engine == "sglang":
        limits, tier = _sglang_configuration(args)
    return [("model", name),
            ("GPU type", gpu.name if gpu is not None else "none (a fitted step-time file)"),
            *([("engine", engine)] if engine not in (None, "vllm") else []),
            ("block size", f"{args.block_size} tokens"),
            ("engine limits", limits),
            ("CPU tier", tier)]


def _sglang_configuration(args: argparse.Namespace) -> tuple[str, str]:
    """(engine limits, host tier) of an ``--engine sglang`` run, in SGLang's names."""
    from pipeline.sizes.model_options import tensor_parallel
    from pipeline.sizes.sglang_memory import default_chunk
    chunk = getattr(args, "chunked_prefill_size", None) or default_chunk(
        getattr(args, "gpu_type", None), tensor_parallel(args))
    limits = (f"max_running_requests {getattr(args, 'max_running_requests', None) or 256}, "
              f"chunked_prefill_size {'off' if chunk == -1 else f'{chunk:,}'}, "
              f"max_prefill_tokens {getattr(args, 'max_prefill_tokens', None) or 16384:,}, "
              f"schedule_policy {getattr(args, 'schedule_policy', None) or 'fcfs'}, "
              f"page_size {getattr(args, 'page_size', None) or 1}")
    hicache = getattr(args, "enable_hierarchical_cache", False)
    policy = getattr(args, "hicache_write_policy", None) or "write_through"
    return limits, f"HiCache (write policy {policy})" if hicache else "none"


def cell_text(column: str, value) -> str:
    """One table cell: durations for ``*_ms``, percentages for ratios, 3 significant
    figures for other floats."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if column.endswith("_ms") or "_ms_" in column:
            return format_duration(value)
        if column.endswith(RATIO_SUFFIXES) or column in ("GPU", "CPU", "recomputed", "saved"):
            return percent(value)
        return f"{value:,.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table_html(frame: pl.DataFrame, titles: dict[str, str] | None = None) -> str:
    """``frame`` as an HTML table, columns renamed by ``titles``, cells by ``cell_text``."""
    titles = titles or {}
    head = "".join(f"<th>{html.escape(titles.get(c, c))}</th>" for c in frame.columns)
    rows = ["".join(f"<td>{html.escape(cell_text(c, v))}</td>"
                    for c, v in zip(frame.columns, row)) for row in frame.iter_rows()]
    body = "".join(f"<tr>{cells}</tr>" for cells in rows)
    return f'<div class="wide"><table class="points"><tr>{head}</tr>{body}</table></div>'


def summary_html(items: Iterable[tuple[str, str]], headline: str = "") -> str:
    """The summary box: ``items`` as a definition list, ``headline`` (a table) below."""
    pairs = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items)
    return f'<section class="summary"><dl>{pairs}</dl>{headline}</section>'
