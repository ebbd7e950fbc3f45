"""``python -m pipeline bench``: figures, not tests.

1. The default ``run`` end to end in a fresh process (wall time, peak memory, event count,
   bytes per access of the Parquet event logs), written to a temporary folder; then the same
   for ``run --docs 3000`` (``--docs``), and the zstd levels on its event logs.
2. The one-pass LRU curves against kvlab's LRUCache and libCacheSim (pipeline.bench.curve).
3. With ``--with NAME[,NAME]`` (or ``all``): ``blocks``, ``engines``, ``trace``,
   ``policies``, the modules of this package, each with its option group prefixed by its
   name.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pipeline.base.arguments import positive_int
from pipeline.bench import curve
from pipeline.bench import policies as policies_bench
from pipeline.bench import trace as trace_bench
from pipeline.bench import blocks as blocks_bench
from pipeline.base.config import ROOT
from pipeline.base.staging import ZSTD_LEVEL, parquet_bytes
from pipeline.sweeps import SWEEPS


def _timed(command: list[str]) -> tuple[float, int, float]:
    """(wall s, peak RSS bytes, CPU s) of one child process, from its own rusage."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, command)
    return (time.perf_counter() - started, usage.ru_maxrss * 1024,
            usage.ru_utime + usage.ru_stime)


def bench_default_run(repeat: int = 3, extra: tuple[str, ...] = ()) -> dict[str, float]:
    """Time ``python -m pipeline run [extra]`` (outputs in a temp folder); best of ``repeat``,
    with the peak resident memory of the largest run."""
    times, peaks, cpu = [], [], []
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as tmp:
        out = Path(tmp)
        command = [sys.executable, "-m", "pipeline", "run", "--quiet", *extra,
                   "--events-dir", str(out / "events"), "--exports-dir", str(out / "exports"),
                   "--report", str(out / "report" / "index.html")]
        for _ in range(repeat):
            wall, peak, used = _timed(command)
            times.append(wall)
            peaks.append(peak)
            cpu.append(used)
        logs = [out / "events" / f"{name}.parquet" for name in SWEEPS]
        events = sum(pl.scan_parquet(path).select(pl.len()).collect().item() for path in logs)
        size = sum(os.path.getsize(path) for path in logs)
        frame = pl.concat([pl.read_parquet(path) for path in logs])
    return {"times": times, "best_s": min(times), "events": events, "bytes": size,
            "bytes_per_access": size / max(events, 1), "peak_bytes": max(peaks),
            "cpu_s": min(cpu), "frame": frame}


def zstd_levels(frame: pl.DataFrame, levels: tuple[int, ...] = (1, 3, 6, 9, 15)
                ) -> list[tuple[int, float, int]]:
    """(level, best of 3 seconds, bytes) writing ``frame`` with pipeline.base.staging's writer."""
    rows = []
    for level in levels:
        best, size = math.inf, 0
        for _ in range(3):
            started = time.perf_counter()
            size = len(parquet_bytes(frame, level))
            best = min(best, time.perf_counter() - started)
        rows.append((level, best, size))
    return rows


def _print_run(title: str, figures: dict) -> None:
    runs = ", ".join(f"{seconds:.2f}" for seconds in figures["times"])
    print(f"== {title} ==")
    print(f"wall time: best {figures['best_s']:.2f} s of runs {runs} s (the first may include "
          f"numba compile; CPU time {figures['cpu_s']:.2f} s)  (target < 10 s)")
    print(f"peak memory: {figures['peak_bytes'] / 2**20:.0f} MiB resident  (target < 1 GB)")
    print(f"event logs: {figures['events']:,} events, {figures['bytes']:,} bytes on disk = "
          f"{figures['bytes_per_access']:.2f} bytes per access  (target <= 8)")
    sys.stdout.flush()


#: name -> what it measures; each runs only when named in ``--with``.
OPTIONAL = {
    "blocks": "block one-pass vs the LRU class replayed on a 2M-block shared-prefix trace",
    "engines": "vllm's one pass vs its compiled pool per capacity, lmcache's compiled "
               "backend, on a Mooncake trace (--trace)",
    "trace": "10M-block Zipf trace's GPU curve, and a Mooncake trace end to end (--trace)",
    "policies": "every policy vs libCacheSim: one capacity and a 50-capacity curve",
}


def benchmark_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated names of ``OPTIONAL`` or ``all``."""
    names = tuple(OPTIONAL) if text == "all" else tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in OPTIONAL]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown benchmark {', '.join(unknown) or repr(text)}; known: "
            f"{', '.join(OPTIONAL)}, all")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``bench``: its own, then one group per benchmark."""
    parser.add_argument("--repeat", type=positive_int, default=3,
                        help="runs of the default pipeline (default %(default)s)")
    parser.add_argument("--docs", type=positive_int, default=3000,
                        help="documents of the large run (default %(default)s)")
    parser.add_argument("--skip-run", action="store_true",
                        help="do not time the pipeline runs (e.g. with --with only)")
    parser.add_argument("--skip-curve", action="store_true",
                        help="only time the default run, not the one-pass curve benchmark")
    parser.add_argument("--with", dest="benchmarks", type=benchmark_list, default=(),
                        metavar="NAME[,NAME]",
                        help="also run these benchmarks (all = every one): " +
                             "; ".join(f"{name}: {what}" for name, what in OPTIONAL.items()))
    curve.add_arguments(parser.add_argument_group("one-pass curve benchmark"))
    blocks_bench.add_arguments(parser.add_argument_group(
        "--with blocks (python -m pipeline.bench.blocks)"))
    engines = parser.add_argument_group("--with engines (python -m pipeline.bench.engine_caches; "
                                        "its trace is --trace, below)")
    engines.add_argument("--engines-capacities", type=positive_int, default=50,
                         help="capacities of each engine's curve (default %(default)s)")
    trace_bench.add_arguments(parser.add_argument_group(
        "--with trace (python -m pipeline.bench.trace; --trace also serves --with engines)"))
    policies_bench.add_arguments(parser.add_argument_group(
        "--with policies (python -m pipeline.bench.policies)"))


def _optional(name: str, args: argparse.Namespace) -> int:
    """Run one optional benchmark; its exit code."""
    print(f"\n== --with {name}: {OPTIONAL[name]} ==", flush=True)
    if name == "blocks":
        return blocks_bench.main(args)
    if name == "engines":
        from pipeline.bench import engine_caches as engines_bench
        trace = trace_bench.trace_path(args.trace)
        if trace is None:
            line = trace_bench.skipped("the engines benchmark")
            print(line)
            print(f"bench: {line}", file=sys.stderr)
            return 0
        print("\n".join(engines_bench.bench(trace, args.engines_capacities)))
        return 0
    if name == "trace":
        return trace_bench.main(args)
    return policies_bench.main(args)


def main(args: argparse.Namespace) -> int:
    """Print the figures; 1 if a benchmark's hit counts disagree."""
    if {"engines", "trace"} & set(args.benchmarks):
        trace_bench.trace_path(args.trace)          # a bad --trace stops before any figure
    code = 0 if args.skip_run else _runs(args)
    if code == 0 and not args.skip_curve:
        print()
        code = curve.main(args)
    for name in args.benchmarks:
        code = max(code, _optional(name, args))
    return code


def _runs(args: argparse.Namespace) -> int:
    """The default run and the --docs run, timed in fresh processes."""
    _print_run("default pipeline run (python -m pipeline run, fresh process)",
               bench_default_run(args.repeat))
    large = bench_default_run(args.repeat, ("--docs", str(args.docs)))
    _print_run(f"python -m pipeline run --docs {args.docs} (fresh process)", large)
    print(f"zstd level of the --docs {args.docs} event logs (pipeline.base.staging.ZSTD_LEVEL = "
          f"{ZSTD_LEVEL}):")
    for level, seconds, size in zstd_levels(large["frame"]):
        print(f"  level {level:2d}: {seconds:.2f} s, {size:,} bytes")
    sys.stdout.flush()
    return 0
