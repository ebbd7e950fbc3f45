"""Held-out loads, every way: fit on three of the five llama.cpp calibration runs, predict
the other two, for all ten pairs, with and without ``fit --machine-load``, and with ``fit
--speed-probe`` when every run recorded a speed probe (``measure --speed-probe``).

``fit --holdout 0.4 --holdout-by load`` holds out one seeded pair (seed 0: rates 0.3 and
0.45); this shows whether that pair's figure is typical. Prints one line per pair and
variant (held-out p50 and p90 |TTFT error|, the fitted load scale) and the median and
worst over pairs. Usage: python scripts/calib_load_cv.py [FILES...] (default: the five committed runs;
about 90 s of CPU).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.fit.evaluate import error_summary, predictions  # noqa: E402
from pipeline.fit.inputs import load_runs  # noqa: E402
from pipeline.fit.schedule import EngineModel  # noqa: E402
from pipeline.fit.solve import fit_runs  # noqa: E402
from pipeline.fit.speed import with_speeds  # noqa: E402

RUNS = ("closed-c1", "rate-0.1", "rate-0.2", "rate-0.3", "rate-0.45")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path,
                        default=[ROOT / "data" / "measured" / f"llamacpp_calib_{name}.jsonl"
                                 for name in RUNS])
    args = parser.parse_args(argv)
    runs = load_runs(args.files)
    engines = [EngineModel.from_dict(r.engine_model) for r in runs]
    variants = ["plain", "machine load"]
    if all(r.speed_probe_ms is not None for r in runs):
        variants.append("speed probe")
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for pair in itertools.combinations(range(len(runs)), 2):
        held = [np.full(r.n, index in pair) for index, r in enumerate(runs)]
        train = [~h for h in held]
        names = " + ".join(f"{runs[i].label} (load {runs[i].machine_load:g})" for i in pair)
        for variant in variants:
            use = with_speeds(runs, train)[0] if variant == "speed probe" else runs
            fit = fit_runs(use, engines, train, held=held,
                           machine_load=variant == "machine load")
            frame = predictions(use, engines, fit.vector(), held, fit.per_load)
            summary = error_summary(frame.filter(pl.col("held_out")))
            results[variant].append((summary["p50_pct"], summary["p90_pct"]))
            print(f"{names:<45} {variant:<12} "
                  f"p50 {summary['p50_pct']:5.1f} %  p90 {summary['p90_pct']:5.1f} %"
                  + (f"  c {fit.per_load:.3f}" if variant == "machine load" else ""),
                  flush=True)
    for variant, values in results.items():
        p50, p90 = np.array(values).T
        print(f"over {len(values)} pairs, {variant}: p50 median {np.median(p50):.1f} % "
              f"(range {p50.min():.1f} .. {p50.max():.1f}), p90 median {np.median(p90):.1f} % "
              f"(range {p90.min():.1f} .. {p90.max():.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
