"""``fit --vllm-metrics FILE [--vllm-metrics-before FILE] [--vllm-metrics-seconds S]``: the
roofline's efficiency factors (or, with ``--profile DIR``, a profile's scale) from a vLLM
server's Prometheus scrape (``pipeline.fit.vllm_metrics``), fitted to its mean prefill time
and mean inter-token latency (``pipeline.fit.metrics_fit``). Writes the same ``roofline-efficiency``
/ ``profile-scale`` JSON as ``--vllm-bench`` (read by ``--latency FILE``) and, with
``--report DIR``, figures.csv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from pipeline.base.arguments import positive_float
from pipeline.base.errors import UsageError
from pipeline.base.staging import Outputs, json_bytes
from pipeline.fit.metrics_fit import Form, Mean, fit_means, figures, means, workload
from pipeline.fit.roofline_fit import bench_engine, check_scales, efficiency_document, \
    factor_lines, factors_of, hold_lost, schedule_of
from pipeline.fit.profile_scale import scale_document
from pipeline.fit.solve import Fit
from pipeline.fit.vllm_metrics import read_delta

__all__ = ["add_metrics_arguments", "main_metrics", "NOT_WITH_METRICS"]

#: options that mean nothing for a scrape (no requests to hold out, one loss, no sidecar)
NOT_WITH_METRICS = {"holdout": None, "ttft_only": False, "loss": None, "machine_load": False,
                    "speed_probe": False,
                    "kv_bytes_per_token": None, "gpu": None}


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``fit``'s options of this input."""
    parser.add_argument("--vllm-metrics", type=Path, metavar="FILE",
                        help="instead of FILE: a vLLM server's Prometheus /metrics scrape "
                             "(after the run); fits --mfu-prefill and --mbu-decode to its "
                             "mean prefill time and mean inter-token latency")
    parser.add_argument("--vllm-metrics-before", type=Path, metavar="FILE",
                        help="with --vllm-metrics: the scrape taken before the run (fit what "
                             "the run added: the difference)")
    parser.add_argument("--vllm-metrics-seconds", type=positive_float, metavar="SECONDS",
                        help="with --vllm-metrics: how long the measured run lasted (default: "
                             "the server is taken as never idle)")


def _refuse(args: argparse.Namespace) -> None:
    for dest, default in NOT_WITH_METRICS.items():
        if getattr(args, dest, default) != default:
            raise UsageError(f"--{dest.replace('_', '-')}: not with --vllm-metrics (a scrape "
                             f"holds aggregates: no requests to hold out or weigh, no KV "
                             f"pool to size)")
    for option in ("vllm_metrics_before", "vllm_metrics_seconds"):
        if getattr(args, option) and not args.vllm_metrics:
            raise UsageError(f"--{option.replace('_', '-')}: only with --vllm-metrics FILE")


def _fit(items: list[Mean], form: Form, args: argparse.Namespace
         ) -> tuple[Fit, Form, dict[str, str]]:
    """(fit, form, why each factor not fitted was held): the roofline's factors, a factor
    no step identifies held at its default; the profile's scale as it is."""
    why: dict[str, str] = {}
    if args.profile:
        fit, lost = fit_means(items, form)
        if lost:
            raise UsageError("fit: the scrape's means cannot identify the profile's scale")
        return fit, form, why
    while True:
        fit, lost = fit_means(items, form)
        if not lost:
            check_scales(fit.coefficients)
            return fit, form, why
        form = hold_lost(form, lost, why)


def _shares(items: list[Mean], form: Form, fit: Fit) -> list[str]:
    """Per mean, the share of its predicted milliseconds each fitted scale prices."""
    vector, lines = fit.vector(), []
    names = {"compute_scale": "compute roof (1/MFU)", "memory_scale": "memory roof (1/MBU)",
             "profile_scale": "profile's GPU ms"}
    for m in items:
        row, known = m.priced(form, vector)
        total = known + float(row @ vector)
        parts = [f"{100 * row[j] * vector[j] / total:.0f} % {names[name]}"
                 for j, name in enumerate(fit.names)]
        lines.append(f"  {m.name} {m.measured_ms:.4g}: " + ", ".join(parts)
                     + f", {100 * known / total:.0f} % fixed (overhead, held factors)")
    return lines


def main_metrics(args: argparse.Namespace, form: Form, gpu: object, described: str) -> int:
    """Fit, print, write (module docstring); ``form``, ``gpu``, ``described`` as
    ``fit``'s ``_bench_form`` gives them."""
    _refuse(args)
    scrape = read_delta(args.vllm_metrics, args.vllm_metrics_before)
    engine = bench_engine(args, gpu.memory_gb, gpu.name)
    w = workload(scrape, engine, args.vllm_metrics_seconds)
    items = means(scrape, w)
    fit, form, why = _fit(items, form, args)
    table = figures(scrape, w, items, form, fit)
    sources = [str(args.vllm_metrics)] + ([str(args.vllm_metrics_before)]
                                          if args.vllm_metrics_before else [])
    read = {"requests": w.requests, "engine_steps": w.steps,
            "decodes_per_step": round(w.decoders, 4),
            "decodes_beside_a_chunk": round(w.chunk_decoders, 4),
            "chunk_share_of_itl": round(w.chunk_share, 6), "seconds": args.vllm_metrics_seconds,
            "mean_prompt_tokens": float(w.prompts.mean()),
            "mean_computed_tokens": float(w.computed.mean()), "computed_from": w.computed_from,
            "mean_output_tokens": float(w.outputs.mean()),
            "chunk_tokens": w.budget, "model_name": scrape.model_name,
            "engines": scrape.engines, "delta": args.vllm_metrics_before is not None}
    provenance = (f"fitted: the mean prefill time and mean inter-token latency of vLLM's "
                  f"Prometheus histograms ({scrape.source}) priced on steps rebuilt from "
                  f"its histograms (pipeline.fit.metrics_fit; {schedule_of(engine)}), "
                  f"{described.split(': ', 1)[1]} with {args.step_overhead_ms:g} ms overhead "
                  f"per step (assumed); {len(fit.names)} value(s) from 2 means, "
                  f"{fit.iterations} iteration(s)" + ("" if fit.converged else
                                                      ", not converged"))
    common = {"source": sources, "metrics": read, "engine_model": engine.__dict__,
              "fit": {"rows": fit.rows, "iterations": fit.iterations,
                      "converged": fit.converged, "notes": fit.notes},
              "figures": table}
    if args.profile:
        document = scale_document(fit=fit, form=form, provenance=provenance, common=common)
        lines = [f"  profile scale  {document['scale']['value']:.4g} (its GPU milliseconds x "
                 f"this; least squares of the two means' relative errors)"]
    else:
        factors = factors_of(fit, form, args, why)
        document = efficiency_document(factors=factors, form=form, provenance=provenance,
                                       common=common)
        lines = factor_lines(factors)
        lines.append("  two means, two factors: solved exactly (no standard error)"
                     if len(fit.names) == 2 else "  one factor from two means: least squares "
                     "of their relative errors (no standard error)")
    frame = pl.DataFrame(table)
    outputs = Outputs()
    outputs.add(args.output, json_bytes(document), "--output")
    if args.report:
        outputs.add(args.report / "figures.csv", frame.write_csv().encode(), "--report")
    print(f"fit: vLLM metrics of {scrape.source}: {w.requests:g} requests finished, "
          f"{w.steps:g} engine steps emitting tokens, {w.decoders:.2f} decodes per step; "
          f"mean prompt {w.prompts.mean():.0f} tokens ({w.computed.mean():.0f} computed, "
          f"from {w.computed_from}), mean output {w.outputs.mean():.0f} tokens; a prefill chunk "
          f"meets {w.chunk_decoders:.2f} decodes ("
          + ("the per-step mean: the server taken as never idle; --vllm-metrics-seconds gives "
             "the time average" if args.vllm_metrics_seconds is None else
             f"the time average over {args.vllm_metrics_seconds:g} s")
          + f"), chunk steps {100 * w.chunk_share:.1f} % of the ITL observations")
    print(f"{described}, {args.step_overhead_ms:g} ms per step (--step-overhead-ms, assumed); "
          f"prefill chunks of up to {w.budget} tokens ({schedule_of(engine)})")
    print("\n".join(lines))
    print("what each fitted mean is made of, at the fitted values:")
    print("\n".join(_shares(items, form, fit)))
    with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True,
                   float_precision=2, tbl_width_chars=120, fmt_str_lengths=60):
        print("measured vs predicted (fitted: the two means; the rest are checks):")
        print(frame)
    outputs.commit()
    print(f"fit: wrote {args.output}" + (f" and {args.report}/" if args.report else "")
          + f" (use: --latency {args.output})", file=sys.stderr)
    return 0

