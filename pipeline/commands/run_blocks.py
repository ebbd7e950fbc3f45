"""What ``run`` adds beyond document mode: block mode (``--block-size``, with the engine
models of ``pipeline.catalog.model_options``) and the fitted TTFT model's per-pass predictions.

``add_arguments`` defines the block-mode group; ``block_setup`` is its one check (before
anything is computed); ``block_frames`` runs ``pipeline.blocks.sweep.block_frames`` for the
run's workload and models; ``ttft_fit`` fits ``pipeline.ttft.model`` on the measured requests
and adds predicted p50 and mean TTFT per pass to the predicted sweeps. ``report_inputs``
computes the frames of the report's groups after the measured one and ``render_groups``
draws them; what does not depend on the run (the committed measurements, the lab's curves
and the charts drawn from them) is built once per process (``reused``, ``drawn``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import polars as pl

from pipeline.base.arguments import positive_int
from pipeline.workloads.stream_limits import check_document_blocks
from pipeline.blocks.sweep import block_frames as sweep_block_frames
from pipeline import catalog as registry
from pipeline.base.config import (CPU_CLIFF_GPU, GPU_CLIFF_CAPACITIES, LAB_CPU, LAB_DOCS,
                                  LAB_PASSES, LAB_TOKENS, ROOT)
from pipeline.catalog.model_options import LAB_MODELS, add_model_arguments, option_dests, \
    run_options
from pipeline.base.errors import CLIError
from pipeline.sizes.limits import check_block_size
from pipeline.fit.per_request import (FITTED_FILE, HOLDOUT_FILE, FittedRequests,
                                      fitted_requests)
from pipeline.ttft.model import (FitError, TTFTModel, fit_configs,
                                 predict_pass_ttft, predicted_ttft, residuals_by_pass,
                                 tokens_by_tier)
from pipeline.workloads.documents import DocumentWorkload

__all__ = ["BlockSetup", "add_arguments", "block_setup", "block_frames", "TTFTFit", "ttft_fit",
           "REPORT_BLOCK_SIZE", "REAL_ENGINE_FILE", "ReportInputs", "report_inputs",
           "render_groups", "report_groups", "reused", "file_key", "registry_key", "drawn"]

#: Block size of the report's block-mode group when ``run`` has no ``--block-size``
#: (vLLM's default block): the lab's workload costs about 0.3 s at this size.
REPORT_BLOCK_SIZE = 16
#: The real engine's committed measurement, drawn after the report's measured group.
REAL_ENGINE_FILE = ROOT / "data" / "measured" / "llamacpp_lab.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--block-size`` and the engine models (one definition: ``add_model_arguments``)."""
    group = parser.add_argument_group(
        "block mode (also writes blocks_events.parquet and blocks_aggregates.parquet; "
        "document mode stays the default)")
    group.add_argument("--block-size", type=positive_int, default=None,
                       help="tokens per block: also run the sweeps in block mode (prefix "
                            "caching, both orders per tier; see python -m pipeline blocks)")
    add_model_arguments(group, LAB_MODELS)


@dataclass(frozen=True)
class BlockSetup:
    """Block mode as the options ask for it."""

    block_size: int
    gpu_model: str = "block-lru"
    cpu_model: str = "block-lru"
    gpu_options: dict = field(default_factory=dict)
    cpu_options: dict = field(default_factory=dict)

    def describe(self) -> str:
        """One line: block size and models with their options."""
        def one(model: str, options: dict) -> str:
            shown = ", ".join(f"{k}={v}" for k, v in options.items())
            return f"{model} ({shown})" if shown else model
        return (f"{self.block_size}-token blocks, GPU {one(self.gpu_model, self.gpu_options)}, "
                f"CPU {one(self.cpu_model, self.cpu_options)}")


def block_setup(args: argparse.Namespace, workload: DocumentWorkload) -> BlockSetup | None:
    """The run's block mode, or None without ``--block-size``; CLIError naming the argument
    for an engine model or option without ``--block-size``, a block size beyond the limit, a
    run over ``MAX_BLOCKS`` block accesses, or a model option the model does not take."""
    if args.block_size is None:
        for dest in ("gpu_model", "cpu_model"):
            if getattr(args, dest) != "block-lru":
                raise CLIError(f"--{dest.replace('_', '-')} {getattr(args, dest)}: engine "
                               "models run in block mode only (add --block-size N)")
        for dest in option_dests():
            if getattr(args, dest) is not None:
                raise CLIError(f"--{dest.replace('_', '-')}: an engine model option, block "
                               "mode only (add --block-size N)")
        return None
    check_block_size(args.block_size)
    requests, blocks = check_document_blocks(workload.docs, len(workload.passes),
                                             workload.tokens, args.block_size)
    gpu_options, cpu_options = run_options(args, args.block_size, requests, blocks)
    return BlockSetup(args.block_size, args.gpu_model, args.cpu_model, gpu_options,
                      cpu_options)


def block_frames(setup: BlockSetup, workload: DocumentWorkload, args: argparse.Namespace,
                 spec_points: tuple[int, ...], fit: TTFTFit | None = None
                 ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, aggregates) of the block sweeps for the run's workload, grids and models;
    with the run's fitted TTFT model, predicted p50 and mean TTFT per pass too (each request
    priced by its tokens per tier)."""
    return sweep_block_frames(workload.docs, workload.tokens, workload.passes,
                              setup.block_size, args.gpu_capacities, args.cpu_capacities,
                              args.cpu_sweep_gpu, spec_points, setup.gpu_model,
                              setup.cpu_model, setup.gpu_options, setup.cpu_options,
                              predicted_ttft(fit.models) if fit is not None else None)


@dataclass(frozen=True)
class TTFTFit:
    """The fitted TTFT model of a run: per-config models, residuals per pass, and the
    predicted sweeps with ``predicted_p50_ms`` / ``predicted_mean_ms`` per pass."""

    models: dict[str, TTFTModel]
    residuals: pl.DataFrame
    predicted: pl.DataFrame


def ttft_fit(attributed: pl.DataFrame, predicted: pl.DataFrame, tokens: int
             ) -> TTFTFit | str:
    """Fit ``pipeline.ttft.model`` on the attributed measured requests (whole documents in
    their simulated tier) and predict p50 and mean TTFT per pass at every sweep point of
    ``predicted`` (documents of ``tokens`` tokens). A string says why not, instead."""
    requests = tokens_by_tier(attributed)
    if requests.is_empty():
        return "TTFT model not fitted: no measured request is in a simulated config"
    try:
        models = fit_configs(requests)
        return TTFTFit(models, residuals_by_pass(requests, models),
                       predict_pass_ttft(predicted, models, tokens))
    except FitError as exc:
        return f"TTFT model not fitted: {exc}"


@dataclass(frozen=True)
class ReportInputs:
    """Every frame of the report's groups after the measured one, computed by ``run``
    (``report_inputs``) so that the report only draws: the real engine's measurement (or
    None), the block-mode aggregates of the block-lru model with their scenario and note (or
    None), the run's own engine-model aggregates and their description (or None), the
    engine models' GPU and CPU curves and the policies' lab curves (None off the lab's
    workload), the trace page's name beside the report (or None), and the real engine's
    measured against predicted TTFT per request under the committed fitted step-time file
    and under its fit without the two highest loads (``pipeline.fit.per_request``; None when
    a file or its measurements are missing)."""

    real_engine: pl.DataFrame | None
    block_aggregates: pl.DataFrame | None
    block_scenario: dict
    block_note: str
    engine_curves: tuple[pl.DataFrame, pl.DataFrame] | None
    policy_curves: pl.DataFrame | None
    trace_link: str | None
    engine_aggregates: pl.DataFrame | None = None
    engine_describe: str = ""
    fitted_engine: FittedRequests | None = None
    fitted_holdout: FittedRequests | None = None


def _fitted_engine(path: Path) -> FittedRequests | None:
    """The committed fit's per-request predictions; None when a file is missing or bad."""
    if not Path(path).is_file():
        return None
    try:
        return fitted_requests(path)
    except ValueError:
        return None


def _real_engine(path: Path) -> pl.DataFrame | None:
    """The committed llama.cpp measurement joined with its predictions; None when the file
    or its provenance is missing or unreadable."""
    from pipeline.measure.llamacpp.compare import load_measurement
    if not Path(path).is_file():
        return None
    try:
        return load_measurement(path)
    except (OSError, ValueError, KeyError):
        return None


# --------------------------------------------------------------------------- reuse
# The report's parts after the measured group mostly do not depend on the run: the committed
# measurements' frames, the lab's block-mode, engine-model and policy curves, and the charts
# drawn from them are functions of the code, the registered cache models and committed files
# only. A process that runs ``run`` many times (the tests run it in-process) builds each once;
# one run computes everything as before.

T = TypeVar("T")

#: name -> (key, value) of the last ``reused`` call with that name.
_LAST: dict[str, tuple[object, object]] = {}


def reused(name: str, key: object, build: Callable[[], T]) -> T:
    """``build()``, or its value from the last call named ``name`` when that key equals
    ``key`` (``file_key``, ``registry_key``)."""
    last = _LAST.get(name)
    if last is not None and last[0] == key:
        return last[1]            # type: ignore[return-value]
    value = build()
    _LAST[name] = (key, value)
    return value


def file_key(*paths: str | os.PathLike) -> tuple:
    """The files as (path, size, modification time in ns); (path, None) for a missing one."""
    signature = []
    for path in paths:
        try:
            status = Path(path).stat()
        except OSError:
            signature.append((str(path), None))
        else:
            signature.append((str(path), status.st_size, status.st_mtime_ns))
    return tuple(signature)


def registry_key(*names: str) -> tuple:
    """The registered cache models ``names`` (frozen entries, equal when registered alike;
    None for a name not registered): a policy registered later gives new curves."""
    return tuple((name, registry.MODELS.get(name)) for name in names)


class _Same:
    """A key equal to another that holds the very same objects (frames have no equality
    that answers yes or no)."""

    def __init__(self, objects: tuple) -> None:
        self.objects = objects

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Same) and len(other.objects) == len(self.objects)
                and all(a is b for a, b in zip(self.objects, other.objects)))


def drawn(name: str, draw: Callable[[], T], *inputs: object, **values: object) -> T:
    """``draw()``, or what it drew last time from the very same ``inputs`` objects and equal
    ``values`` (a ``Section`` keeps its spec once built: ``pipeline.charts.Section.spec``)."""
    return reused(name, (_Same(inputs), values), draw)


def _lab_block_aggregates() -> pl.DataFrame:
    """The lab's block-mode aggregates at ``REPORT_BLOCK_SIZE`` (the block-lru model)."""
    return sweep_block_frames(LAB_DOCS, LAB_TOKENS, LAB_PASSES, REPORT_BLOCK_SIZE,
                              cpu_sweep_gpu=CPU_CLIFF_GPU,
                              spec_points=(*GPU_CLIFF_CAPACITIES, CPU_CLIFF_GPU, LAB_CPU))[1]


def _committed(name: str, path: Path, load: Callable[[Path], T]) -> T:
    """``load(path)``, once per process while the file and every committed measurement
    (``data/measured/``: the files it names, their sidecars and provenance) are unchanged."""
    measured = sorted(REAL_ENGINE_FILE.parent.iterdir()) if REAL_ENGINE_FILE.parent.is_dir() \
        else []
    return reused(name, file_key(path, *measured), lambda: load(path))


def report_inputs(args: argparse.Namespace, workload: DocumentWorkload,
                  blocks: BlockSetup | None, block_aggregates: pl.DataFrame | None,
                  spec_points: tuple[int, ...], report_path: Path) -> ReportInputs:
    """The frames of ``report_groups``: block mode's tail-first vs head-first from
    block-lru sweeps (the run's own, computed for the run's workload when it ran engine
    models, or the lab's at 16-token blocks without ``--block-size``, about 0.3 s); with
    engine models, the run's own ``block_aggregates``, drawn next to the block-lru model in their
    orders; block-lru vs vllm, LMCache's chunk cliff and the cache policies, which are the lab's;
    the real engine's measurement and the trace page's name. The lab-only frames exist only
    when the run's workload is the lab's, so a run on another workload shows none of the
    lab's capacities."""
    from pipeline.blocks.engine_curves import cpu_model_curves, gpu_model_curves
    from pipeline.blocks.policy_curves import lab_curves

    lab = (workload.docs, workload.tokens, tuple(workload.passes)) == \
        (LAB_DOCS, LAB_TOKENS, tuple(LAB_PASSES))
    note, size = "", blocks.block_size if blocks else REPORT_BLOCK_SIZE
    engine_aggregates = None
    if blocks is not None and (blocks.gpu_model, blocks.cpu_model) != ("block-lru", "block-lru"):
        engine_aggregates = block_aggregates            # engine models: the block-lru one too
        _, block_aggregates = sweep_block_frames(
            workload.docs, workload.tokens, workload.passes, size, args.gpu_capacities,
            args.cpu_capacities, args.cpu_sweep_gpu, spec_points)
        note = (f"Tail-first vs head-first is drawn with the block-lru model in both orders; this "
                f"run's {blocks.describe()} follow, next to the block-lru model in their orders "
                f"(all in blocks_aggregates.parquet).")
    elif blocks is None and lab:
        block_aggregates = reused("lab block aggregates", registry_key("block-lru"),
                                  _lab_block_aggregates)
        note = (f"The block-lru model at {size}-token blocks; run with --block-size N (and "
                f"--gpu-model vllm / --cpu-model lmcache) for other block sizes and models.")
    scenario = {"docs": workload.docs, "tokens": workload.tokens, "block_size": size,
                "cpu_sweep_gpu": args.cpu_sweep_gpu if blocks else CPU_CLIFF_GPU}
    trace = Path(report_path).parent / "trace.html"
    return ReportInputs(
        _committed("real engine", REAL_ENGINE_FILE, _real_engine), block_aggregates, scenario, note,
        reused("engine curves", registry_key("block-lru", "vllm", "lmcache"),
               lambda: (gpu_model_curves(), cpu_model_curves()))
        if lab and block_aggregates is not None else None,
        reused("lab policy curves", registry_key(*registry.POLICIES), lab_curves)
        if lab else None,
        trace.name if trace.is_file() else None,
        engine_aggregates, blocks.describe() if engine_aggregates is not None else "",
        _committed("fitted", FITTED_FILE, _fitted_engine),
        _committed("holdout", HOLDOUT_FILE, _fitted_engine))


def render_groups(inputs: ReportInputs) -> list[report.Group]:
    """The report's groups after the measured one, drawn from ``inputs`` (no model runs);
    a group drawn from the very same frames earlier in this process is reused (``drawn``)."""
    from pipeline import report
    from pipeline.charts.engines import run_engine_sections

    def block_group() -> report.Group:
        extra = ([] if inputs.engine_aggregates is None else
                 run_engine_sections(inputs.engine_aggregates, inputs.block_aggregates,
                                     inputs.block_scenario, inputs.engine_describe))
        if inputs.engine_curves is not None:          # the lab's: the same in every run
            extra += drawn("engine sections", lambda: report.engine_sections(
                inputs.engine_curves), inputs.engine_curves)
        return report.block_group(inputs.block_aggregates, inputs.block_scenario,
                                  inputs.block_note, extra=extra)

    groups = []
    if inputs.real_engine is not None:
        groups.append(drawn("real engine group", lambda: report.real_engine_group(
            inputs.real_engine, REAL_ENGINE_FILE), inputs.real_engine))
    if inputs.fitted_engine is not None:
        held = inputs.fitted_holdout
        groups.append(drawn("fitted engine group", lambda: report.fitted_engine_group(
            inputs.fitted_engine.frame, inputs.fitted_engine.provenance,
            None if held is None else (held.frame, held.provenance)),
            inputs.fitted_engine, held))
    if inputs.block_aggregates is not None:
        groups.append(drawn("block group", block_group, inputs.block_aggregates,
                            inputs.engine_curves, inputs.engine_aggregates,
                            scenario=inputs.block_scenario, note=inputs.block_note,
                            describe=inputs.engine_describe))
    if inputs.policy_curves is not None:
        groups.append(drawn("policy group", lambda: report.policy_group(inputs.policy_curves),
                            inputs.policy_curves))
    if inputs.trace_link is not None:
        groups.append(report.trace_group(inputs.trace_link))
    return groups


def report_groups(args: argparse.Namespace, workload: DocumentWorkload,
                  blocks: BlockSetup | None, block_aggregates: pl.DataFrame | None,
                  spec_points: tuple[int, ...], report_path: Path) -> list[report.Group]:
    """The report's groups after the measured one: ``report_inputs`` computes the frames,
    ``render_groups`` draws them."""
    return render_groups(report_inputs(args, workload, blocks, block_aggregates, spec_points,
                                       report_path))
