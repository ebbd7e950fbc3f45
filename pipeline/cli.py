"""One CLI over the pipeline: ``python -m pipeline run | bench | measured | synth-ttft``.

``run`` does everything: the kvlab exports, the capacity sweeps (events and aggregates as
Parquet), the measured-TTFT summary with tier attribution, and the HTML report.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB_DEFAULTS = {"docs": 10, "tokens": 5011, "passes": ("fwd", "fwd", "rev")}


class CLIError(Exception):
    """A user error: printed as one line, exit status 1."""


def _int_list(text: str) -> list[int]:
    """argparse type: comma-separated integers >= 0, at least one."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"empty capacity list {text!r}")
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"capacities must be >= 0, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    from kvlab.scenario import non_negative_int

    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    from kvlab.make_exports import (CPU_CLIFF_CAPACITIES, CPU_CLIFF_GPU, GPU_CLIFF_CAPACITIES,
                                    OFFLOAD, REAL_MEASURED)
    from kvlab.scenario import non_negative_int, pass_list

    workload = parser.add_argument_group("workload")
    workload.add_argument("--docs", type=non_negative_int, default=LAB_DEFAULTS["docs"],
                          help="documents reused as prefixes (default %(default)s)")
    workload.add_argument("--tokens", type=non_negative_int, default=LAB_DEFAULTS["tokens"],
                          help="KV tokens per document (default %(default)s)")
    workload.add_argument("--passes", type=pass_list, default=list(LAB_DEFAULTS["passes"]),
                          help="reading orders, comma-separated fwd/rev, at least two: the cliffs "
                               "are second-pass results (default fwd,fwd,rev; cliff.json and "
                               "cpu_cliff.json are written only when it starts with fwd,fwd)")
    grids = parser.add_argument_group("capacity grids (tokens)")
    grids.add_argument("--gpu-capacities", type=_int_list,
                       help="GPU capacities of the GPU cliff (default: 0..1.25x the working set, "
                            "every k*tokens-1/k*tokens edge and the lab's points "
                            f"{','.join(map(str, GPU_CLIFF_CAPACITIES))})")
    grids.add_argument("--cpu-capacities", type=_int_list,
                       help="CPU capacities of the CPU cliff (default: same range, with the "
                            f"lab's points {','.join(map(str, CPU_CLIFF_CAPACITIES))})")
    grids.add_argument("--cpu-sweep-gpu", type=non_negative_int, default=CPU_CLIFF_GPU,
                       help="fixed GPU capacity of the CPU cliff (default %(default)s)")
    grids.add_argument("--offload-cpu", type=non_negative_int, default=OFFLOAD["cpu"],
                       help="CPU capacity of the offload setup and of lmcache's tier "
                            "attribution (default %(default)s)")
    grids.add_argument("--points", type=_positive_int, default=64,
                       help="evenly spaced points in each default cliff grid (default %(default)s)")
    grids.add_argument("--grid-steps", type=_positive_int, default=13,
                       help="points per axis of the GPU x CPU heatmap grid (default %(default)s)")
    grids.add_argument("--grid-gpu", type=_int_list, help="GPU axis of the heatmap grid")
    grids.add_argument("--grid-cpu", type=_int_list, help="CPU axis of the heatmap grid")
    grids.add_argument("--engine", choices=("onepass", "direct"), default="onepass",
                       help="onepass: every capacity from LRU stack distances (default); "
                            "direct: replay kvlab's TwoTierCache per capacity pair (reference)")
    paths = parser.add_argument_group("inputs and outputs")
    paths.add_argument("--measured", type=Path,
                       help=f"measured TTFT jsonl (default: {REAL_MEASURED} if present, "
                            "else the bundled synthetic data/ttft.jsonl)")
    paths.add_argument("--events-dir", type=Path, default=ROOT / "data" / "events",
                       help="folder for the Parquet event logs and aggregates "
                            "(default data/events)")
    paths.add_argument("--exports-dir", type=Path,
                       help="folder for the six JSON exports (default kvlab/ for the lab's "
                            "workload, data/exports/ for any other)")
    paths.add_argument("--report", type=Path, default=ROOT / "reports" / "index.html",
                       help="HTML report to write (default reports/index.html)")
    paths.add_argument("--quiet", action="store_true", help="no progress lines")


def build_parser() -> argparse.ArgumentParser:
    from kvlab.scenario import OneLineParser

    parser = OneLineParser(
        prog="python -m pipeline",
        description="kvlab: how much prefix KV cache survives on the GPU, what a CPU tier "
                    "buys, and what that does to time-to-first-token.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="exports, sweeps, aggregates, measured summary, report",
                              description=__doc__.split("\n\n")[1])
    _add_run_arguments(run)
    commands.add_parser("bench", help="time the default run and the one-pass curves",
                        add_help=False)
    commands.add_parser("measured", help="summarize a measured TTFT file", add_help=False)
    commands.add_parser("synth-ttft", help="regenerate the synthetic data/ttft.jsonl",
                        add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("bench", "measured", "synth-ttft"):
        return _delegate(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    from pipeline.run import run_all
    started = time.perf_counter()
    try:
        run_all(args)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _delegate(command: str, rest: list[str]) -> int:
    if command == "bench":
        from pipeline.bench import main as bench_main
        return bench_main(rest)
    if command == "measured":
        from pipeline.measured import main as measured_main
        return measured_main(rest)
    from pipeline.synthetic_ttft import main as synth_main
    return synth_main(rest)
