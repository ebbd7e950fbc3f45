"""Run everything: the kvlab exports, the capacity sweeps (events and aggregates as Parquet),
the measured-TTFT summary with tier attribution, and the HTML report.

workload -> cache model -> events (Parquet) -> aggregates (polars) -> JSON exports and report;
inputs are validated before anything is written.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from pipeline.ttft import latency
from pipeline import sweeps
from pipeline.commands import run_blocks as block_mode
from pipeline.base.arguments import add_document_arguments, int_list, non_negative_int, plural, \
    positive_int
from pipeline.ttft.attribution import attribute_tiers
from pipeline.blocks.sweep import AGGREGATES_FILE as BLOCK_AGGREGATES
from pipeline.blocks.sweep import EVENTS_FILE as BLOCK_EVENTS
from pipeline.base.config import (CPU_CLIFF_CAPACITIES, CPU_CLIFF_GPU, GPU_CLIFF_CAPACITIES,
                                  LAB_CPU, REAL_MEASURED)
from pipeline.base.errors import CLIError
from pipeline.sizes.limits import MAX_EVENTS, MAX_PAIRS, MAX_VALUE, check_count
from pipeline.ttft.inputs import add_setup_arguments, read_measured, setup_flags
from pipeline.ttft.measured_setup import MeasuredSetup, prediction_problem
from pipeline.commands.run_exports import (EXPORT_NAMES, exports_folder, lab_differences,
                                  output_places, params_document, replaced_lab_outputs,
                                  scenario_exports)
from pipeline.base.staging import Outputs, check_target, json_bytes, parquet_bytes
from pipeline.onepass.events import METHODS
from pipeline.ttft.summary import summary
from pipeline.ttft.verdicts import separation_notes
from pipeline.workloads.documents import DocumentWorkload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``run``."""
    workload = parser.add_argument_group("workload")
    add_document_arguments(workload, passes_note=", at least two: the cliffs are second-pass "
                           "results (cliff.json and cpu_cliff.json only after fwd,fwd)")
    grids = parser.add_argument_group("capacity grids (tokens)")
    grids.add_argument("--gpu-capacities", type=int_list,
                       help="GPU capacities of the GPU cliff (default: --points even steps over "
                            "0..1.25x the working set, the k*tokens-1/k*tokens edges when there "
                            "are at most --points of them, and the marked points: the lab's "
                            f"{','.join(map(str, GPU_CLIFF_CAPACITIES))} scaled to the working "
                            "set, which are exactly those for the lab's workload)")
    grids.add_argument("--cpu-capacities", type=int_list,
                       help="CPU capacities of the CPU cliff (default: same range, with the "
                            f"lab's points {','.join(map(str, CPU_CLIFF_CAPACITIES))} scaled "
                            "the same way)")
    grids.add_argument("--cpu-sweep-gpu", type=non_negative_int, default=CPU_CLIFF_GPU,
                       help="fixed GPU capacity of the CPU cliff; also the GPU of cyclic.json, "
                            "baseline.json and offload.json and of the report's tier breakdown "
                            "(default %(default)s; the measured file's attribution uses its "
                            "own setup, see --measured-gpu)")
    grids.add_argument("--offload-cpu", type=non_negative_int, default=LAB_CPU,
                       help="CPU capacity of offload.json and of the report's tier breakdown; "
                            "0 = no CPU tier (default %(default)s)")
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
    add_setup_arguments(parser)
    paths.add_argument("--events-dir", type=Path,
                       help="folder for the Parquet event logs and aggregates (default "
                            "data/events for exactly the lab's run, data/events/run for any "
                            "other, so the lab's are not replaced)")
    paths.add_argument("--exports-dir", type=Path,
                       help="folder for the JSON exports (default kvlab/ only for exactly the "
                            "lab's run: workload, --cpu-sweep-gpu, --offload-cpu and measured "
                            "file; data/exports/ with params.json for any other)")
    paths.add_argument("--report", type=Path,
                       help="HTML report to write (default reports/index.html for exactly the "
                            "lab's run, reports/run.html for any other)")
    paths.add_argument("--quiet", action="store_true", help="no progress lines")
    block_mode.add_arguments(parser)


def _with_spec(values: list[int] | None, default: tuple[int, ...], spec: tuple[int, ...]
               ) -> tuple[int, ...]:
    return tuple(sorted(set(values) | set(spec))) if values else default


def marked(workload: DocumentWorkload) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(GPU cliff points, CPU cliff points) marked in the charts and exported: the lab's
    points for the lab's workload, else derived from this one (``sweeps.marked_points``)."""
    return (sweeps.marked_points(workload, GPU_CLIFF_CAPACITIES),
            sweeps.marked_points(workload, CPU_CLIFF_CAPACITIES))


def plan_sweeps(args: argparse.Namespace, workload: DocumentWorkload) -> list[sweeps.Sweep]:
    """The three sweeps from the options; the marked points are always included, and the CPU
    cliff also holds the offload setup's CPU capacity (the report's tier breakdown)."""
    gpu_points, cpu_points = marked(workload)
    gpu_spec = gpu_points
    cpu_spec = tuple(sorted({*cpu_points, args.offload_cpu}))
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


def _workload(args: argparse.Namespace) -> DocumentWorkload:
    """The swept workload; CLIError on bad options or sizes beyond what int64 holds."""
    try:
        workload = DocumentWorkload(args.docs, args.tokens, tuple(args.passes))
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if len(workload.passes) < 2:
        raise CLIError("--passes needs at least two passes: the cliffs are second-pass results")
    if workload.working_set > MAX_VALUE // 2:
        raise CLIError(f"--docs x --tokens = {workload.working_set} tokens: the working set "
                       f"must stay below 2**61 (the sweeps reach 1.25 x it in int64)")
    for option in ("gpu_capacities", "cpu_capacities", "grid_gpu", "grid_cpu"):
        for value in getattr(args, option) or ():
            if value > MAX_VALUE:
                raise CLIError(f"--{option.replace('_', '-')}: capacity {value} is beyond 2**62 "
                               "(capacities are int64 tokens)")
    for option in ("cpu_sweep_gpu", "offload_cpu"):
        if getattr(args, option) > MAX_VALUE:
            raise CLIError(f"--{option.replace('_', '-')} {getattr(args, option)}: beyond 2**62 "
                           "(capacities are int64 tokens)")
    _check_work(args, workload)
    return workload


def _check_work(args: argparse.Namespace, workload: DocumentWorkload) -> None:
    """CLIError naming the arguments when the sweeps would hold more than ``MAX_PAIRS``
    capacity pairs or ``MAX_EVENTS`` events (one per access and pair); nothing is built."""
    gpu_points, cpu_points = marked(workload)
    cliff = sweeps.cliff_size(workload, args.points)
    sizes, names = [], []
    for option, spec in (("gpu_capacities", set(gpu_points)),
                         ("cpu_capacities", {*cpu_points, args.offload_cpu})):
        given = getattr(args, option)
        sizes.append(len(set(given) | spec) if given else cliff + len(spec))
        names.append(f"--{option.replace('_', '-')}" if given else f"--points {args.points}")
    axis = sweeps.grid_size(workload, args.grid_steps)
    grid = (len(args.grid_gpu) if args.grid_gpu else axis) * \
        (len(args.grid_cpu) if args.grid_cpu else axis)
    names += [option for option in ("--grid-gpu", "--grid-cpu")
              if getattr(args, option[2:].replace("-", "_"))]
    if not (args.grid_gpu and args.grid_cpu):
        names.append(f"--grid-steps {args.grid_steps}")
    pairs = sum(sizes) + grid
    what = ", ".join(dict.fromkeys(names))
    check_count(pairs, MAX_PAIRS, what, "capacity pairs", "sweep")
    check_count(pairs * workload.docs * len(workload.passes), MAX_EVENTS,
                f"--docs {workload.docs} x {len(workload.passes)} --passes x up to {pairs} capacity "
                f"pairs ({what})", "events")


def _measured(args: argparse.Namespace, say: Callable[[str], None]
              ) -> tuple[str, pl.DataFrame, dict[str, object], MeasuredSetup]:
    """(source, requests, its three exports, its setup), all validated; nothing written."""
    measured = read_measured(str(args.measured) if args.measured else None, setup_flags(args),
                             say)
    return measured.source, measured.requests, measured.documents, measured.setup


def _model_lines(attributed: pl.DataFrame, latencies: latency.Latencies) -> list[str]:
    """One line per (config, pass): predicted vs measured mean TTFT of the measured file."""
    lines = []
    for row in latency.model_check(attributed, latencies).iter_rows(named=True):
        head = f"latency model, {row['config']} {row['pass']}"
        if row["predicted_ms"] is None:
            lines.append(f"{head}: a tier has no measured latency")
            continue
        error = row["error_pct"]
        shown = f"{error:+}%" if error is not None and math.isfinite(error) else \
            "error n/a: measured mean is 0 ms"
        lines.append(f"{head}: predicted mean {row['predicted_ms']} ms vs measured "
                     f"{row['measured_ms']} ms ({shown})")
    return lines


def run_all(args: argparse.Namespace) -> dict[str, Path]:
    """Run everything; return the folders written. Raises CLIError on bad input.

    Every input and output target is checked, and every output built in memory, before
    anything is written; then all files are renamed into place together (pipeline.base.staging).
    """
    say = (lambda message: None) if args.quiet else (
        lambda message: print(f"[kvlab] {message}", file=sys.stderr, flush=True))
    workload = _workload(args)
    blocks = block_mode.block_setup(args, workload)
    source, requests, measured_documents, setup = _measured(args, say)
    differences = lab_differences(workload, args.cpu_sweep_gpu, args.offload_cpu, setup,
                                  source)
    exports_dir = exports_folder(args.exports_dir, differences)
    provenance = measured_documents["measured_source.json"]
    events_dir, report_path = output_places(args.events_dir, args.report, differences)
    for target, what in ((events_dir / "aggregates.parquet", "--events-dir"),
                         (exports_dir / "measured.json", "--exports-dir"),
                         (report_path, "--report")):
        check_target(target, what)
    kind = "SYNTHETIC bundled stand-in" if provenance["synthetic"] else "real"
    say(f"measured input: {source} ({kind}, {plural(requests.height, 'request')}); measured "
        f"under {setup.describe()}")
    if workload.passes[:2] != ("fwd", "fwd"):
        say("passes do not start with fwd,fwd: cliff.json and cpu_cliff.json (defined on "
            "fwd,fwd) are not written")
    if differences:
        say(f"not the lab's run ({'; '.join(differences)}): exports go to {exports_dir} "
            f"with params.json, events to {events_dir}, the report to {report_path}")
    for given in replaced_lab_outputs(events_dir, report_path, differences):
        print(f"[kvlab] note: {given} replaces the lab's own output with this run's "
              "(not the lab's numbers; without the option it goes beside them)",
              file=sys.stderr)
    if (workload.docs, workload.tokens) != (setup.docs, setup.tokens):
        say(f"the swept workload ({workload.docs} x {workload.tokens}) differs from the "
            f"measured setup ({setup.docs} x {setup.tokens}): measured requests are "
            "attributed under the measured setup")
    problem = prediction_problem(setup, workload.tokens)

    plan = plan_sweeps(args, workload)
    say(f"sweeping {sum(s.pairs for s in plan)} capacity pairs x {workload.accesses().height} "
        f"accesses ({args.method} method)")
    events, aggregates = sweeps.sweep_frames(workload, plan, args.method, progress=say)

    outputs = Outputs()
    for name, frame in events.items():
        outputs.add(events_dir / f"{name}.parquet", parquet_bytes(frame), "--events-dir")
    outputs.add(events_dir / "aggregates.parquet", parquet_bytes(aggregates), "--events-dir")

    gpu_points, cpu_points = marked(workload)
    block_spec = tuple(sorted({*gpu_points, args.cpu_sweep_gpu, args.offload_cpu}))
    exports = {**scenario_exports(workload, aggregates, args.cpu_sweep_gpu, args.offload_cpu,
                                  gpu_points, cpu_points), **measured_documents}
    if summary(requests) != exports["measured.json"]:
        raise CLIError("internal check failed: the polars summary differs from the "
                       "measured.json that kvlab/summarize.py builds")
    if differences:
        exports["params.json"] = params_document(
            workload, args.cpu_sweep_gpu, args.offload_cpu, setup, provenance, problem,
            differences, [*exports, "params.json"])
    for name, document in exports.items():
        outputs.add(exports_dir / name, document if isinstance(document, bytes)
                    else json_bytes(document), "--exports-dir")
    for name in EXPORT_NAMES:
        if name not in exports:
            outputs.remove(exports_dir / name)

    attributed = attribute_tiers(requests, gpu_capacity=setup.gpu, cpu_capacity=setup.cpu,
                                 tokens=setup.tokens)
    outputs.add(events_dir / "measured_requests.parquet", parquet_bytes(attributed),
                "--events-dir")
    for note in separation_notes(attributed):
        say(note)
    latencies = latency.latency_model(attributed)
    for line in _model_lines(attributed, latencies):
        say(line)
    from pipeline import report        # altair: not for --help or a rejected input

    predicted, plan_sections, fit = None, [], None
    if problem is None:
        predicted = latency.predict(aggregates, latencies)
        fitted = block_mode.ttft_fit(attributed, predicted, setup.tokens)
        if isinstance(fitted, str):
            say(fitted)
        else:
            fit, predicted = fitted, fitted.predicted
            plan_sections = report.plan_sections(predicted, fit.residuals)
        outputs.add(events_dir / "predicted_ttft.parquet", parquet_bytes(predicted),
                    "--events-dir")
    else:
        say(problem)
        outputs.remove(events_dir / "predicted_ttft.parquet")

    block_report = None
    if blocks is not None:
        say(f"block mode: {blocks.describe()}")
        block_events, block_aggregates = block_mode.block_frames(blocks, workload, args,
                                                                 block_spec, fit)
        outputs.add(events_dir / BLOCK_EVENTS, parquet_bytes(block_events), "--events-dir")
        outputs.add(events_dir / BLOCK_AGGREGATES, parquet_bytes(block_aggregates),
                    "--events-dir")
        say(f"block mode: {block_events.height} block events, "
            f"{block_aggregates.height} aggregate rows")
        block_report = block_aggregates
    else:
        for name in (BLOCK_EVENTS, BLOCK_AGGREGATES):
            outputs.remove(events_dir / name)

    scenario = {"docs": workload.docs, "tokens": workload.tokens,
                "passes": list(workload.passes),
                "gpu_spec_points": list(gpu_points), "cpu_spec_points": list(cpu_points),
                "cpu_sweep_gpu": args.cpu_sweep_gpu, "offload_cpu": args.offload_cpu}
    shown = {**provenance, "setup": setup.describe(), "prediction_note": problem}
    html = report.render_html(aggregates, attributed, shown, scenario, predicted,
                              latencies if predicted is not None else None,
                              measured_extra=plan_sections,
                              extra_groups=block_mode.report_groups(
                                  args, workload, blocks, block_report, block_spec,
                                  report_path))
    outputs.add(report_path, html.encode("utf-8"), "--report")
    outputs.commit()
    print(f"Parquet event logs and aggregates: {events_dir}")
    print(f"JSON exports:                      {exports_dir}")
    print(f"HTML report:                       {report_path}")
    return {"events": events_dir, "exports": exports_dir, "report": report_path}


def main(args: argparse.Namespace) -> int:
    """``python -m pipeline run``; raises CLIError on bad input."""
    started = time.perf_counter()
    run_all(args)
    if not args.quiet:
        print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0
