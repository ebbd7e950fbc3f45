"""Summarize a measured TTFT file and attribute its requests to cache tiers.

``python -m pipeline measured data/ttft.jsonl [--gpu 21520] [--cpu 56000] [--tokens 5011]
[--measured-docs N ...] [--json measured.json]`` prints TTFT per (config, pass), TTFT per
(config, pass, predicted tier) and one sentence per pass saying whether the predicted tiers'
latencies separate.

The jobs live in their own modules: reading, validation and the file's setup in
``pipeline.ttft.inputs`` (the reader, checks and ``--measured-*`` flags of ``run
--measured``), statistics in ``pipeline.ttft.summary`` (``--json`` writes
exactly what kvlab/summarize.py writes), tier attribution in ``pipeline.ttft.attribution`` and the
sentences in ``pipeline.ttft.verdicts``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import polars as pl

from kvlab.summarize import write_json_atomic
from pipeline.ttft.attribution import attribute_tiers
from pipeline.base.config import LAB_CPU, LAB_GPU, LAB_TOKENS
from pipeline.base.arguments import positive_int
from pipeline.base.errors import CLIError
from pipeline.sizes.units import add_kv_arguments, capacity, resolve_capacities, size_lines
from pipeline.ttft.configs import agreement_lines
from pipeline.ttft.inputs import add_setup_arguments, read_measured, setup_flags
from pipeline.ttft.summary import stats_table, summary, tier_table
from pipeline.ttft.verdicts import separation_notes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``measured``."""
    parser.add_argument("input", help="measured TTFT file, one JSON object per line")
    parser.add_argument("--gpu", type=capacity, metavar="CAP",
                        help="GPU KV capacity, tokens or a size such as 0.6GiB through "
                             "--model's bytes per token (default: the file's measured setup, "
                             f"see --help of run; the lab's {LAB_GPU} for the bundled file)")
    parser.add_argument("--cpu", type=capacity, metavar="CAP",
                        help="lmcache's CPU tier capacity, tokens or a size (LMCache's "
                             "max_local_cpu_size 1.5 as 1.5lmcacheGB or 1.5GiB; default: the measured "
                             f"setup's; the lab's {LAB_CPU})")
    parser.add_argument("--tokens", type=positive_int,
                        help="tokens per document in the simulator's units (default: the "
                             f"measured setup's; the lab's {LAB_TOKENS})")
    add_kv_arguments(parser)
    add_setup_arguments(parser)
    parser.add_argument("--every-config", metavar="OUT",
                        help="also write every config's TTFT per pass with its ratios to "
                             "baseline (p50, mean; baseline's over this config's) to OUT as "
                             "JSON, atomically (--json is kvlab's baseline/lmcache summary)")
    parser.add_argument("--json", metavar="OUT",
                        help="also write the summary (as kvlab/summarize.py) to OUT, atomically")


def _for_display(table: pl.DataFrame) -> pl.DataFrame:
    """ms columns to 1 decimal, ratios to 2 (display only)."""
    return table.with_columns(pl.col("^.*_ms$").round(1), pl.col("^ratio_.*$").round(2))


def every_config(df: pl.DataFrame) -> dict:
    """``{config: {pass: {n, p50_ms, mean_ms, ratio_p50, ratio_mean}}}`` for every config in
    file order (ms to 1 decimal, ratios to 2; a ratio is null where baseline lacks the pass)."""
    document: dict = {}
    for row in stats_table(df).iter_rows(named=True):
        document.setdefault(row["config"], {})[row["pass"]] = {
            "n": row["n"], "p50_ms": round(row["p50_ms"], 1), "mean_ms": round(row["mean_ms"], 1),
            **{key: None if row[key] is None else round(row[key], 2)
               for key in ("ratio_p50", "ratio_mean")}}
    return document


def _server_tiers(path: str, df: pl.DataFrame) -> pl.DataFrame | None:
    """config, request, server_tier: the engine's own account (``pipeline measure``'s
    ``server_tier``), in the loaded frame's numbering; None when the file has none."""
    raw = pl.read_ndjson(path, infer_schema_length=None)
    if "server_tier" not in raw.columns or raw.height != df.height:
        return None
    return df.select("config", "request", server_tier=raw["server_tier"].cast(pl.String))


def main(args: argparse.Namespace) -> int:
    """Print the stats table, the tier table and the separation notes; 1 on bad input."""
    args, sizes = resolve_capacities(args, "gpu", "cpu")
    measured = read_measured(args.input, setup_flags(args),
                             lambda line: print(line, file=sys.stderr))
    df, setup = measured.requests, measured.setup
    if args.json:
        try:
            write_json_atomic(args.json, summary(df))
        except OSError as exc:
            raise CLIError(f"{args.json}: cannot write output ({exc.strerror or exc})") from None
    if args.every_config:
        try:
            write_json_atomic(args.every_config, every_config(df))
        except OSError as exc:
            raise CLIError(f"{args.every_config}: cannot write output "
                           f"({exc.strerror or exc})") from None
    chosen = {"gpu": args.gpu, "cpu": args.cpu, "tokens": args.tokens}
    if any(value is not None for value in chosen.values()):     # a what-if: flags win
        setup = replace(setup, **{k: v for k, v in chosen.items() if v is not None},
                        origin="--gpu/--cpu/--tokens over " + setup.origin)
    attributed = attribute_tiers(df, setup.gpu, setup.cpu, setup.tokens, setup.configs,
                                 args.input)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True,
                   tbl_hide_column_data_types=True, tbl_width_chars=200):
        print(f"TTFT per config and pass ({args.input}):")
        print(_for_display(stats_table(df)))
        where = (f"GPU {setup.gpu} tokens; lmcache CPU {setup.cpu} tokens; {setup.tokens} "
                 f"tokens per doc" if not setup.configs else
                 f"each config's cache model below; {setup.tokens} tokens per doc")
        print(f"\nTTFT per predicted tier ({where}; {setup.origin}):")
        print(_for_display(tier_table(attributed)))
    for line in size_lines(sizes):
        print(line)
    if setup.configs:
        print("\ncache model per config (vs the engine's own tiers where the file logs them):")
        print("\n".join(agreement_lines(attributed, _server_tiers(args.input, df),
                                         setup.configs)))
    print("\n" + "\n".join(separation_notes(attributed) or ["(no pass has two or more tiers)"]))
    return 0
