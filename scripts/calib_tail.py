"""Why the llama.cpp calibration's held-out p90 misses 20 % for held-out loads: the numbers
behind docs/calibration.md's "The p90 tail".

On the five committed runs, with the best setting of calibration.md's loss table (``fit
--machine-load --loss absolute``, the three seeded holdouts), prints:

1. the load holdout's held-out errors by kind (a miss or a prefix hit, queued behind the
   request before or not) and by length of TTFT;
2. how well a request is predicted by its identical twins in the same run (the trace sends
   every prompt three times per run): each unqueued request's measured TTFT against the
   mean of the others of the same prompt and kind, per run: the measurement's own
   repeatability, no model in it;
3. from the closed-loop run's server log (the only run with it): the server's own prompt
   evaluation time of identical requests (same repeatability, inside llama.cpp) and the
   time outside it (TTFT - prompt evaluation: HTTP, tokenization, sampling, streaming);
4. the three holdouts with that outside time (its median, from the training run's log)
   taken as a fixed client latency: fitted on TTFT and end times less it, predicted plus it;
5. an oracle bound: the load holdout's p90 with the one constant scale per held-out run
   that minimises it, chosen on the held-out answers (what a perfect run-level covariate
   could reach; not a model).

Usage: python scripts/calib_tail.py [--campaign llamacpp_calib2] (about 60 s of CPU;
default the first campaign, ``data/measured/llamacpp_calib_*``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.fit.evaluate import error_summary, holdout_masks, predictions  # noqa: E402
from pipeline.fit.inputs import load_runs  # noqa: E402
from pipeline.fit.schedule import EngineModel  # noqa: E402
from pipeline.fit.solve import fit_runs  # noqa: E402

RUNS = ("closed-c1", "rate-0.1", "rate-0.2", "rate-0.3", "rate-0.45")
CAMPAIGN = "llamacpp_calib"


def files(campaign: str = CAMPAIGN) -> list[Path]:
    """The five runs of one calibration campaign (``data/measured/<campaign>_<run>.jsonl``)."""
    return [ROOT / "data" / "measured" / f"{campaign}_{name}.jsonl" for name in RUNS]
HOLDOUTS = ((0.4, "load"), (0.3, "length"), (0.3, "request"))


def holdout_frame(runs, fraction: float, by: str, latency_ms: float = 0.0) -> pl.DataFrame:
    """``predictions`` of that setting's fit for one holdout; ``latency_ms`` is
    taken off every measured TTFT and end before the fit and added back to both sides."""
    shifted = [replace(r, ttft_ms=r.ttft_ms - latency_ms, e2e_ms=r.e2e_ms - latency_ms)
               for r in runs]
    engines = [EngineModel.from_dict(r.engine_model) for r in shifted]
    held = holdout_masks(shifted, fraction, by, 0)
    fit = fit_runs(shifted, engines, [~h for h in held], held=held, machine_load=True,
                   absolute=True)
    frame = predictions(shifted, engines, fit.vector(), held, fit.per_load)
    measured = pl.col("measured_ttft_ms") + latency_ms
    predicted = pl.col("predicted_ttft_ms") + latency_ms
    return frame.with_columns(measured_ttft_ms=measured, predicted_ttft_ms=predicted,
                              error_pct=100 * (predicted - measured) / measured)


def with_kind(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``kind`` (miss or hit), ``queued`` (sent before the request ahead of
    it in its run ended, as measured) and ``ape`` (|error| %)."""
    frame = frame.sort(["file", "arrival_ms"]).with_columns(
        ahead_end=(pl.col("arrival_ms") + pl.col("measured_e2e_ms")).shift(1).over("file"))
    return frame.with_columns(
        kind=pl.when(pl.col("sim_cached_tokens") > 1).then(pl.lit("hit")).otherwise(
            pl.lit("miss")),
        queued=(pl.col("arrival_ms") < pl.col("ahead_end")).fill_null(False),
        ape=pl.col("error_pct").abs())


def twins(values: np.ndarray) -> list[float]:
    """|error| % of each value against the mean of the others (leave one out)."""
    return [abs(np.delete(values, i).mean() - v) / v * 100 for i, v in enumerate(values)]


def quantiles(values) -> str:
    values = np.asarray(list(values), dtype=np.float64)
    return (f"p50 {np.quantile(values, 0.5):5.1f} %, p90 {np.quantile(values, 0.9):5.1f} % "
            f"(n {values.size})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", default=CAMPAIGN,
                        help="file prefix under data/measured (default %(default)s)")
    paths = files(parser.parse_args(argv).campaign)
    runs = load_runs(paths)
    load = with_kind(holdout_frame(runs, 0.4, "load"))
    held = load.filter(pl.col("held_out"))
    print(f"1. load holdout, held out: {quantiles(held['ape'])}")
    with pl.Config(tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=1):
        print(held.group_by("kind", "queued").agg(
            n=pl.len(), median_error_pct=pl.col("error_pct").median(),
            p90_abs_pct=pl.col("ape").quantile(0.9, "linear")).sort("kind", "queued"))
        print(held.group_by(short=pl.col("measured_ttft_ms") < 700).agg(
            n=pl.len(), median_error_pct=pl.col("error_pct").median(),
            p90_abs_pct=pl.col("ape").quantile(0.9, "linear")).sort("short"))
    print("2. identical requests in the same run (unqueued, leave one out), measured TTFT:")
    unqueued, pooled = load.filter(~pl.col("queued")), []
    for name in RUNS:
        errors = [e for _, group in unqueued.filter(pl.col("load") == name).group_by(
            "prompt_tokens", "kind") if group.height > 1
            for e in twins(group["measured_ttft_ms"].to_numpy())]
        pooled += errors
        print(f"   {name:<10} {quantiles(errors)}")
    print(f"   all        {quantiles(pooled)}")
    lines = [json.loads(line) for line in paths[0].read_text().splitlines() if line.strip()]
    groups: dict[tuple, list[float]] = {}
    for line in lines:
        key = (line["input_tokens"], line["server_evaluated_tokens"])
        groups.setdefault(key, []).append(line["server_prompt_eval_ms"])
    inside = [e for values in groups.values() if len(values) > 1
              for e in twins(np.array(values))]
    spread = [max(v) / min(v) for v in groups.values() if len(v) > 1]
    outside = np.array([line["ttft_ms"] - line["server_prompt_eval_ms"] for line in lines])
    print(f"3. closed-c1's server log: its prompt evaluation of identical requests, leave one "
          f"out: {quantiles(inside)}; slowest / fastest of a prompt: median "
          f"{np.median(spread):.2f}, max {max(spread):.2f}")
    latency = float(np.median(outside))
    print(f"   TTFT - prompt evaluation: median {latency:.1f} ms, p90 "
          f"{np.quantile(outside, 0.9):.1f} ms, max {outside.max():.1f} ms "
          f"({np.median(outside / [x['ttft_ms'] for x in lines] * 100):.1f} % of TTFT)")
    print(f"4. the three holdouts, as committed and with a {latency:.1f} ms client latency:")
    for fraction, by in HOLDOUTS:
        for shift in (0.0, latency):
            frame = load if (by, shift) == ("load", 0.0) else holdout_frame(
                runs, fraction, by, shift)
            summary = error_summary(frame.filter(pl.col("held_out")))
            print(f"   by {by:<8} latency {shift:4.1f} ms: p50 {summary['p50_pct']:5.1f} %, "
                  f"p90 {summary['p90_pct']:5.1f} %")
    errors = []
    for name, group in held.group_by("load"):
        m, p = group["measured_ttft_ms"].to_numpy(), group["predicted_ttft_ms"].to_numpy()
        score, scale = min((np.quantile(np.abs(s * p - m) / m, 0.9), s)
                           for s in np.linspace(0.8, 1.4, 601))
        errors += list(np.abs(scale * p - m) / m * 100)
        print(f"5. {name[0]}: p90 {np.quantile(np.abs(p - m) / m, 0.9) * 100:.1f} %, with "
              f"its best constant scale x{scale:.3f} (oracle) {100 * score:.1f} %")
    print(f"   both held-out runs at their oracle scales: {quantiles(errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
