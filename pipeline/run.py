"""Run everything: the kvlab exports, the capacity sweeps (events and aggregates as Parquet),
the measured-TTFT summary with tier attribution, and the HTML report.

workload -> cache model -> events (Parquet) -> aggregates (polars) -> JSON exports and report;
inputs are validated before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from kvlab import make_exports
from kvlab.scenario import run as run_scenario
from kvlab.summarize import InputError, write_json_atomic
from pipeline import latency, report, sweeps
from pipeline.arguments import int_list, non_negative_int, pass_list, positive_int
from pipeline.attribution import attribute_tiers
from pipeline.config import (CPU_CLIFF_CAPACITIES, CPU_CLIFF_GPU, EVENTS_DIR, EXPORTS_DIR,
                             GPU_CLIFF_CAPACITIES, KVLAB_DIR, LAB_CPU, LAB_DOCS, LAB_PASSES,
                             LAB_TOKENS, REAL_MEASURED, REPORT_PATH)
from pipeline.errors import CLIError
from pipeline.simulate import METHODS
from pipeline.summary import summary
from pipeline.verdicts import separation_notes
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.measured_file import load_measured


HELP = "exports, sweeps, aggregates, measured summary, report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``run``."""
    workload = parser.add_argument_group("workload")
    workload.add_argument("--docs", type=non_negative_int, default=LAB_DOCS,
                          help="documents reused as prefixes (default %(default)s)")
    workload.add_argument("--tokens", type=non_negative_int, default=LAB_TOKENS,
                          help="KV tokens per document (default %(default)s)")
    workload.add_argument("--passes", type=pass_list, default=list(LAB_PASSES),
                          help="reading orders, comma-separated fwd/rev, at least two: the cliffs "
                               "are second-pass results (default fwd,fwd,rev; cliff.json and "
                               "cpu_cliff.json are written only when it starts with fwd,fwd)")
    grids = parser.add_argument_group("capacity grids (tokens)")
    grids.add_argument("--gpu-capacities", type=int_list,
                       help="GPU capacities of the GPU cliff (default: 0..1.25x the working set, "
                            "every k*tokens-1/k*tokens edge and the lab's points "
                            f"{','.join(map(str, GPU_CLIFF_CAPACITIES))})")
    grids.add_argument("--cpu-capacities", type=int_list,
                       help="CPU capacities of the CPU cliff (default: same range, with the "
                            f"lab's points {','.join(map(str, CPU_CLIFF_CAPACITIES))})")
    grids.add_argument("--cpu-sweep-gpu", type=non_negative_int, default=CPU_CLIFF_GPU,
                       help="fixed GPU capacity of the CPU cliff (default %(default)s)")
    grids.add_argument("--offload-cpu", type=non_negative_int, default=LAB_CPU,
                       help="CPU capacity of the offload setup and of lmcache's tier "
                            "attribution (default %(default)s)")
    grids.add_argument("--points", type=positive_int, default=64,
                       help="evenly spaced points in each default cliff grid (default %(default)s)")
    grids.add_argument("--grid-steps", type=positive_int, default=13,
                       help="points per axis of the GPU x CPU heatmap grid (default %(default)s)")
    grids.add_argument("--grid-gpu", type=int_list, help="GPU axis of the heatmap grid")
    grids.add_argument("--grid-cpu", type=int_list, help="CPU axis of the heatmap grid")
    grids.add_argument("--method", choices=METHODS, default="onepass",
                       help="onepass: every capacity from LRU stack distances (default); "
                            "direct: replay kvlab's TwoTierCache per capacity pair (reference)")
    paths = parser.add_argument_group("inputs and outputs")
    paths.add_argument("--measured", type=Path,
                       help=f"measured TTFT jsonl (default: {REAL_MEASURED} if present, "
                            "else the bundled synthetic data/ttft.jsonl)")
    paths.add_argument("--events-dir", type=Path, default=EVENTS_DIR,
                       help="folder for the Parquet event logs and aggregates "
                            "(default data/events)")
    paths.add_argument("--exports-dir", type=Path,
                       help="folder for the six JSON exports (default kvlab/ for the lab's "
                            "workload, data/exports/ for any other)")
    paths.add_argument("--report", type=Path, default=REPORT_PATH,
                       help="HTML report to write (default reports/index.html)")
    paths.add_argument("--quiet", action="store_true", help="no progress lines")


def _writable_dir(path: Path, what: str) -> Path:
    """Create ``path`` if needed and prove we can write there, or raise CLIError."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise CLIError(f"{what} {path}: cannot write there ({exc.strerror or exc})") from None
    return path


def _with_spec(values: list[int] | None, default: tuple[int, ...], spec: tuple[int, ...]
               ) -> tuple[int, ...]:
    return tuple(sorted(set(values) | set(spec))) if values else default


def plan_sweeps(args: argparse.Namespace, workload: DocumentWorkload) -> list[sweeps.Sweep]:
    """The three sweeps from the options; the lab's spec points are always included, and
    the CPU cliff also holds the offload setup's CPU capacity (the report's tier breakdown)."""
    gpu_spec = GPU_CLIFF_CAPACITIES
    cpu_spec = tuple(sorted({*CPU_CLIFF_CAPACITIES, args.offload_cpu}))
    gpu_cliff, cpu_cliff, grid = sweeps.default_sweeps(
        workload, gpu_spec, cpu_spec, args.cpu_sweep_gpu, args.points, args.grid_steps)
    return [
        sweeps.Sweep("gpu_cliff", _with_spec(args.gpu_capacities, gpu_cliff.gpu_capacities,
                                             gpu_spec), (0,)),
        sweeps.Sweep("cpu_cliff", (args.cpu_sweep_gpu,),
                     _with_spec(args.cpu_capacities, cpu_cliff.cpu_capacities, cpu_spec)),
        sweeps.Sweep("grid", tuple(args.grid_gpu or grid.gpu_capacities),
                     tuple(args.grid_cpu or grid.cpu_capacities)),
    ]


def scenario_exports(workload: DocumentWorkload, aggregates: pl.DataFrame, gpu: int,
                     cpu: int) -> dict[str, object]:
    """The simulator exports. The two cliffs (second pass of fwd,fwd) come from the sweep
    aggregates, so they are left out when the workload's passes do not start with fwd,fwd."""
    common = {"gpu": gpu, "docs": workload.docs, "tokens": workload.tokens}
    exports: dict[str, object] = {
        "cyclic.json": run_scenario(passes=["fwd", "fwd"], **common),
        "baseline.json": run_scenario(passes=["fwd", "fwd", "rev"], **common),
        "offload.json": run_scenario(passes=["fwd", "fwd", "rev"], cpu=cpu, **common),
    }
    if workload.passes[:2] == ("fwd", "fwd"):
        exports["cliff.json"] = sweeps.cliff_export(aggregates,
                                                    GPU_CLIFF_CAPACITIES)
        exports["cpu_cliff.json"] = sweeps.cpu_cliff_export(aggregates,
                                                            CPU_CLIFF_CAPACITIES)
    return exports


def run_all(args: argparse.Namespace) -> dict[str, Path]:
    """Run everything; return the paths written. Raises CLIError on bad input."""
    say = (lambda message: None) if args.quiet else (
        lambda message: print(f"[kvlab] {message}", file=sys.stderr, flush=True))
    try:
        workload = DocumentWorkload(args.docs, args.tokens, tuple(args.passes))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if len(workload.passes) < 2:
        raise CLIError("--passes needs at least two passes: the cliffs are second-pass results")
    if workload.passes[:2] != ("fwd", "fwd"):
        say("passes do not start with fwd,fwd: cliff.json and cpu_cliff.json (defined on "
            "fwd,fwd) are not written")
    is_lab = (workload.docs, workload.tokens) == (LAB_DOCS, LAB_TOKENS)
    exports_dir = args.exports_dir or (KVLAB_DIR if is_lab else EXPORTS_DIR)
    source, synthetic = make_exports.measured_source(
        str(args.measured) if args.measured else None)
    try:
        requests = load_measured(source)
    except InputError as exc:
        raise CLIError(str(exc)) from None
    events_dir = _writable_dir(Path(args.events_dir), "--events-dir")
    exports_dir = _writable_dir(Path(exports_dir), "--exports-dir")
    _writable_dir(Path(args.report).parent, "--report folder")
    say(f"measured input: {source} ({'SYNTHETIC bundled stand-in' if synthetic else 'real'}, "
        f"{requests.height} requests)")

    plan = plan_sweeps(args, workload)
    say(f"sweeping {sum(s.pairs for s in plan)} capacity pairs x {workload.accesses().height} "
        f"accesses ({args.method} method)")
    aggregates = sweeps.run_sweeps(workload, plan, events_dir, args.method, progress=say)

    for name, document in scenario_exports(workload, aggregates, args.cpu_sweep_gpu,
                                           args.offload_cpu).items():
        write_json_atomic(str(exports_dir / name), document)
    try:
        provenance = make_exports.export_measured(source, str(exports_dir))
    except InputError as exc:
        raise CLIError(str(exc)) from None
    exported_summary = json.loads((exports_dir / "measured.json").read_text(encoding="utf-8"))
    if summary(requests) != exported_summary:
        raise CLIError("internal check failed: the polars summary differs from the "
                       "measured.json that kvlab/summarize.py wrote")

    attributed = attribute_tiers(requests, gpu_capacity=args.cpu_sweep_gpu,
                                          cpu_capacity=args.offload_cpu,
                                          tokens=workload.tokens)
    sweeps.write_parquet_atomic(attributed, events_dir / "measured_requests.parquet")
    for note in separation_notes(attributed):
        say(note)
    latencies = latency.latency_model(attributed)
    predicted = latency.predict(aggregates, latencies)
    sweeps.write_parquet_atomic(predicted, events_dir / "predicted_ttft.parquet")
    for row in latency.model_check(attributed, latencies).iter_rows(named=True):
        say(f"latency model, {row['config']} {row['pass']}: predicted mean "
            f"{row['predicted_ms']} ms vs measured {row['measured_ms']} ms "
            f"({row['error_pct']:+}%)" if row["predicted_ms"] is not None else
            f"latency model, {row['config']} {row['pass']}: a tier has no measured latency")

    scenario = {"docs": workload.docs, "tokens": workload.tokens,
                "passes": list(workload.passes),
                "gpu_spec_points": list(GPU_CLIFF_CAPACITIES),
                "cpu_spec_points": list(CPU_CLIFF_CAPACITIES),
                "cpu_sweep_gpu": args.cpu_sweep_gpu, "offload_cpu": args.offload_cpu}
    html = report.write_report(Path(args.report), aggregates=aggregates, requests=attributed,
                               provenance=provenance, scenario=scenario, predicted=predicted,
                               latencies=latencies)
    written = {"events": events_dir, "exports": exports_dir, "report": Path(html)}
    print(f"Parquet event logs and aggregates: {events_dir}")
    print(f"JSON exports:                      {exports_dir}")
    print(f"HTML report:                       {html}")
    return written


def main(args: argparse.Namespace) -> int:
    """``python -m pipeline run``; raises CLIError on bad input."""
    started = time.perf_counter()
    run_all(args)
    if not args.quiet:
        print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
