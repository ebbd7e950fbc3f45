"""Trace-replay benchmarks: figures, not tests.

1. A generated 10M-block trace with Zipf-like prefix sharing (``zipf_documents``: popular
   documents shared as prefixes, then a unique question per request), 16-token blocks: the
   whole GPU curve at 1000 capacities through the blocks engine, wall time and peak RSS,
   in a fresh process.
2. The shared Mooncake trace end to end (``python -m pipeline trace``: read, replay,
   Parquet, report) in a fresh process, best of ``repeat``, and the event sizes on disk.

``--trace`` names the Mooncake trace of the end-to-end figure (and of ``bench --with
engines``); without it the shared trace is used, and when that is absent the figure is
skipped with a line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline.base.arguments import positive_int
from pipeline.base.config import ROOT

SHARED_TRACE = ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl"


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_cpu_s() -> float:
    """CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def curve_figures(requests: int = 62_500, documents: int = 20_000, document_length: int = 2048,
                  question_length: int = 512, capacities: int = 1000, alpha: float = 1.0,
                  seed: int = 20261130, block_size: int = 16) -> dict:
    """Generate the trace, build the stream, compute the GPU curve; time each step (this
    process). Default: 62,500 requests x 160 blocks = 10M block accesses."""
    from pipeline.workloads.stream import TAIL_FIRST, block_stream
    from pipeline.trace.engine import distinct_cacheable, gpu_curve
    from pipeline.workloads.patterns import zipf_documents

    started, cpu_started = time.perf_counter(), _cpu_s()
    frame = zipf_documents(documents, document_length, requests, alpha, seed,
                           question_length=question_length).blocks(block_size)
    generated, cpu_generated = time.perf_counter(), _cpu_s()
    stream = block_stream(frame, block_size)
    del frame
    streamed = time.perf_counter()
    distinct = distinct_cacheable(stream)
    grid = np.linspace(distinct / capacities, distinct, capacities).round().astype(np.int64)
    hits = gpu_curve(stream, grid * block_size, TAIL_FIRST)
    done = time.perf_counter()
    return {"blocks": stream.blocks, "requests": stream.requests, "distinct_blocks": distinct,
            "capacities": capacities, "generate_s": generated - started,
            "stream_s": streamed - generated, "curve_s": done - streamed,
            "frame_to_curve_s": done - generated, "total_s": done - started,
            "frame_to_curve_cpu_s": _cpu_s() - cpu_generated,
            "total_cpu_s": _cpu_s() - cpu_started, "load_average": os.getloadavg()[0],
            "hit_ratio_at_top": float(hits[-1] / stream.blocks),
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}


def bench_curve_fresh(**kwargs: object) -> dict:
    """``curve_figures`` in a fresh interpreter, so the peak RSS is its own."""
    code = ("import json, sys; from pipeline.bench.trace import curve_figures; "
            f"print(json.dumps(curve_figures(**{kwargs!r})))")
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True, cwd=ROOT)
    return json.loads(result.stdout.strip().splitlines()[-1])


def bench_shared_trace(repeat: int = 3, trace: Path = SHARED_TRACE) -> dict:
    """``python -m pipeline trace`` on the shared trace, fresh process, best of ``repeat``."""
    times, cpu = [], []
    with tempfile.TemporaryDirectory(prefix="kvlab-trace-") as tmp:
        command = [sys.executable, "-m", "pipeline", "trace", str(trace), "--out",
                   f"{tmp}/out", "--report", f"{tmp}/trace.html", "--json"]
        for _ in range(repeat):
            started, children = time.perf_counter(), _children_cpu_s()
            result = subprocess.run(command, check=True, capture_output=True, text=True,
                                    cwd=ROOT)
            times.append(time.perf_counter() - started)
            cpu.append(_children_cpu_s() - children)
        summary = json.loads(result.stdout)
    files = summary["files"]
    return {"times": times, "best_s": min(times), "cpu_s": cpu, "best_cpu_s": min(cpu),
            "events_bytes_per_access": files["events"]["bytes_per_row"],
            "request_bytes_per_point": files["requests"]["bytes_per_row"],
            "points": len(summary["points"]),
            "ratio": summary["infinite_cache_block_hit_ratio"]}


def trace_path(given: Path | None) -> Path | None:
    """The Mooncake trace to benchmark on: ``given`` (checked: CLIError ``--trace PATH:
    reason`` when it is no readable Mooncake trace), else the shared trace when present,
    else None (the figures that need it are skipped)."""
    from pipeline.base.errors import CLIError
    from pipeline.workloads.jsonl import TraceError
    from pipeline.workloads.mooncake import read_mooncake

    if given is None:
        return SHARED_TRACE if SHARED_TRACE.is_file() else None
    if not given.is_file():
        raise CLIError(f"--trace {given}: no such file")
    try:
        read_mooncake(given)
    except (TraceError, OSError) as exc:
        raise CLIError(f"--trace {given}: not a Mooncake trace ({exc})") from None
    return given


def skipped(what: str) -> str:
    """The line saying ``what`` was skipped for want of a trace."""
    return (f"SKIPPED {what}: no trace (the shared trace {SHARED_TRACE} is absent); pass "
            "--trace PATH")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options, prefixed ``--trace`` so ``python -m pipeline bench`` can add them."""
    parser.add_argument("--trace", type=Path, metavar="PATH",
                        help="Mooncake trace of the end-to-end figure and of --with engines "
                             f"(default: the shared trace {SHARED_TRACE.name} beside the "
                             "repository, when present)")
    parser.add_argument("--trace-repeat", type=positive_int, default=3,
                        help="runs of the shared trace end to end (default %(default)s)")
    parser.add_argument("--trace-skip-curve", action="store_true",
                        help="skip the 10M-block curve (about 15 s and 0.7 GiB)")


def main(args: argparse.Namespace) -> int:
    """Print the figures from parsed ``add_arguments`` options."""
    trace = trace_path(args.trace)
    if trace is not None:
        shared = bench_shared_trace(args.trace_repeat, trace)
        print(f"== Mooncake trace {trace.name} end to end (python -m pipeline trace, fresh "
              "process) ==")
        print(f"wall: best {shared['best_s']:.2f} s of {[round(t, 2) for t in shared['times']]}"
              f" (target < 5 s); CPU {shared['best_cpu_s']:.2f} s; infinite-cache ratio "
              f"{shared['ratio']}; load average {os.getloadavg()[0]:.1f}")
        print(f"events: {shared['events_bytes_per_access']:.2f} bytes per block access; "
              f"per request per capacity point: {shared['request_bytes_per_point']:.2f} bytes "
              f"({shared['points']} points) (targets <= 8)")
    else:
        line = skipped("the end-to-end trace figure")
        print(line)
        print(f"bench: {line}", file=sys.stderr)
    if not args.trace_skip_curve:
        curve = bench_curve_fresh()
        print("== 10M-block Zipf prefix-sharing trace, GPU curve at 1000 capacities ==")
        print(f"{curve['blocks']} block accesses, {curve['requests']} requests, "
              f"{curve['distinct_blocks']} distinct blocks; hit ratio at the top "
              f"{curve['hit_ratio_at_top']:.4f}")
        print(f"generate {curve['generate_s']:.2f} s, stream {curve['stream_s']:.2f} s, "
              f"curve {curve['curve_s']:.2f} s: frame to curve {curve['frame_to_curve_s']:.2f} s"
              f" (target < 15 s; {curve['frame_to_curve_cpu_s']:.2f} CPU s), total "
              f"{curve['total_s']:.2f} s ({curve['total_cpu_s']:.2f} CPU s); peak RSS "
              f"{curve['peak_rss_gib']:.2f} GiB (target < 4); load average "
              f"{curve['load_average']:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    from pipeline.bench import standalone

    standalone("pipeline.bench.trace", __doc__, add_arguments, main)
