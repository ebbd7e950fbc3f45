"""``fit --vllm-bench FILE...``: the roofline's efficiency factors (or ``--profile``'s scale)
fitted to ``vllm bench serve --save-result --save-detailed`` results
(``pipeline.fit.vllm_bench``, ``pipeline.fit.roofline_fit``); ``bench_form`` is also the form
``--vllm-metrics`` fits."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import polars as pl

from pipeline.base.errors import UsageError
from pipeline.base.staging import Outputs, json_bytes
from pipeline.commands.fit_outputs import gpu_blocks, holdout_summary, print_holdout
from pipeline.fit.evaluate import holdout_masks, predictions, residuals
from pipeline.fit.profile_scale import ProfileForm, fit_scale, scale_document
from pipeline.fit.roofline_fit import bench_engine, bench_fields, bench_figures, \
    bench_provenance, efficiency_document, factor_lines, factors_of, fit_factors, peak_form, \
    schedule_of
from pipeline.fit.vllm_bench import load_bench
from pipeline.sizes.gpus import gpu_preset
from pipeline.sizes.model_options import kv_dtype, shape_from_args, tensor_parallel
from pipeline.steptime.profile import read_profile

__all__ = ["bench_form", "main_bench"]


def bench_form(args: argparse.Namespace, option: str = "--vllm-bench"
                ) -> tuple[object, object, int, str]:
    """(the form fitted: the roofline's or ``--profile``'s, the GPU, KV bytes per token per
    GPU, the model in words); ``option``: the input fitted, for errors."""
    if not args.profile:
        form = peak_form(args, option)
        return (form, form.peak.gpu, form.peak.kv_bytes_per_token,
                f"the roofline: {form.peak.label} at its peaks")
    for option in ("mfu_prefill", "mbu_decode"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option.replace('_', '-')}: a roofline factor; --profile "
                             f"fits the profile's scale")
    profile = read_profile(args.profile, args)
    shape = shape_from_args(args)
    return (ProfileForm(profile), gpu_preset(args.gpu_type or "H100"),
            shape.kv(kv_dtype(args), tensor_parallel(args)).bytes_per_token,
            f"the profile: {profile.label}")


def main_bench(args: argparse.Namespace) -> int:
    """``--vllm-bench``: fit the roofline's factors (or ``--profile``'s scale), print,
    write."""
    for option in ("machine_load", "speed_probe", "kv_bytes_per_token"):
        if getattr(args, option):
            raise UsageError(f"--{option.replace('_', '-')}: not with --vllm-bench (its "
                             f"results record no load average; the model gives KV bytes)")
    form, gpu, kv_bytes, described = bench_form(args)
    runs = load_bench(args.vllm_bench)
    engine = bench_engine(args, gpu.memory_gb, gpu.name)
    if args.gpu is not None:
        engine = replace(engine, num_gpu_blocks=gpu_blocks(args.gpu, kv_bytes,
                                                            engine.block_size))
    engines = [engine] * len(runs)
    held = holdout_masks(runs, args.holdout or 0.0, args.holdout_by, args.seed)
    train, absolute = [~h for h in held], (args.loss or "absolute") == "absolute"
    if args.profile:
        fit = fit_scale(runs, engines, train, held, form, not args.ttft_only, absolute)
    else:
        fit, form, why = fit_factors(runs, engines, train, held, form,
                                     use_e2e=not args.ttft_only, absolute=absolute)
    frame = predictions(runs, engines, fit.vector(), held, source=form.simulate)
    table, figures = residuals(frame), bench_figures(runs, frame)
    holdout = holdout_summary(args, frame)
    common = bench_fields(runs, sorted({str(p) for p in args.vllm_bench}), engine, fit,
                          holdout or {}, figures.to_dicts())
    provenance = bench_provenance(described.split(": ", 1)[1], args.step_overhead_ms, engine,
                                  fit, int((~frame["held_out"]).sum()), absolute)
    if args.profile:
        document = scale_document(fit=fit, form=form, provenance=provenance, common=common)
        scale = document["scale"]
        lines = [f"  profile scale  {scale['value']:.4g}"
                 + ("" if scale["stderr"] is None else f" ± {scale['stderr']:.3g}")
                 + " (its GPU milliseconds x this)"]
    else:
        factors = factors_of(fit, form, args, why)
        document = efficiency_document(factors=factors, form=form, provenance=provenance,
                                       common=common)
        lines = factor_lines(factors)
    outputs = Outputs()
    outputs.add(args.output, json_bytes(document), "--output")
    if args.report:
        outputs.add(args.report / "requests.csv", frame.write_csv().encode(), "--report")
        outputs.add(args.report / "residuals.csv", table.write_csv().encode(), "--report")
        outputs.add(args.report / "figures.csv", figures.write_csv().encode(), "--report")
    print(f"fit: {frame.height} measured requests in {len(runs)} vllm bench serve result(s), "
          f"{fit.rows} rows, {fit.iterations} iteration(s)"
          + ("" if fit.converged else " (schedule not converged)"))
    print(f"{described}, {args.step_overhead_ms:g} ms per step (--step-overhead-ms, assumed); "
          f"the schedule: {schedule_of(engine)}")
    print("\n".join(lines + [f"note: {note}" for note in fit.notes]))
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=1, tbl_width_chars=120, fmt_str_lengths=60):
        print("vllm bench serve's figures, measured vs predicted with the fitted values:")
        print(figures)
    print_holdout(holdout)
    outputs.commit()
    print(f"fit: wrote {args.output}" + (f" and {args.report}/" if args.report else "")
          + f" (use: --latency {args.output} with the model's --model or --model-config"
          + ("" if args.profile else f" on --gpu-type {gpu.name.split()[0]}") + ")",
          file=sys.stderr)
    return 0
