"""Measured TTFT with polars: load, summarize, tabulate, and attribute requests to cache tiers.

``python -m pipeline measured data/ttft.jsonl [--gpu 21520] [--cpu 56000] [--tokens 5011]
[--json measured.json]`` prints TTFT per (config, pass), TTFT per (config, pass, predicted
tier) and one sentence per pass saying whether the predicted tiers' latencies separate.

* Input is validated by ``kvlab.summarize.read_numbered_records``, so a bad line gives exactly the
  same ``file:line: reason`` as kvlab/summarize.py; on top of that ``doc`` and
  ``doc_tokens`` must be 64-bit integers and ``ttft_ms`` / ``total_ms`` numbers that a
  64-bit float holds exactly (same message format).
* ``summary(df)`` equals ``kvlab.summarize.summarize(records)``, key order included. The
  statistics are exact in polars: the median is Python's ``(lo + hi) / 2`` on the two
  middle values, and the mean is the correctly rounded exact mean (what
  ``statistics.mean`` returns), from per-(group, binary exponent) integer mantissa sums.
  Only the final decimal rounding is Python's ``round``, because polars' ``round`` is not
  the correctly rounded decimal rounding (``0.15`` -> ``0.2``; Python gives ``0.1``).
* Tier attribution replays each config's requests through kvlab's own simulator:
  baseline = ``TwoTierCache(gpu, 0)``, lmcache = ``TwoTierCache(gpu, cpu)``, keys = doc
  numbers, ``tokens`` per doc, one cache per config kept across passes.
"""

from __future__ import annotations

import argparse
import reprlib
import sys
from collections.abc import Sequence
from itertools import combinations

import polars as pl

from kvlab.kvsim import TIERS, TwoTierCache
from kvlab.scenario import non_negative_int
from kvlab.summarize import CONFIGS, InputError, read_numbered_records, write_json_atomic
from pipeline.config import LAB_CPU, LAB_GPU, LAB_TOKENS
from pipeline.errors import CLIError

__all__ = ["LINE_SCHEMA", "RECORD_SCHEMA", "TIER", "load_measured", "records_frame", "summary",
           "stats_table", "tier_models", "attribute_tiers", "tier_table", "separation_notes",
           "add_arguments", "main"]

#: The fields of each line, and its 1-based line number in the file.
LINE_SCHEMA = pl.Schema({
    "config": pl.String, "pass": pl.String, "doc": pl.Int64, "doc_tokens": pl.Int64,
    "ttft_ms": pl.Float64, "total_ms": pl.Float64, "line": pl.Int64,
})
#: A loaded file: LINE_SCHEMA plus ``request`` (see ``records_frame``).
RECORD_SCHEMA = pl.Schema({**LINE_SCHEMA, "request": pl.Int64})
#: The predicted tier, fastest first (sorting by it gives gpu, cpu, miss).
TIER = pl.Enum(TIERS)
FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")
INT64_RANGE = range(-2**63, 2**63)

# --- named expressions -------------------------------------------------------------------

TTFT = pl.col("ttft_ms")
N = pl.len()
_SORTED = TTFT.sort()
_LOWER_MID = _SORTED.get((N - 1) // 2)
_UPPER_MID = _SORTED.get(N // 2)
#: statistics.median: the middle value, or (lower + upper) / 2 in float arithmetic.
MEDIAN = pl.when(N % 2 == 1).then(_LOWER_MID).otherwise((_LOWER_MID + _UPPER_MID) / 2)
P90 = TTFT.quantile(0.9, interpolation="linear")

# A finite double x >= 0 is exactly MANTISSA * 2**EXPONENT (integers; subnormals included).
# ttft_ms is validated >= 0, so the sign bit (dropped here) is only ever set on -0.0.
_BITS = TTFT.reinterpret(dtype=pl.UInt64)
_BIASED_EXPONENT = (_BITS // 2**52) % 2**11
_FRACTION = _BITS % 2**52
MANTISSA = pl.when(_BIASED_EXPONENT > 0).then(_FRACTION + 2**52).otherwise(_FRACTION)
EXPONENT = pl.max_horizontal(_BIASED_EXPONENT, 1).cast(pl.Int64) - 1075

FIRST_LINE = pl.col("line").min()
#: The line where each row's (config, pass) first appears: orders a config's passes.
PASS_START = pl.col("line").min().over("config", "pass")


# --- loading -----------------------------------------------------------------------------

def load_measured(path: str) -> pl.DataFrame:
    """Read and validate a measured TTFT file into RECORD_SCHEMA; InputError names file:line."""
    numbered = read_numbered_records(path)
    lines = [lineno for lineno, _ in numbered]
    records = [record for _, record in numbered]
    _check_typed_fields(path, lines, records)
    return records_frame(records, lines)


def records_frame(records: Sequence[dict], lines: Sequence[int] | None = None) -> pl.DataFrame:
    """Validated records as a frame with RECORD_SCHEMA.

    ``line`` defaults to 1..n. ``request`` numbers each config's requests in reading order
    (from 0): passes in first-appearance order, file order within a pass.
    """
    columns = {field: [record[field] for record in records] for field in FIELDS}
    columns["line"] = list(range(1, len(records) + 1) if lines is None else lines)
    frame = pl.DataFrame(columns, schema=LINE_SCHEMA)
    return (frame.sort(PASS_START, "line")
                 .with_columns(request=pl.int_range(pl.len(), dtype=pl.Int64).over("config"))
                 .sort("line"))


def _typed_field_problem(record: dict) -> str | None:
    """Why a record read_records accepted does not fit RECORD_SCHEMA exactly, or None."""
    for field in ("doc", "doc_tokens"):
        value = record[field]
        if isinstance(value, bool) or not isinstance(value, int) or value not in INT64_RANGE:
            return f"{field} must be a 64-bit integer, got {reprlib.repr(value)}"
    total = record["total_ms"]
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        return f"total_ms must be a number, got {reprlib.repr(total)}"
    for field in ("ttft_ms", "total_ms"):
        if not _is_exact_float(record[field]):
            return (f"{field} is not exactly representable as a 64-bit float, "
                    f"got {reprlib.repr(record[field])}")
    return None


def _is_exact_float(value: float) -> bool:
    try:
        return isinstance(value, float) or float(value) == value
    except OverflowError:
        return False


def _check_typed_fields(path: str, lines: Sequence[int], records: Sequence[dict]) -> None:
    for lineno, record in zip(lines, records):
        problem = _typed_field_problem(record)
        if problem:
            raise InputError(f"{path}:{lineno}: {problem}")


# --- statistics --------------------------------------------------------------------------

def _exact_means(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """keys + mean_ms: the correctly rounded exact mean of ttft_ms (== statistics.mean)."""
    per_exponent = (df.group_by(*keys, EXPONENT.alias("exponent"))
                      .agg(mantissa_sum=MANTISSA.cast(pl.Int128).sum(), n=N))
    per_group = per_exponent.group_by(keys).agg("exponent", "mantissa_sum", n=pl.col("n").sum())
    means = [_correctly_rounded_mean(row["exponent"], row["mantissa_sum"], row["n"])
             for row in per_group.iter_rows(named=True)]
    return per_group.select(keys).with_columns(pl.Series("mean_ms", means, dtype=pl.Float64))


def _correctly_rounded_mean(exponents: list[int], sums: list[int], n: int) -> float:
    """float(sum(s * 2**e) / n), rounded once (Python's int / int is correctly rounded)."""
    low = min(exponents)
    numerator = sum(total << (exponent - low) for exponent, total in zip(exponents, sums))
    return numerator / (n << -low) if low < 0 else (numerator << low) / n


def _group_stats(df: pl.DataFrame, keys: list[str], **extra: pl.Expr) -> pl.DataFrame:
    """keys, n, p50_ms, mean_ms, extra aggregations, first_line; ordered by first_line."""
    stats = df.group_by(keys).agg(n=N.cast(pl.Int64), p50_ms=MEDIAN, **extra,
                                  first_line=FIRST_LINE)
    return (stats.join(_exact_means(df, keys), on=keys, how="left")
                 .select(*keys, "n", "p50_ms", "mean_ms", *extra, "first_line")
                 .sort("first_line"))


def _ratio(numerator: str, denominator: str) -> pl.Expr:
    """numerator / denominator, null where the denominator is 0 (as kvlab's _ratio)."""
    return pl.when(pl.col(denominator) != 0).then(pl.col(numerator) / pl.col(denominator))


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _pass_ratios(df: pl.DataFrame, stats: pl.DataFrame) -> pl.DataFrame:
    """pass, p50, mean: baseline / lmcache per pass in both, passes in file order."""
    def side(config: str) -> pl.DataFrame:
        return stats.filter(pl.col("config") == config).select("pass", "p50_ms", "mean_ms")

    pass_order = df.group_by("pass").agg(first_line=FIRST_LINE)
    return (side("baseline").join(side("lmcache"), on="pass", suffix="_lmcache")
            .join(pass_order, on="pass").sort("first_line")
            .select("pass", p50=_ratio("p50_ms", "p50_ms_lmcache"),
                    mean=_ratio("mean_ms", "mean_ms_lmcache")))


def summary(df: pl.DataFrame) -> dict:
    """The measured.json document; equal (==, key order) to kvlab.summarize.summarize.

    ``df`` as load_measured or records_frame returns it (``line`` gives the pass order).
    """
    stats = _group_stats(df.filter(pl.col("config").is_in(CONFIGS)), ["config", "pass"])
    document: dict = {
        config: {row["pass"]: {"n": row["n"], "p50_ms": round(row["p50_ms"], 1),
                               "mean_ms": round(row["mean_ms"], 1)}
                 for row in stats.filter(pl.col("config") == config).iter_rows(named=True)}
        for config in CONFIGS
    }
    document["ratio"] = {row["pass"]: {"p50": _round(row["p50"], 2),
                                       "mean": _round(row["mean"], 2)}
                         for row in _pass_ratios(df, stats).iter_rows(named=True)}
    return document


def stats_table(df: pl.DataFrame) -> pl.DataFrame:
    """TTFT per (config, pass): n, p50/p90/min/mean/max ms, baseline / this ratios.

    Columns: config, pass, n, p50_ms, p90_ms (linear interpolation), min_ms, mean_ms,
    max_ms, ratio_p50, ratio_mean (baseline's statistic for the same pass over this row's;
    null where baseline lacks the pass or this row's is 0). Unrounded; configs and passes
    in first-appearance order.
    """
    stats = _group_stats(df, ["config", "pass"], p90_ms=P90, min_ms=TTFT.min(),
                         max_ms=TTFT.max())
    baseline = (stats.filter(pl.col("config") == "baseline")
                     .select("pass", base_p50=pl.col("p50_ms"), base_mean=pl.col("mean_ms")))
    return (stats.join(baseline, on="pass", how="left")
                 .sort(pl.col("first_line").min().over("config"), "first_line")
                 .select("config", "pass", "n", "p50_ms", "p90_ms", "min_ms", "mean_ms",
                         "max_ms", ratio_p50=_ratio("base_p50", "p50_ms"),
                         ratio_mean=_ratio("base_mean", "mean_ms")))


# --- tier attribution --------------------------------------------------------------------

def tier_models(gpu_capacity: int, cpu_capacity: int) -> dict[str, TwoTierCache]:
    """A fresh simulator per modelled config: baseline GPU only, lmcache GPU + CPU."""
    return {"baseline": TwoTierCache(gpu_capacity, 0),
            "lmcache": TwoTierCache(gpu_capacity, cpu_capacity)}


def _replay(df: pl.DataFrame, config: str, cache: TwoTierCache, tokens: int) -> pl.DataFrame:
    """config, request, tier: one config's requests replayed in request order."""
    requests = df.filter(pl.col("config") == config).sort("request")
    tiers = [cache.access(doc, tokens) for doc in requests["doc"]]   # stateful: one by one
    return requests.select("config", "request", tier=pl.Series(tiers, dtype=TIER))


def attribute_tiers(df: pl.DataFrame, gpu_capacity: int = LAB_GPU, cpu_capacity: int = LAB_CPU,
                    tokens: int = LAB_TOKENS) -> pl.DataFrame:
    """df plus ``tier`` (TIER): the tier kvlab's simulator predicts for each request.

    Configs other than baseline and lmcache are not modelled: their tier is null.
    """
    predicted = [_replay(df, config, cache, tokens)
                 for config, cache in tier_models(gpu_capacity, cpu_capacity).items()]
    schema = {"config": pl.String, "request": pl.Int64, "tier": TIER}
    return df.join(pl.concat([pl.DataFrame(schema=schema), *predicted]),
                   on=["config", "request"], how="left", maintain_order="left")


def tier_table(attributed: pl.DataFrame) -> pl.DataFrame:
    """TTFT per (config, pass, predicted tier).

    Columns: config, pass, tier, n, p50_ms, mean_ms, min_ms, max_ms. Configs and passes in
    first-appearance order, tiers fastest first; unattributed rows are left out.
    """
    stats = _group_stats(attributed.filter(pl.col("tier").is_not_null()),
                         ["config", "pass", "tier"], min_ms=TTFT.min(), max_ms=TTFT.max())
    return (stats.sort(pl.col("first_line").min().over("config"),
                       pl.col("first_line").min().over("config", "pass"), "tier")
                 .drop("first_line"))


def _ms_pair(a: float, b: float) -> tuple[str, str]:
    """a and b in ms with 1 decimal, or more if needed to tell them apart."""
    for digits in range(1, 7):
        left, right = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if left != right or a == b:
            return left, right
    return repr(a), repr(b)


def _tier_range(row: dict) -> str:
    return f"{row['tier']} (n={row['n']}, {row['min_ms']:.1f}-{row['max_ms']:.1f} ms)"


def _and_join(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _pair_verdict(faster: dict, slower: dict) -> tuple[bool, str]:
    """(separates, clause) for two tiers, ``faster`` the one predicted faster."""
    fast, slow = faster["tier"], slower["tier"]
    if faster["max_ms"] < slower["min_ms"]:
        top, bottom = _ms_pair(faster["max_ms"], slower["min_ms"])
        return True, f"every {fast} TTFT is below every {slow} TTFT ({top} < {bottom} ms)"
    if slower["max_ms"] < faster["min_ms"]:
        top, bottom = _ms_pair(slower["max_ms"], faster["min_ms"])
        return False, (f"every {slow} TTFT is below every {fast} TTFT ({top} < {bottom} ms), "
                       f"the reverse of the prediction")
    top, bottom = _ms_pair(faster["max_ms"], slower["min_ms"])
    return False, (f"the {fast} and {slow} ranges overlap (slowest {fast} {top} ms >= "
                   f"fastest {slow} {bottom} ms)")


def _separation_note(config: str, name: str, tiers: list[dict]) -> str:
    """One sentence for one (config, pass); ``tiers`` fastest first."""
    head = f"{config} {name}: predicted {_and_join([_tier_range(row) for row in tiers])}"
    failures = [clause for ok, clause in (_pair_verdict(faster, slower)
                                          for faster, slower in combinations(tiers, 2)) if not ok]
    if failures:
        return f"{head} DO NOT separate: {'; '.join(failures)}."
    steps = [_pair_verdict(faster, slower)[1] for faster, slower in zip(tiers, tiers[1:])]
    return f"{head} separate cleanly: {_and_join(steps)}."


def separation_notes(attributed: pl.DataFrame) -> list[str]:
    """One sentence per (config, pass) with two or more predicted tiers, then skipped configs.

    Tiers separate when each tier's slowest TTFT is below the next slower tier's fastest
    (gpu < cpu < miss); otherwise the note says DO NOT separate and lists every pair of
    tiers whose ranges overlap or run in the reverse order.
    """
    table = tier_table(attributed)
    notes = [_separation_note(config, name, group.rows(named=True))
             for (config, name), group in table.group_by(["config", "pass"], maintain_order=True)
             if group.height >= 2]
    skipped = (attributed.filter(pl.col("tier").is_null())
                         .group_by("config").agg(FIRST_LINE, n=N).sort("line"))
    notes += [f"{row['config']}: {row['n']} request(s) not attributed to tiers (kvlab models "
              f"only baseline = GPU tier and lmcache = GPU + CPU tiers)"
              for row in skipped.iter_rows(named=True)]
    return notes


# --- command line ------------------------------------------------------------------------

HELP = "summarize a measured TTFT file and attribute its requests to tiers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``measured``."""
    parser.add_argument("input", help="measured TTFT file, one JSON object per line")
    parser.add_argument("--gpu", type=non_negative_int, default=LAB_GPU,
                        help="GPU KV capacity in tokens (default %(default)s)")
    parser.add_argument("--cpu", type=non_negative_int, default=LAB_CPU,
                        help="lmcache's CPU tier capacity in tokens (default %(default)s)")
    parser.add_argument("--tokens", type=non_negative_int, default=LAB_TOKENS,
                        help="tokens per document in the simulator's units (default %(default)s)")
    parser.add_argument("--json", metavar="OUT",
                        help="also write the summary (as kvlab/summarize.py) to OUT, atomically")


def _for_display(table: pl.DataFrame) -> pl.DataFrame:
    """ms columns to 1 decimal, ratios to 2 (display only)."""
    return table.with_columns(pl.col("^.*_ms$").round(1), pl.col("^ratio_.*$").round(2))


def main(args: argparse.Namespace) -> int:
    """Print the stats table, the tier table and the separation notes; 1 on bad input."""
    try:
        df = load_measured(args.input)
    except InputError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        try:
            write_json_atomic(args.json, summary(df))
        except OSError as exc:
            raise CLIError(f"{args.json}: cannot write output ({exc.strerror or exc})") from None
    attributed = attribute_tiers(df, args.gpu, args.cpu, args.tokens)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True,
                   tbl_hide_column_data_types=True, tbl_width_chars=200):
        print(f"TTFT per config and pass ({args.input}):")
        print(_for_display(stats_table(df)))
        print(f"\nTTFT per predicted tier (GPU {args.gpu} tokens; lmcache CPU {args.cpu} "
              f"tokens; {args.tokens} tokens per doc):")
        print(_for_display(tier_table(attributed)))
    print("\n" + "\n".join(separation_notes(attributed) or ["(no pass has two or more tiers)"]))
    return 0


if __name__ == "__main__":
    from pipeline.cli import run_command

    sys.exit(run_command("measured"))
