"""What every ``fit`` prints and writes beside its fit: the holdout's summary and its line,
and ``--gpu`` as vLLM's number of GPU blocks."""

from __future__ import annotations

import argparse

import polars as pl

from pipeline.base.errors import UsageError
from pipeline.fit.evaluate import error_summary
from pipeline.sizes.units import Capacity, KVSize

__all__ = ["gpu_blocks", "holdout_summary", "print_holdout"]


def gpu_blocks(gpu: Capacity, kv_bytes_per_token: int | None, block_size: int) -> int:
    """num_gpu_blocks of ``--gpu`` (tokens // block size); a size needs KV bytes per token
    (--kv-bytes-per-token, or --vllm-bench's model), a pool under 2 blocks is refused (usage
    errors)."""
    if gpu.is_size and not kv_bytes_per_token:
        raise UsageError(f"--gpu {gpu.text} needs --kv-bytes-per-token (or --gpu in tokens or "
                         f"blocks): no model is assumed")
    kv = KVSize("given", kv_bytes_per_token, "--kv-bytes-per-token") \
        if kv_bytes_per_token else None
    blocks = gpu.tokens(kv, block_size) // block_size
    if blocks < 2:
        raise UsageError(f"--gpu {gpu.text}: {blocks} blocks of {block_size}: at least 2 "
                         f"(block 0 is vLLM's null block)")
    return blocks


def holdout_summary(args: argparse.Namespace, frame: pl.DataFrame) -> dict | None:
    """What was held out and the error on it (None without --holdout)."""
    if not args.holdout:
        return None
    out = frame.filter(pl.col("held_out"))
    which = {"length": out["prompt_tokens"].unique().sort().to_list(),
             "load": sorted(set(zip(out["file"].to_list(), out["load"].to_list())))
             }.get(args.holdout_by)
    return {"fraction": args.holdout, "by": args.holdout_by, "seed": args.seed,
            **error_summary(out), **({"held_out": which} if which else {})}


def print_holdout(holdout: dict | None) -> None:
    if holdout is None:
        return
    which = holdout.get("held_out")
    shown = ("" if not which else ": " + ", ".join(
        str(w) if holdout["by"] == "length" else w[1] for w in which) +
        (" tokens" if holdout["by"] == "length" else ""))
    print(f"held-out TTFT error: p50 {holdout['p50_pct']:.1f} %, "
          f"p90 {holdout['p90_pct']:.1f} % ({holdout['requests']} requests held out "
          f"by {holdout['by']}{shown})")
