"""Which JSON exports a run writes, and where: ``kvlab/`` only for exactly the lab's run.

``kvlab/`` holds the lab's tracked findings. A run writes there only with the lab's workload
(10 x 5011, passes fwd,fwd,rev), the lab's GPU and CPU (21520, 56000) and the lab's measured
file (the bundled synthetic stand-in or the real fixture). Any other run writes to
``data/exports/`` (or ``--exports-dir``) and adds ``params.json`` naming what produced it;
export files a run does not produce are removed from its folder, so nothing stale survives.
Its Parquet logs and report likewise go beside the lab's by default (``data/events/run/``,
``reports/run.html``), so a run on other numbers never silently replaces the lab's
``data/events/`` and ``reports/index.html`` (``output_places``).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from kvlab.scenario import run as run_scenario
from pipeline import sweeps
from pipeline.base.config import (BUNDLED_MEASURED, EVENTS_DIR, EXPORTS_DIR, KVLAB_DIR, LAB_CPU,
                                  LAB_DOCS, LAB_GPU, LAB_PASSES, LAB_TOKENS, REAL_MEASURED,
                                  REPORT_PATH, RUN_EVENTS_DIR, RUN_REPORT_PATH)
from pipeline.base.errors import CLIError
from pipeline.ttft.measured_setup import LAB_SETUP, MeasuredSetup
from pipeline.workloads.documents import DocumentWorkload

__all__ = ["EXPORT_NAMES", "is_lab_file", "lab_differences", "exports_folder", "output_places",
           "replaced_lab_outputs", "scenario_exports", "params_document"]

#: Every file a run may write into its exports folder (the six exports, the measured file's
#: copy and provenance, and params.json outside kvlab/).
EXPORT_NAMES = ("cyclic.json", "baseline.json", "cliff.json", "offload.json", "cpu_cliff.json",
                "measured.json", "ttft.jsonl", "measured_source.json", "params.json")


def is_lab_file(source: str | None) -> bool:
    """Whether ``source`` is the lab's measured file itself: the bundled file or the real
    fixture, by path (a byte copy elsewhere is synthetic, but its path would change
    kvlab/measured_source.json)."""
    return source is None or os.path.realpath(source) in {
        os.path.realpath(BUNDLED_MEASURED), os.path.realpath(REAL_MEASURED)}


def lab_differences(workload: DocumentWorkload, gpu: int, cpu: int,
                    setup: MeasuredSetup, source: str | None = None) -> list[str]:
    """How this run differs from the lab's (empty: it is the lab's run)."""
    checks = [("--docs", workload.docs, LAB_DOCS), ("--tokens", workload.tokens, LAB_TOKENS),
              ("--passes", ",".join(workload.passes), ",".join(LAB_PASSES)),
              ("--cpu-sweep-gpu", gpu, LAB_GPU), ("--offload-cpu", cpu, LAB_CPU)]
    found = [f"{name} {value} (lab: {lab})" for name, value, lab in checks if value != lab]
    if setup != LAB_SETUP or not is_lab_file(source):
        found.append(f"--measured {source} (not the lab's measured file)")
    return found


def exports_folder(explicit: Path | None, differences: list[str]) -> Path:
    """Where the exports go; CLIError if a non-lab run is pointed at kvlab/."""
    if explicit is None:
        return KVLAB_DIR if not differences else EXPORTS_DIR
    if differences and os.path.realpath(explicit) == os.path.realpath(KVLAB_DIR):
        raise CLIError(f"--exports-dir {explicit}: kvlab/ holds only the lab's findings and "
                       f"this run differs: {differences[0]}; leave --exports-dir unset "
                       f"(data/exports/)")
    return Path(explicit)


def output_places(events: Path | None, report: Path | None, differences: list[str]
                  ) -> tuple[Path, Path]:
    """(events folder, report path): the options where given, else the lab's
    (``data/events/``, ``reports/index.html``) for the lab's run and ``data/events/run/``,
    ``reports/run.html`` beside them for any other."""
    lab = not differences
    return (Path(events) if events is not None else EVENTS_DIR if lab else RUN_EVENTS_DIR,
            Path(report) if report is not None else REPORT_PATH if lab else RUN_REPORT_PATH)


def replaced_lab_outputs(events: Path, report: Path, differences: list[str]) -> list[str]:
    """The lab's own outputs that a run on other numbers was pointed at explicitly."""
    if not differences:
        return []
    same = [(events, EVENTS_DIR, "--events-dir"), (report, REPORT_PATH, "--report")]
    return [f"{option} {path}" for path, lab, option in same
            if os.path.realpath(path) == os.path.realpath(lab)]


def scenario_exports(workload: DocumentWorkload, aggregates: pl.DataFrame, gpu: int, cpu: int,
                     gpu_points: tuple[int, ...], cpu_points: tuple[int, ...]
                     ) -> dict[str, object]:
    """The simulator exports of this run. cyclic.json reads fwd,fwd (its definition);
    baseline.json and offload.json read the run's passes; the two cliffs (second pass of
    fwd,fwd, at this workload's marked points) come from the sweep aggregates and are left
    out when the passes do not start with fwd,fwd."""
    common = {"gpu": gpu, "docs": workload.docs, "tokens": workload.tokens}
    exports: dict[str, object] = {
        "cyclic.json": run_scenario(passes=["fwd", "fwd"], **common),
        "baseline.json": run_scenario(passes=list(workload.passes), **common),
        "offload.json": run_scenario(passes=list(workload.passes), cpu=cpu, **common),
    }
    if workload.passes[:2] == ("fwd", "fwd"):
        exports["cliff.json"] = sweeps.cliff_export(aggregates, gpu_points)
        exports["cpu_cliff.json"] = sweeps.cpu_cliff_export(aggregates, cpu_points)
    return exports


def params_document(workload: DocumentWorkload, gpu: int, cpu: int, setup: MeasuredSetup,
                    provenance: dict, prediction: str | None, differences: list[str],
                    files: list[str]) -> dict[str, object]:
    """params.json: what produced the exports of a run that is not the lab's."""
    return {
        "produced_by": "python -m pipeline run",
        "differs_from_lab": differences,
        "docs": workload.docs, "tokens": workload.tokens, "passes": list(workload.passes),
        "cpu_sweep_gpu": gpu, "offload_cpu": cpu,
        "measured": {"source": provenance["source"], "sha256": provenance["sha256"],
                     "synthetic": provenance["synthetic"], "setup": setup.as_dict()},
        "ttft_predictions": prediction or "made from the measured tier latencies",
        "files": sorted(files),
    }
