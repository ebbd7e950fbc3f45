"""What ``trace`` writes: the Parquet frames, the JSON summary and reports/trace.html."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from pipeline.workloads.stream import ORDERS, BlockStream
from pipeline.catalog import models_field, models_line
from pipeline.catalog.model_options import model_options
from pipeline.base.errors import CLIError
from pipeline.trace import engine
from pipeline.workloads.sources import Workload
from pipeline.base.staging import Outputs, parquet_bytes

if TYPE_CHECKING:                       # altair is imported only when a report is drawn
    from pipeline.charts.parts import Units

__all__ = ["Models", "name_models", "check_writable", "add_frames", "summary",
           "add_report", "report_page", "FRAMES", "events_metadata"]

#: The Parquet files ``trace`` writes under ``--out``.
FRAMES = ("events", "requests", "points", "request_info")


def events_metadata(gpu_model: str) -> dict[str, str] | None:
    """events.parquet's key-value metadata when its depths are not ``gpu_model``'s (a model
    other than the block-lru engine keeps no stack depth), else None (no metadata)."""
    if engine.has_lru_depths(gpu_model):
        return None
    return {"kvlab.model": "block-lru", "kvlab.gpu_model": gpu_model,
            "kvlab.about": f"stack_distance: the block-lru model's GPU LRU depths (the "
                           f"workload's reuse distances), not --gpu-model {gpu_model}'s: a "
                           f"one-pass depth exists for a stack algorithm only; "
                           f"{gpu_model}'s answers are requests.parquet and points.parquet"}


class Models(NamedTuple):
    """The models of a run and their engine options (``run_options``)."""

    gpu_model: str
    cpu_model: str
    gpu_options: dict
    cpu_options: dict

    def describe(self, tier: str) -> str:
        """``block-lru``, or e.g. ``vllm: output_tokens=1, vllm_version=0.33.0``."""
        model, options = (self.gpu_model, self.gpu_options) if tier == "gpu" else \
            (self.cpu_model, self.cpu_options)
        extra = ", ".join(f"{key}={value}" for key, value in options.items())
        return f"{model}: {extra}" if extra else model

    def line(self) -> str:
        """The answer's first line: ``models: GPU vllm (vLLM 0.33.0 block pool), CPU ...``."""
        return models_line(self.gpu_model, self.cpu_model, self.gpu_options, self.cpu_options)


def name_models(points: pl.DataFrame, per_request: pl.DataFrame,
                models: Models) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Name the models in the frames: points.parquet gets the models and their options
    (JSON), requests.parquet the model names (constant columns: a few bytes in all)."""
    names = {"gpu_model": pl.lit(models.gpu_model, pl.Categorical),
             "cpu_model": pl.lit(models.cpu_model, pl.Categorical)}
    points = points.with_columns(**names,
                                 gpu_options=pl.lit(json.dumps(models.gpu_options)),
                                 cpu_options=pl.lit(json.dumps(models.cpu_options)))
    return points, per_request.with_columns(**names)


def check_writable(folder: Path, report: Path | None) -> None:
    """Refuse (before any work) an output place that cannot be created or written, or an
    output file's name taken by something that is not a file."""
    for argument, path in (("--out", folder), ("--report", report and report.parent)):
        if path is None:
            continue
        existing = Path(path).absolute()
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise CLIError(f"{argument} {path}: cannot write under {existing}")
    targets = [("--out", Path(folder) / f"{name}.parquet") for name in FRAMES]
    for argument, target in targets + ([("--report", Path(report))] if report else []):
        if target.exists() and not target.is_file():
            raise CLIError(f"{argument} {target}: exists and is not a file")


def add_frames(staged: Outputs, folder: Path, events: pl.DataFrame, per_request: pl.DataFrame,
               points: pl.DataFrame, requests: pl.DataFrame, gpu_model: str) -> dict:
    """Stage the four Parquet files in ``staged`` (events.parquet says whose depths it holds
    when they are not ``gpu_model``'s: ``events_metadata``); return each one's path, rows and
    bytes per row."""
    sizes = {}
    for name, frame in zip(FRAMES, (events, per_request, points, requests)):
        path = Path(folder) / f"{name}.parquet"
        content = parquet_bytes(frame, metadata=events_metadata(gpu_model)
                                if name == "events" else None)
        staged.add(path, content, "--out")
        sizes[name] = {"path": str(path), "rows": frame.height, "bytes": len(content),
                       "bytes_per_row": len(content) / max(frame.height, 1)}
    return sizes


def summary(workload: Workload, stream: BlockStream, infinite: engine.Infinite,
            args: argparse.Namespace, sweep_gpu: int, sizes: dict,
            points: pl.DataFrame, models: Models) -> dict:
    """The ``--json`` document."""
    return {
        "models": models_field(models.gpu_model, models.cpu_model),
        "trace": workload.label, "block_size": stream.block_size,
        "requests": infinite.requests, "block_accesses": infinite.blocks,
        "distinct_blocks": infinite.distinct_blocks, "prompt_tokens": infinite.prompt_tokens,
        "skipped_lines": [{"line": line, "reason": reason} for line, reason in workload.skipped],
        "infinite_cache_block_hit_ratio": round(infinite.repeat_ratio, 4),
        "infinite_model_block_hit_ratio": round(infinite.block_hit_ratio, 4),
        "infinite_model_token_hit_ratio": round(infinite.token_hit_ratio, 4),
        "gpu_order": args.gpu_order, "cpu_order": args.cpu_order,
        "gpu_model": models.gpu_model, "cpu_model": models.cpu_model,
        "gpu_options": models.gpu_options, "cpu_options": models.cpu_options,
        "cpu_sweep_gpu": sweep_gpu,
        "gpu_curve_exact_from_blocks": int(np.max(stream.cacheable, initial=0)),
        "points": points.drop("point", "gpu_model", "cpu_model", "gpu_options",
                              "cpu_options", strict=False).to_dicts(), "files": sizes,
    }


def _gpu_curves(stream: BlockStream, prompt: int) -> pl.DataFrame:
    grid = engine.curve_grid(stream)
    frames = []
    for order in ORDERS:
        hits = engine.gpu_curve(stream, grid, order)
        frames.append(pl.DataFrame({
            "order": order, "gpu_capacity": grid,
            "block_hit_ratio": hits / max(stream.blocks, 1),
            "token_hit_ratio": hits * stream.block_size / max(prompt, 1)}))
    return pl.concat(frames)


def _half_crossing(stream: BlockStream, order: str, curve: pl.DataFrame,
                   infinite: engine.Infinite) -> int | None:
    """The exact GPU capacity (tokens) where ``order``'s block hit ratio first reaches half
    the model's infinite-cache one: bracketed by ``curve``'s grid, found in between from the
    one-pass distances (``engine.gpu_crossing``)."""
    needed = (round(infinite.block_hit_ratio * stream.blocks) + 1) // 2   # ratios = hits / blocks
    reached = curve.filter((pl.col("block_hit_ratio") * stream.blocks).round() >= needed)
    if needed == 0 or reached.height == 0:
        return None
    above = reached["gpu_capacity"].min() // stream.block_size
    below = curve.filter(pl.col("gpu_capacity") < above * stream.block_size)
    low = below["gpu_capacity"].max() // stream.block_size if below.height else -1
    blocks = engine.gpu_crossing(stream, order, needed, low, above)
    return None if blocks is None else blocks * stream.block_size


def trace_units(args: argparse.Namespace) -> Units:
    """GiB beside tokens in the report when capacities were given as sizes
    (``args.sizes_given``, set by the command) or a KV model was named (``--model``,
    ``--kv-bytes-per-token``, ``--kv-shape``)."""
    from pipeline.charts import trace as charts
    from pipeline.sizes.units import kv_from_args

    named = any(getattr(args, option, None) is not None
                for option in ("model", "kv_bytes_per_token", "kv_shape"))
    if not getattr(args, "sizes_given", False) and not named:
        return charts.TOKENS
    kv = kv_from_args(args)
    return charts.Units(kv.bytes_per_token, kv.name)


def report_page(workload: Workload, stream: BlockStream, infinite: engine.Infinite,
                args: argparse.Namespace, sweep_gpu: int, events: pl.DataFrame,
                models: Models | None = None) -> str:
    """The whole trace.html page."""
    from pipeline.charts import page_html
    from pipeline.charts import trace as charts

    units = trace_units(args)
    prompt = infinite.prompt_tokens
    curves = _gpu_curves(stream, prompt)
    grid = engine.curve_grid(stream)
    models = models or Models(args.gpu_model, args.cpu_model,
                              *model_options(args, stream.block_size))
    own = engine.has_lru_depths(models.gpu_model)
    if own:
        order_curve = curves.filter(order=args.gpu_order).drop("order")
        half = _half_crossing(stream, args.gpu_order, order_curve, infinite)
    else:                                   # the model's own runs, crossing on the grid
        hits = engine.model_gpu_curve(stream, grid, args.gpu_order, models.gpu_model,
                                      models.gpu_options)
        order_curve = pl.DataFrame({"gpu_capacity": grid,
                                    "block_hit_ratio": hits / max(stream.blocks, 1),
                                    "token_hit_ratio": hits * stream.block_size / max(prompt, 1)})
        half = None
    gpu_tokens, cpu_tokens = engine.cpu_curve(stream, sweep_gpu, grid, args.gpu_order,
                                              args.cpu_order, *models)
    cpu = pl.DataFrame({"cpu_capacity": grid, "gpu_token_ratio": gpu_tokens / max(prompt, 1),
                        "cpu_token_ratio": cpu_tokens / max(prompt, 1)})
    reuse = events.select(reuse_tokens=pl.col("stack_distance").drop_nulls().cast(pl.Int64)
                          * stream.block_size)
    through = "" if units.bytes_per_token is None else (
        f"; GiB through {units.name}'s {units.bytes_per_token:,} bytes per token")
    lede = (f"{workload.label}: {infinite.requests:,} requests, {infinite.blocks:,} block "
            f"accesses of {stream.block_size:,} tokens ({infinite.distinct_blocks:,} distinct"
            f"{through}). An "
            f"infinite cache hits {infinite.repeat_ratio:.4f} of block accesses (repeated "
            f"blocks); in the block model, where only full blocks are cached and a request "
            f"reuses its longest cached prefix, {infinite.block_hit_ratio:.4f} of blocks and "
            f"{infinite.token_hit_ratio:.4f} of prompt tokens. Models: GPU "
            f"{args.gpu_order} ({models.describe('gpu')}), CPU {args.cpu_order} "
            f"({models.describe('cpu')}); " + (
                "the GPU capacity curves and reuse distances are the block-lru model's, the "
                "CPU curve these models'." if own else
                f"the GPU capacity curve and the CPU curve are these models' (the GPU model "
                f"run at each capacity); the tail-first vs head-first curves and the reuse "
                f"distances (events.parquet's depths) are the block-lru model's: "
                f"{models.gpu_model} keeps no stack depth, which a stack algorithm only has."))
    note = ("<p>Capacities are in tokens; a tier of C tokens holds C // block size blocks. "
            "Model: <code>pipeline.blocks</code> (README, block-level prefix caching).</p>")
    groups = [
        ("GPU capacity", note, [
            charts.gpu_section(order_curve, args.gpu_order if own else
                               f"{models.gpu_model} {args.gpu_order}",
                               infinite.block_hit_ratio, half, units),
            charts.orders_section(curves.select("order", "gpu_capacity", "token_hit_ratio"),
                                  units, "" if own else "block-lru")]),
        ("A CPU tier", "", [charts.cpu_section(cpu, sweep_gpu, args.cpu_order, units)]),
        ("Reuse distances", "", [charts.reuse_section(reuse, sweep_gpu, units,
                                                      "" if own else "block-lru")]),
    ]
    return page_html(f"kvlab trace: {Path(workload.label).name}", lede, groups)


def add_report(staged: Outputs, path: Path, workload: Workload, stream: BlockStream,
               infinite: engine.Infinite, args: argparse.Namespace, sweep_gpu: int,
               events: pl.DataFrame, models: Models | None = None) -> None:
    """Stage the report page in ``staged``."""
    page = report_page(workload, stream, infinite, args, sweep_gpu, events, models)
    staged.add(path, page.encode("utf-8"), "--report")
