"""``trace --tier KIND:SIZE[,SIZE...]``: a tier stack's tokens per tier for every combination
of capacities (``pipeline.trace.tiers``), in one stack-distance pass where the stack allows
it (``--tier-stack inclusive``) and one replay per point otherwise (LMCache's, the default).
It writes ``OUT/tiers.parquet`` (no report) and prints which of the two it ran."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import polars as pl

from pipeline.base.errors import UsageError
from pipeline.base.staging import Outputs, parquet_bytes
from pipeline.catalog.model_api import GPU_MODELS
from pipeline.catalog.model_options import run_options
from pipeline.components.lmcache import lmcache_chunks
from pipeline.engine.tier_options import check_tiers, stack_chunk
from pipeline.sizes.units import Capacity, capacities, capacity_tokens, kv_from_args
from pipeline.trace.tiers import STACKS, TIER_KINDS, inclusive_points, lmcache_points
from pipeline.workloads.stream import TAIL_FIRST
from pipeline.workloads.stream_limits import model_capacities

__all__ = ["add_trace_tier_arguments", "trace_tier", "trace_tiers"]

_FORM = "KIND:SIZE[,SIZE...] (KIND cpu, disk or remote)"


@dataclass(frozen=True)
class TraceTier:
    """One ``trace --tier``: its text, kind and capacities as given."""

    text: str
    kind: str
    sizes: list[Capacity]
    shared: bool = False


def trace_tier(text: str) -> TraceTier:
    """argparse type of ``trace --tier``: a kind and a list of capacities; a bandwidth or
    latency is refused (trace counts hits, it has no clock)."""
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in TIER_KINDS or not sep or not rest.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected {_FORM}")
    if ":" in rest:
        raise argparse.ArgumentTypeError(f"{text!r}: trace counts hits, not time: give "
                                         f"{_FORM}, without GBPS, latency or shared")
    return TraceTier(text, kind, capacities(rest))


def add_trace_tier_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tier stack (instead of the GPU / CPU sweep)")
    group.add_argument("--tier", dest="tiers", type=trace_tier, action="append", default=None,
                       metavar="KIND:SIZE[,SIZE...]",
                       help="a tier of a stack, repeatable in LMCache's order (cpu, then disk, "
                            "then remote), a list sweeps: the tokens each tier serves at every "
                            "combination, written to OUT/tiers.parquet")
    group.add_argument("--tier-stack", choices=STACKS, default=None,
                       help="lmcache (default): LMCache 0.5.6's stack under vLLM's GPU hit at "
                            "each --gpu (default 0), one replay per point; inclusive: an "
                            "inclusive LRU stack of chunks without the GPU, every point from "
                            "one stack-distance pass")


def _tokens(args: argparse.Namespace, spec: TraceTier, block_size: int) -> list[int]:
    kv = kv_from_args(args, f"--tier {spec.text}") if any(c.is_size for c in spec.sizes) \
        else None
    return [capacity_tokens(c, kv, block_size, f"--tier {spec.text}") for c in spec.sizes]


def trace_tiers(args: argparse.Namespace, workload, stream) -> int:
    """The tier stack's points over ``stream``: written, then printed (text or JSON)."""
    from pipeline.commands.trace_outputs import check_writable
    stack = args.tier_stack or "lmcache"
    check_tiers(args.tiers, fleet=False)
    for option in ("cpu", "cpu_sweep_gpu"):
        if getattr(args, option, None) is not None:
            raise UsageError(f"--{option.replace('_', '-')}: not with --tier (the stack's "
                             f"tiers are its --tier options)")
    if stack == "inclusive" and args.gpu is not None:
        raise UsageError("--gpu: the inclusive stack has no GPU tier (--tier-stack lmcache "
                         "puts vLLM's GPU above the stack)")
    try:
        tiers = [_tokens(args, spec, stream.block_size) for spec in args.tiers]
    except ValueError as exc:
        raise UsageError(f"--tier: {exc}") from None
    gpu_options, cpu_options = run_options(args, stream.block_size, stream.requests,
                                           stream.blocks, workload)
    chunk = stack_chunk(cpu_options.get("chunk_size"), stream.block_size)
    if stack == "lmcache" and min(tiers[0]) < chunk:
        raise UsageError(f"--tier {args.tiers[0].text}: a CPU tier under {chunk} tokens holds "
                         f"no chunk (LMCache's disk and remote tiers need its memory)")
    check_writable(args.out, None)
    chunks = lmcache_chunks(stream, chunk, False)
    names = ", then ".join(spec.kind for spec in args.tiers)
    if stack == "inclusive":
        points, skipped = inclusive_points(chunks, tiers)
        method = "one pass"
        how = (f"inclusive LRU stack of chunks ({names}; every tier sees every chunk access; "
               f"no GPU): {points.height} points exact from one stack-distance pass")
        if skipped:
            how += f"; {skipped} combinations skipped (an inclusive stack does not shrink " \
                   f"downwards)"
    else:
        gpu = args.gpu if args.gpu is not None else [0]
        hits = GPU_MODELS["vllm"](stream, model_capacities(stream, gpu, gpu_options.get(
            "output_tokens", 1)), TAIL_FIRST, **gpu_options)
        padded = tiers + [[0]] * (3 - len(tiers))
        points = lmcache_points(chunks, dict(zip(gpu, hits)), padded)
        skipped, method = 0, "replay"
        how = (f"LMCache 0.5.6 stack ({names}) under vLLM's GPU hit (vllm model): "
               f"{points.height} replays, one per point (LMCache's stack is not one pass: a "
               f"larger tier can hit less)")
    staged = Outputs()
    path = args.out / "tiers.parquet"
    staged.add(path, parquet_bytes(points), label="--out")
    staged.commit()
    if args.json:
        sys.stdout.write(json.dumps({"stack": stack, "method": method, "chunk_size": chunk,
                                     "skipped": skipped, "tiers": str(path),
                                     "points": points.to_dicts()}, indent=2) + "\n")
        return 0
    print(f"trace: {workload.label} ({stream.requests:,} requests, {chunks.n_codes:,} distinct "
          f"chunks of {chunk} tokens, {int(chunks.prompt_tokens.sum()):,} prompt tokens)")
    print(f"tiers: {how}; capacities and tokens in tokens")
    shown = [c for c in points.columns if not c.endswith("hit_ratio") or c == "hit_ratio"]
    with _table_config():
        print(points.select(shown))
    print(f"points: {path} ({points.height} rows)")
    return 0


def _table_config() -> pl.Config:
    return pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True,
                     tbl_hide_column_data_types=True, tbl_width_chars=200)
