"""``python -m pipeline bench``: figures, not tests.

1. The default ``run`` end to end in a fresh process (wall time, event count, bytes per
   access of the Parquet event logs), written to a temporary folder.
2. The one-pass LRU curves against kvlab's LRUCache and libCacheSim (pipeline.bench.curve).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pipeline.arguments import positive_int
from pipeline.bench import curve
from pipeline.config import ROOT
from pipeline.sweeps import SWEEPS


def bench_default_run(repeat: int = 3) -> dict[str, float]:
    """Time ``python -m pipeline run`` (defaults, outputs in a temp folder); best of ``repeat``."""
    times = []
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as tmp:
        out = Path(tmp)
        command = [sys.executable, "-m", "pipeline", "run", "--quiet",
                   "--events-dir", str(out / "events"), "--exports-dir", str(out / "exports"),
                   "--report", str(out / "report" / "index.html")]
        for _ in range(repeat):
            started = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                           cwd=ROOT)
            times.append(time.perf_counter() - started)
        logs = [out / "events" / f"{name}.parquet" for name in SWEEPS]
        events = sum(pl.scan_parquet(path).select(pl.len()).collect().item() for path in logs)
        size = sum(os.path.getsize(path) for path in logs)
    return {"times": times, "best_s": min(times), "events": events, "bytes": size,
            "bytes_per_access": size / max(events, 1)}


HELP = "time the default run and the one-pass curves (figures, not tests)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bench``: its own, then those of the curve benchmark."""
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="runs of the default pipeline (default %(default)s)")
    parser.add_argument("--skip-curve", action="store_true",
                        help="only time the default run, not the one-pass curve benchmark")
    curve.add_arguments(parser.add_argument_group("one-pass curve benchmark"))


def main(args: argparse.Namespace) -> int:
    """Print the figures; 1 if a benchmark's hit counts disagree."""
    figures = bench_default_run(args.repeat)
    print("== default pipeline run (python -m pipeline run, fresh process, 2-core budget) ==")
    runs = ", ".join(f"{seconds:.2f}" for seconds in figures["times"])
    print(f"wall time: best {figures['best_s']:.2f} s of runs {runs} s (the first may include "
          f"numba compile)  (target < 10 s)")
    print(f"event logs: {figures['events']:,} events, {figures['bytes']:,} bytes on disk = "
          f"{figures['bytes_per_access']:.2f} bytes per access  (target <= 8)")
    sys.stdout.flush()
    if args.skip_curve:
        return 0
    print()
    return curve.main(args)
