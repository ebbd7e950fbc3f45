"""Time and peak memory of ``python -m pipeline trace`` on a large token-id trace.

Not a test: a measurement to run by hand, before and after a change to the readers. Make the
trace first (``scripts/make_token_trace.py``, synthetic), then

    .venv/bin/python scripts/bench_trace_reader.py /tmp/kvlab-big-tokens.jsonl
    .venv/bin/python scripts/bench_trace_reader.py /tmp/kvlab-big-tokens.jsonl --repo /work/main

``--repo`` runs another checkout's ``pipeline`` (e.g. main, for the "before" figure) with
this interpreter. Each run is a fresh process; peak RSS is its ``ru_maxrss``. On a shared
machine the wall time follows the load; the CPU time (all threads) moves less.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(repo: Path, command: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in GB, exit status) of one child process."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.stderr.write(done.stderr[-2000:])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1e6, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="token-id JSONL trace")
    parser.add_argument("--repo", type=Path, default=ROOT,
                        help="checkout whose pipeline runs (default: this one)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--reader-only", action="store_true",
                        help="time pipeline.workloads.tokens.read_tokens alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvlab-bench-") as tmp:
        if args.reader_only:
            command = [sys.executable, "-c",
                       "import sys; from pipeline.workloads.tokens import read_tokens; "
                       f"t = read_tokens(sys.argv[1], {args.block_size}); "
                       "print(t.blocks.height, t.requests.height)", str(args.path)]
        else:
            command = [sys.executable, "-m", "pipeline", "trace", str(args.path),
                       "--format", "tokens", "--block-size", str(args.block_size),
                       "--out", f"{tmp}/out", "--report", f"{tmp}/trace.html"]
        wall, cpu, peak, status = measure(args.repo.resolve(), command)
    what = "read_tokens" if args.reader_only else "trace"
    print(f"{what} ({args.repo}): {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {peak:.2f} GB, "
          f"exit {status} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
