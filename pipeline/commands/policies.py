"""Hit ratio of every registered cache policy (``--list`` names them; Belady's OPT is the
ceiling) per capacity, on the lab's documents or a Mooncake trace.

Default: the lab's document mode (10 documents x 5011 tokens, passes fwd,fwd,rev, one object
per document). ``--trace PATH``: a Mooncake JSONL trace at object level (each block one
object, no prefix rule). ``--cpu N`` adds kvlab's CPU tier (fed the GPU misses) with
``--cpu-policy``. Curves (and per-access events) go to Parquet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.base.arguments import add_document_arguments
from pipeline.base.config import EVENTS_DIR, GPU_CLIFF_CAPACITIES
from pipeline.base.errors import CLIError
from pipeline.sizes.limits import MAX_EVENTS, check_count
from pipeline.sizes.units import Capacity, add_kv_arguments, capacities, capacity, \
    resolve_capacities, size_lines
from pipeline.policies import POLICIES
from pipeline.catalog.policy_replay import METHODS, encode, hit_matrix, onepass_policies, \
    tiered_codes
from pipeline.workloads.documents import documents_workload
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.mooncake import read_mooncake
from pipeline.base.staging import Outputs, parquet_bytes

OUT_DIR = EVENTS_DIR / "policies"
#: default trace capacities, as fractions of the trace's distinct bytes
TRACE_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def policy_list(text: str) -> list[str]:
    """argparse type: comma-separated policy names (or ``all``)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(POLICIES)
    bad = [name for name in names if name not in POLICIES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown policy {bad[0] if bad else text!r}; accepted: {', '.join(POLICIES)}, all")
    return list(dict.fromkeys(names))


def policy_name(text: str) -> str:
    """argparse type: one policy name."""
    if text not in POLICIES:
        raise argparse.ArgumentTypeError(
            f"unknown policy {text!r}; accepted: {', '.join(POLICIES)}")
    return text


def policy_list_text() -> str:
    """One line per registered policy, in registry order: its name and summary."""
    from pipeline.catalog import entry

    return "\n".join(f"{name:8} {entry(name).summary}" for name in POLICIES)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``policies``."""
    work = parser.add_argument_group("workload (default: the lab's documents)")
    work.add_argument("--trace", type=Path, help="Mooncake JSONL trace, replayed per block")
    work.add_argument("--sizes", choices=("unit", "tokens"), default="unit",
                      help="trace block sizes: unit (capacity in blocks, default) or tokens")
    add_document_arguments(work)
    model = parser.add_argument_group("cache model")
    model.add_argument("--list", action="store_true",
                       help="print every registered policy (name and summary) and exit")
    model.add_argument("--gpu-policy", type=policy_list, default=list(POLICIES),
                       metavar="NAMES", help=f"policies of the GPU tier, comma-separated "
                       f"({', '.join(POLICIES)}; default all)")
    model.add_argument("--capacities", type=capacities, metavar="CAPS",
                       help="GPU capacities, tokens (blocks with --sizes unit) or sizes such "
                            "as 0.6GiB through --model's bytes per token (lab default: "
                            f"{','.join(map(str, GPU_CLIFF_CAPACITIES))}; trace default: "
                            f"{', '.join(f'{f:g}' for f in TRACE_FRACTIONS)} of its distinct "
                            "bytes)")
    model.add_argument("--cpu", type=capacity, default=0, metavar="CAP",
                       help="CPU tier capacity, as --capacities (1.5GiB, or LMCache's "
                            "max_local_cpu_size 1.5 as 1.5lmcacheGB; default 0: no CPU tier)")
    model.add_argument("--cpu-policy", type=policy_name, default="lru",
                       help="policy of the CPU tier (default %(default)s)")
    model.add_argument("--method", choices=METHODS, default="auto",
                       help="auto: one pass where exact (lru with one size per key; mru, opt "
                            "with one size for all), else compiled replays; onepass: only "
                            "there; replay; classes: the Python classes (slow reference)")
    add_kv_arguments(parser.add_argument_group("KV size (converts sizes to tokens)"))
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--out", type=Path, default=OUT_DIR,
                     help="folder for curves.parquet and events.parquet "
                          "(default data/events/policies)")
    out.add_argument("--events", action="store_true",
                     help="also write per-access events for a trace (always for the lab)")


def _workload(args) -> tuple[str, np.ndarray, np.ndarray, np.ndarray | None]:
    """(label, keys, sizes, pass index per access or None)."""
    if args.trace is not None:
        if not args.trace.is_file():
            what = "is a folder" if args.trace.is_dir() else "no such file"
            raise CLIError(f"--trace {args.trace}: {what}")
        try:
            trace = read_mooncake(args.trace)
        except (OSError, ValueError) as exc:
            raise CLIError(f"--trace {exc}" if isinstance(exc, TraceError)
                           else f"--trace {args.trace}: {exc}") from None
        keys, sizes = trace.items(unit=args.sizes == "unit")
        return f"{args.trace.name} ({args.sizes})", keys, sizes, None
    if args.docs == 0:
        raise CLIError("--docs 0: the lab needs at least one document")
    keys, sizes = documents_workload(args.docs, args.tokens, args.passes, None).items()
    passes = np.repeat(np.arange(len(args.passes)), args.docs)
    return f"lab ({args.docs} docs x {args.tokens}, {','.join(args.passes)})", keys, sizes, passes


def _capacities(args, keys: np.ndarray, sizes: np.ndarray) -> list[int]:
    if args.capacities is not None:
        return sorted(set(args.capacities))
    if args.trace is None:
        return list(GPU_CLIFF_CAPACITIES)
    distinct = int(pl.DataFrame({"k": keys, "s": sizes}).unique("k")["s"].sum())
    return sorted({max(1, int(distinct * f)) for f in TRACE_FRACTIONS})


def _curve_rows(name: str, capacities: list[int], tiers: np.ndarray,
                passes: np.ndarray | None) -> pl.DataFrame:
    """Counts per capacity (and pass): accesses, GPU hits, CPU hits."""
    labels = passes if passes is not None else np.zeros(tiers.shape[1], np.int64)
    rows = []
    for label in dict.fromkeys(labels.tolist()):
        part = tiers[:, labels == label]
        rows.append(pl.DataFrame({
            "policy": name, "capacity": np.asarray(capacities, np.int64), "pass": label,
            "accesses": part.shape[1], "gpu_hits": (part == 0).sum(axis=1),
            "cpu_hits": (part == 1).sum(axis=1)},
            schema_overrides={"pass": pl.Int16, "accesses": pl.Int64, "gpu_hits": pl.Int64,
                              "cpu_hits": pl.Int64}))
    frame = pl.concat(rows)
    return frame if passes is not None else frame.drop("pass")


def _event_rows(name: str, capacities: list[int], tiers: np.ndarray,
                passes: np.ndarray | None) -> pl.DataFrame:
    """One row per access, policy and capacity."""
    n = tiers.shape[1]
    return pl.DataFrame({
        "policy": name, "capacity": np.repeat(np.asarray(capacities, np.int64), n),
        "access": np.tile(np.arange(n, dtype=np.int32), len(capacities)),
        "pass": np.tile(passes if passes is not None else np.zeros(n, np.int64),
                        len(capacities)).astype(np.int16),
        "tier": pl.Series(np.asarray(TIER_NAMES)[tiers.ravel()], dtype=pl.Categorical)})


TIER_NAMES = ("gpu", "cpu", "miss")


def _resolve_sizes(args) -> tuple[object, dict]:
    """``--capacities``/``--cpu`` to tokens (``pipeline.sizes.units``); a size where capacities
    count blocks (a trace with ``--sizes unit``) is a CLIError."""
    if args.trace is not None and args.sizes == "unit":
        for dest in ("capacities", "cpu"):
            value = getattr(args, dest)
            given = value if isinstance(value, list) else [value]
            sized = [c for c in given if isinstance(c, Capacity) and c.unit]
            if sized:
                raise CLIError(f"--{dest} {sized[0].text}: with --sizes unit capacities count "
                               f"blocks; a size needs --sizes tokens")
    return resolve_capacities(args, "capacities", "cpu")


def simulate(args, events: bool = True) -> tuple[str, pl.DataFrame, pl.DataFrame | None]:
    """(workload label, curves, events or None) for the parsed arguments, capacities in
    tokens (``_resolve_sizes``); validates first."""
    if args.method == "onepass":
        exact = onepass_policies()
        bad = [name for name in [*args.gpu_policy, *([args.cpu_policy] if args.cpu else [])]
               if name not in exact]
        if bad:
            raise CLIError(f"--method onepass: exact only for {', '.join(exact)}, not "
                           f"{bad[0]} (use --method auto or replay)")
    policies = len(args.gpu_policy)
    if args.trace is None:             # the lab: its size is known before it is built
        count = len(set(args.capacities)) if args.capacities else len(GPU_CLIFF_CAPACITIES)
        check_count(policies * count * args.docs * len(args.passes), MAX_EVENTS,
                    f"--docs {args.docs} x {len(args.passes)} --passes x {count} --capacities "
                    f"x {policies} --gpu-policy", "events")
    label, keys, sizes, passes = _workload(args)
    capacities = _capacities(args, keys, sizes)
    if args.trace is not None:
        check_count(len(capacities) * keys.size * (policies if events else 1), MAX_EVENTS,
                    f"--trace {args.trace}: {keys.size} block accesses x {len(capacities)} "
                    f"--capacities" + (f" x {policies} --gpu-policy" if events else ""),
                    "events")
    codes = encode(keys)
    curves, logs = [], []
    for name in args.gpu_policy:
        try:
            if args.cpu:
                tiers = np.vstack([tiered_codes(name, args.cpu_policy, codes, sizes, c,
                                                args.cpu, args.method) for c in capacities])
            else:
                tiers = np.where(hit_matrix(name, codes, sizes, capacities, args.method), 0, 2)
        except ValueError as exc:
            raise CLIError(f"--method {args.method}: {exc}") from None
        curves.append(_curve_rows(name, capacities, tiers, passes))
        if events:
            logs.append(_event_rows(name, capacities, tiers, passes))
    curves = pl.concat(curves).with_columns(
        hit_ratio=pl.col("gpu_hits") / pl.col("accesses"), workload=pl.lit(label),
        cpu=pl.lit(args.cpu, pl.Int64),
        cpu_policy=pl.lit(args.cpu_policy if args.cpu else None, pl.String))
    return label, curves, (pl.concat(logs) if events else None)


def _totals(curves: pl.DataFrame) -> pl.DataFrame:
    return (curves.group_by(["policy", "capacity"], maintain_order=True)
            .agg(pl.col("accesses", "gpu_hits", "cpu_hits").sum(),
                 pass_hits=pl.col("gpu_hits") if "pass" in curves.columns else pl.lit(None))
            .with_columns(hit_ratio=pl.col("gpu_hits") / pl.col("accesses")))


def _table(label: str, totals: pl.DataFrame, cpu: int) -> str:
    capacities = totals["capacity"].unique(maintain_order=True).to_list()
    lines = [f"workload: {label}; GPU hit ratio (%) per policy and capacity"
             + (f"; + CPU tier of {cpu} (its hits in brackets)" if cpu else "")]
    width = max(9, *(len(str(c)) + 1 for c in capacities))
    lines.append("policy".ljust(8) + "".join(str(c).rjust(width) for c in capacities))
    for (name,), rows in totals.group_by(["policy"], maintain_order=True):
        cells = []
        for row in rows.iter_rows(named=True):
            cell = f"{100 * row['hit_ratio']:.1f}"
            if cpu:
                cell += f"[{100 * row['cpu_hits'] / row['accesses']:.0f}]"
            cells.append(cell.rjust(width))
        lines.append(name.ljust(8) + "".join(cells))
    if totals["pass_hits"].dtype != pl.Null:
        lines.append("hits per pass (p1/p2/...):")
        for (name,), rows in totals.group_by(["policy"], maintain_order=True):
            lines.append(name.ljust(8) + "".join(
                "/".join(map(str, h)).rjust(width) for h in rows["pass_hits"].to_list()))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Run the command; print the table (or JSON) and write the Parquet files."""
    if args.list:
        print(policy_list_text())
        return 0
    start = time.perf_counter()
    args, sizes = _resolve_sizes(args)
    label, curves, events = simulate(args, events=args.trace is None or args.events)
    staged = Outputs()                  # both files or neither (pipeline.base.staging)
    staged.add(args.out / "curves.parquet", parquet_bytes(curves), "--out")
    if events is not None:
        staged.add(args.out / "events.parquet", parquet_bytes(events), "--out")
    paths = [args.out / "curves.parquet"] + (
        [args.out / "events.parquet"] if events is not None else [])
    staged.commit()
    totals = _totals(curves)
    if args.json:
        payload = {"workload": label, "cpu": args.cpu,
                   "cpu_policy": args.cpu_policy if args.cpu else None,
                   "curves": totals.drop("pass_hits" if totals["pass_hits"].dtype == pl.Null
                                         else []).to_dicts(),
                   "files": [str(path) for path in paths]}
        if sizes:
            payload["sizes"] = sizes
        json.dump(payload, sys.stdout, indent=1)
        print()
    else:
        print(_table(label, totals, args.cpu))
        for line in size_lines(sizes):
            print(line)
        print(f"wrote {' and '.join(map(str, paths))} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    from pipeline.cli import run_command

    raise SystemExit(run_command("policies"))
