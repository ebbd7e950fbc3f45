#!/usr/bin/env python3
"""Held-out check of ``--latency profile:DIR``'s interpolation: for each committed vidur
profile (``data/profiles/vidur/GPU/MODEL/mlp.csv``) and tensor parallel size, interpolate a
decoder layer's operations (``pipeline.steptime.profile.LAYER_OPERATIONS``) from every other
measured token count and report the error at the counts left out (fit on one half, report
on the other). Prints the markdown table of docs/calibration.md."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.steptime.profile import LAYER_OPERATIONS  # noqa: E402


def holdout(path: Path) -> list[dict]:
    """One row per tensor parallel size: held-out points, median / p90 / max |error| %."""
    frame = pl.read_csv(path)
    rows = []
    for tp in sorted(frame["num_tensor_parallel_workers"].unique()):
        per = (frame.filter(pl.col("num_tensor_parallel_workers") == tp)
               .group_by("num_tokens")
               .agg(pl.sum_horizontal(*(f"time_stats.{op}.median" for op in LAYER_OPERATIONS))
                    .median().alias("ms")).sort("num_tokens"))
        tokens, ms = per["num_tokens"].to_numpy(), per["ms"].to_numpy()
        fit, held = np.arange(0, len(tokens), 2), np.arange(1, len(tokens) - 1, 2)
        error = 100 * np.abs(np.interp(tokens[held], tokens[fit], ms[fit]) - ms[held]) \
            / ms[held]
        rows.append({"profile": f"{path.parent.parent.name}/{path.parent.name}", "tp": tp,
                     "held_out": len(held), "median_pct": float(np.median(error)),
                     "p90_pct": float(np.percentile(error, 90)),
                     "max_pct": float(error.max())})
    return rows


def main() -> int:
    rows = [row for path in sorted((ROOT / "data" / "profiles" / "vidur").glob("*/*/mlp.csv"))
            for row in holdout(path)]
    print("| profile | TP | held-out token counts | median error | p90 error | max error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['profile']} | {r['tp']} | {r['held_out']} | {r['median_pct']:.1f} % | "
              f"{r['p90_pct']:.1f} % | {r['max_pct']:.1f} % |")
    print_roofline()
    return 0


def roofline_rows(gpu: str) -> list[dict]:
    """The roofline of the linear layers against each profile's measured time, at the peaks
    and with MFU/MBU measured on the other model (fit on one, report on the other)."""
    from pipeline.sizes.gpus import gpu_preset
    from pipeline.steptime.efficiency import profile_efficiency, profile_rows
    preset = gpu_preset(gpu)
    paths = sorted((ROOT / "data" / "profiles" / "vidur" / gpu).glob("*/mlp.csv"))
    rows = []
    for path in paths:
        others = [p for p in paths if p != path]
        mfu, mbu = profile_efficiency(others, preset)
        frame = profile_rows(path, preset)
        for name, (f, b) in (("peaks", (1.0, 1.0)), ("MFU/MBU of the other model",
                                                     (mfu, mbu))):
            # measured / roofline time = 1 / max(mfu_row / f, mbu_row / b)
            ratio = 1 / np.maximum(frame["mfu"].to_numpy() / f, frame["mbu"].to_numpy() / b)
            error = 100 * np.abs(1 - 1 / ratio)
            rows.append({"profile": f"{gpu}/{path.parent.name}", "roofline": name,
                         "factors": f"{f:.3f} / {b:.3f}", "median": np.median(error),
                         "p90": np.percentile(error, 90)})
    return rows


def print_roofline() -> None:
    print()
    print("| profile | roofline | MFU / MBU | median error | p90 error |")
    print("|---|---|---|---|---|")
    for gpu in ("a100", "h100"):
        for r in roofline_rows(gpu):
            print(f"| {r['profile']} | {r['roofline']} | {r['factors']} | "
                  f"{r['median']:.1f} % | {r['p90']:.1f} % |")


if __name__ == "__main__":
    sys.exit(main())
