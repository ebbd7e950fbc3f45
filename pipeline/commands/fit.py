"""Fit an engine's step costs to measured requests: ``python -m pipeline fit FILE...``.

``FILE`` are ``measure --trace`` outputs (each with its sidecar). Every run is simulated on
the engine model its sidecar records (``engine_model``; the options below override it), and
the step-time coefficients (ms per step, per prefilled token, per attended context token, per
decode sequence, per reloaded token) are fitted by least squares on that schedule
(``pipeline.fit.solve``). Prints the coefficients with standard errors, what the data cannot
identify, the residuals per prompt-length band and load level, and with ``--holdout
FRACTION`` ``held-out TTFT error: p50 X %, p90 Y %`` on requests left out of the fit.
Writes ``--output`` (the fitted JSON that ``--latency FILE`` reads) and, with ``--report
DIR``, requests.csv (measured against predicted TTFT per request), residuals.csv and
measured_vs_predicted.html. Outputs are written all together or not at all.

``--vllm-bench FILE...`` fits the roofline's efficiency factors instead (``--mfu-prefill``,
``--mbu-decode``; ``pipeline.fit.roofline_fit``) to ``vllm bench serve --save-result
--save-detailed`` results (``pipeline.fit.vllm_bench``), on the roofline of ``--model``/
``--model-config``, ``--gpu-type``, ``--tensor-parallel-size``: ``--output`` is then a
``roofline-efficiency`` JSON that ``simulate``, ``plan`` and ``fleet`` read with ``--latency
FILE``.

``--vllm-metrics FILE`` (``--vllm-metrics-before FILE``: the difference of two scrapes;
``--vllm-metrics-seconds``: the run's length) fits
the same factors (or ``--profile``'s scale) to a vLLM server's Prometheus histograms
(``pipeline.commands.fit_metrics``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.base.arguments import checked, deprecated_alias, positive_int
from pipeline.base.errors import CLIError, UsageError
from pipeline.base.staging import Outputs, json_bytes
from pipeline.commands.fit_bench import bench_form, main_bench
from pipeline.commands.fit_metrics import add_metrics_arguments, main_metrics
from pipeline.commands.fit_outputs import gpu_blocks, holdout_summary, print_holdout
from pipeline.fit.evaluate import HOLDOUT_BY, holdout_masks, predictions, residuals
from pipeline.fit.fitted import fitted_document
from pipeline.fit.inputs import load_runs
from pipeline.fit.schedule import FEATURES, EngineModel, simulate_run
from pipeline.fit.solve import FitError, fit_runs
from pipeline.fit.speed import speed_document, with_speeds
from pipeline.sizes.model_options import add_model_config_argument, add_parallel_arguments
from pipeline.sizes.units import one_capacity, preset
from pipeline.steptime.options import add_latency_arguments
from pipeline.steptime.roofline import DEFAULT_OVERHEAD_MS

__all__ = ["add_arguments", "main"]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``fit``."""
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE",
                        help="measure --trace outputs (JSON lines with a sidecar)")
    parser.add_argument("--vllm-bench", nargs="+", type=Path, metavar="FILE",
                        help="instead of FILE: vllm bench serve --save-result --save-detailed "
                             "JSON; fits the roofline's --mfu-prefill and --mbu-decode")
    add_metrics_arguments(parser)
    parser.add_argument("--output", type=Path, required=True,
                        help="the fitted JSON to write")
    parser.add_argument("--holdout", type=_fraction, metavar="FRACTION",
                        help="fit without this fraction and report the error on it")
    parser.add_argument("--holdout-by", choices=HOLDOUT_BY, default="request",
                        help="what is held out: requests, whole prompt lengths, or whole "
                             "runs (load levels) (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="holdout seed (default %(default)s)")
    parser.add_argument("--ttft-only", action="store_true",
                        help="fit TTFT rows only (default: end times too)")
    parser.add_argument("--machine-load", action="store_true",
                        help="also fit how the machine's other work slows the engine: each "
                             "run's step times x (1 + c x the 1-minute load average its "
                             "sidecar recorded at the start), c fitted; the coefficients are "
                             "then an idle machine's")
    parser.add_argument("--speed-probe", action="store_true",
                        help="scale each run's step times by its speed probe (measure "
                             "--speed-probe: the same prompts timed before and after the run) "
                             "over the fitted runs' median probe; nothing fitted")
    parser.add_argument("--loss", choices=("squares", "absolute"), default=None,
                        help="minimise the squared or the absolute relative errors (default: "
                             "squares for measure outputs, absolute with --vllm-bench)")
    parser.add_argument("--report", type=Path, metavar="DIR",
                        help="write requests.csv, residuals.csv, measured_vs_predicted.html")
    parser.add_argument("--kv-bytes-per-token", type=positive_int,
                        help="KV bytes per token for the fitted file (default: the sidecar's)")
    model = parser.add_argument_group("engine model (default: each sidecar's engine_model)")
    model.add_argument("--max-num-seqs", type=positive_int)
    model.add_argument("--max-num-batched-tokens", type=positive_int)
    model.add_argument("--block-size", type=positive_int)
    model.add_argument("--gpu", type=one_capacity, metavar="SIZE",
                       help="the engine's GPU KV capacity: tokens, blocks (5860blocks = "
                            "vLLM's num_gpu_blocks, the null block included) or a size with "
                            "--kv-bytes-per-token (20GiB, 200GB, 512MiB)")
    deprecated_alias(model, "--num-gpu-blocks", "--gpu", lambda text: f"{text}blocks")
    roofline = parser.add_argument_group(
        "--vllm-bench, --vllm-metrics: the roofline fitted (--mfu-prefill/--mbu-decode "
        "given: held, not fitted)")
    models = roofline.add_mutually_exclusive_group()
    models.add_argument("--model", metavar="PRESET", type=checked(preset),
                        help="the served model's preset (or --model-config, --model-shape)")
    add_model_config_argument(models)
    add_parallel_arguments(roofline)
    roofline.add_argument("--profile", metavar="DIR",
                          help="fit one scale on this vidur-format profile's GPU milliseconds "
                               "(as --latency profile:DIR prices them) instead of the "
                               "roofline's factors")
    add_latency_arguments(parser, latency=False, fitted=True)


#: options of the roofline (--vllm-bench) and their defaults
ROOFLINE_OPTIONS = {"model": None, "model_config": None, "model_shape": None,
                    "gpu_type": None, "gpu_tflops": None, "gpu_fp8_tflops": None,
                    "gpu_hbm_gbps": None, "host_link_gbps": None, "mfu_prefill": None,
                    "mbu_decode": None, "tensor_parallel_size": 1, "kv_cache_dtype": "auto",
                    "weights": "bf16", "step_overhead_ms": DEFAULT_OVERHEAD_MS,
                    "profile": None}


def _engine(run_model: dict, args: argparse.Namespace) -> EngineModel:
    fields = dict(run_model)
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        if getattr(args, name, None):
            fields[name] = getattr(args, name)
    gpu = getattr(args, "gpu", None)
    if gpu is not None:
        fields["num_gpu_blocks"] = gpu_blocks(gpu, args.kv_bytes_per_token,
                                               fields.get("block_size") or 16)
    return EngineModel.from_dict(fields)


def _one(values: set, what: str) -> object:
    if len(values) > 1:
        raise CLIError(f"the files measure different {what}s ({', '.join(map(str, values))}): "
                       f"fit one engine and model at a time")
    return next(iter(values))


def _print_fit(fit, runs: list, train: list, frame: pl.DataFrame, table: pl.DataFrame,
               holdout: dict | None) -> None:
    print(f"fit: {frame.height} measured requests in {frame['file'].n_unique()} file(s), "
          f"{fit.rows} rows, {fit.iterations} iteration(s)"
          + ("" if fit.converged else " (schedule not converged)"))
    print("coefficient            value        stderr")
    for name in FEATURES:
        value, se = fit.coefficients[name], fit.stderr[name]
        shown = "not identified" if name in fit.unidentified else f"{value:.6g}"
        print(f"  {name:<20} {shown:>12} {'' if not np.isfinite(se) else f'± {se:.3g}'}".rstrip())
    if fit.machine_load:
        loads = sorted({r.machine_load for r, fitted in zip(runs, train) if fitted.any()})
        se = fit.per_load_stderr
        print(f"  machine load: step times x (1 + {fit.per_load:.4g} x load average)"
              + ("" if not np.isfinite(se) else f" ± {se:.3g}")
              + f" (the fitted runs' 1-minute load averages, from their sidecars: "
                f"{loads[0]:g} .. {loads[-1]:g}); the coefficients above are an idle machine's")
    if any(r.speed != 1.0 for r in runs):
        print("  speed probe: each run's step times x " + ", ".join(
            f"{r.label} {r.speed:.3f}" for r in runs) + " (its probe over the fitted runs' "
            "median; measured, not fitted)")
    if fit.unidentified or fit.clamped:
        print("what the data cannot identify:")
        for name, why in fit.unidentified.items():
            print(f"  {name}: {why}")
        for name in fit.clamped:
            print(f"  {name}: its least-squares value is negative (the data cannot tell it "
                  f"from 0 against the other costs): held at 0")
    else:
        print("every coefficient is identified by these requests")
    for note in fit.notes:
        if not note.endswith("others refitted"):
            print(f"note: {note}")
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=1, tbl_width_chars=120):
        print("TTFT residuals (predicted vs measured) per prompt-length band and load:")
        print(table)
    print_holdout(holdout)


def chart(frame: pl.DataFrame, fmt: str = "html") -> bytes:
    """Measured against predicted TTFT per request (``predictions``' frame), html or png
    (``pipeline.charts.fitted_ttft``: the figures of ``run``'s report)."""
    import io

    from pipeline.charts import page_html
    from pipeline.charts import fitted_ttft
    if fmt == "png":
        data = io.BytesIO()
        fitted_ttft.scatter(frame).save(data, format="png")
        return data.getvalue()
    return page_html("fit: measured vs predicted TTFT", "Every measured request against the "
                     "fitted step-time model's simulated TTFT (log scales).",
                     [("Per request", "", fitted_ttft.page_sections(frame))]).encode("utf-8")


def main(args: argparse.Namespace) -> int:
    """Fit, print, write (see the module docstring)."""
    if args.vllm_metrics or args.vllm_metrics_before or args.vllm_metrics_seconds:
        if args.files or args.vllm_bench:
            raise UsageError("--vllm-metrics: not with measure outputs (FILE) or "
                             "--vllm-bench: fit one kind of measurement at a time")
        form, gpu, _, described = bench_form(args, "--vllm-metrics")
        return main_metrics(args, form, gpu, described)
    if args.vllm_bench:
        if args.files:
            raise UsageError(f"{args.files[0]}: give measure outputs (FILE) or --vllm-bench, "
                             f"not both")
        return main_bench(args)
    if not args.files:
        raise UsageError("give measure --trace outputs (FILE...), --vllm-bench FILE or "
                         "--vllm-metrics FILE")
    for dest, default in ROOFLINE_OPTIONS.items():
        if getattr(args, dest, default) != default:
            raise UsageError(f"--{dest.replace('_', '-')}: only with --vllm-bench or "
                             f"--vllm-metrics (measure outputs are fitted to the linear "
                             f"step-time form)")
    runs = load_runs(args.files)
    engines = [_engine(r.engine_model, args) for r in runs]
    for run, engine in zip(runs, engines):
        if engine.max_num_batched_tokens < 1 or engine.max_num_seqs < 1:
            raise CLIError(f"{run.file}: its engine model is incomplete: give --max-num-seqs "
                           f"and --max-num-batched-tokens")
    held = holdout_masks(runs, args.holdout or 0.0, args.holdout_by, args.seed)
    train = [~h for h in held]
    reference = None
    if args.speed_probe:
        runs, reference = with_speeds(runs, train)
    try:
        fit = fit_runs(runs, engines, train, use_e2e=not args.ttft_only, held=held,
                       machine_load=args.machine_load,
                       absolute=(args.loss or "squares") == "absolute")
    except FitError as exc:
        raise CLIError(f"fit: {exc}") from None
    frame = predictions(runs, engines, fit.vector(), held, fit.per_load)
    table = residuals(frame)
    holdout = holdout_summary(args, frame)
    engine_names = {str(r.sidecar.get("engine", {}).get("name")) for r in runs}
    models = {str(r.sidecar.get("served_model")) for r in runs}
    fitted_rows = frame.filter(~pl.col("held_out"))
    kv = args.kv_bytes_per_token or _one({r.sidecar.get("kv_bytes_per_token") for r in runs},
                                         "KV bytes per token")
    document = fitted_document(
        fit, engine=str(_one(engine_names, "engine")), served_model=str(_one(models, "model")),
        kv_bytes_per_token=kv,
        prompt_range=(int(fitted_rows["prompt_tokens"].min()),
                      int(fitted_rows["prompt_tokens"].max())),
        sources=sorted({str(p) for p in args.files}),
        holdout=holdout or {}, engine_model=engines[0].__dict__,
        schedule_source=simulate_run(runs[0], engines[0], fit.vector()).source,
        residuals=table.to_dicts(), requests=fitted_rows.height,
        machine_loads=sorted({r.machine_load for r, t in zip(runs, train) if t.any()
                              and r.machine_load is not None}),
        speed_probe=None if reference is None else speed_document(runs, reference))
    outputs = Outputs()
    outputs.add(args.output, json_bytes(document), "--output")
    if args.report:
        outputs.add(args.report / "requests.csv", frame.write_csv().encode(), "--report")
        outputs.add(args.report / "residuals.csv", table.write_csv().encode(), "--report")
        outputs.add(args.report / "measured_vs_predicted.html", chart(frame), "--report")
    _print_fit(fit, runs, train, frame, table, holdout)
    outputs.commit()
    print(f"fit: wrote {args.output}" + (f" and {args.report}/" if args.report else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    from pipeline.cli import run_command

    sys.exit(run_command("fit"))
