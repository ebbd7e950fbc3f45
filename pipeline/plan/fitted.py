"""``plan --latency MODEL``: TTFT of each request alone under a step-time model (a fitted
file, the roofline or any registered one) instead of a measured file.

The model (``pipeline.steptime.registry``) prices each request alone on the engine
(``pipeline.steptime.alone.request_ttft``; a fitted file's chunk is its engine model's
``max_num_batched_tokens``, another model's ``--max-num-batched-tokens``). Its TTFT is printed
only when it can back this plan (``plan_with_latency``): the KV bytes per token it prices
equal the plan's, ``--served-model`` (when given) is the model it was fitted on, and every
prompt of the workload lies in its fitted prompt-length range; otherwise the figures are
hit ratios only and the output says why.
"""

from __future__ import annotations

import argparse

from pipeline.base.errors import CLIError
from pipeline.plan.search import Target
from pipeline.plan.output import answer_fields, backed_plan, document_head, models_fields, \
    print_document
from pipeline.steptime.alone import AloneTTFT, plan_with_latency
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.fitted import Linear
from pipeline.steptime.options import latency_from_args
from pipeline.ttft.model import GPU_ONLY, OFFLOAD

__all__ = ["fitted_plan", "model_lines"]


def model_lines(model: StepTimeModel) -> list[str]:
    """The text lines that describe the step-time model."""
    if not isinstance(model, Linear):
        return [f"  {model.label}, one request at a time: {model.provenance}"]
    parts = ", ".join(f"{name} {value:.4g}" for name, value in model.coefficients.items())
    return [f"  {model.describe()}: {parts}"]


def _fields(model: StepTimeModel, path: str, chunk: int) -> dict:
    """The step-time model in plan's JSON document."""
    if not isinstance(model, Linear):
        return {"path": path, "label": model.label, "provenance": model.provenance,
                "chunk": chunk}
    return {"path": path, "served_model": model.served_model,
            "kv_bytes_per_token": model.kv_bytes_per_token,
            "prompt_tokens_range": list(model.prompt_tokens_range), "chunk": chunk,
            "coefficients": dict(model.coefficients)}


def fitted_plan(args: argparse.Namespace, kv, gpu: int, gpu_given: str, build,
                names: list[str], target: Target) -> int:
    """Plan with the step-time model ``args.latency`` (see the module docstring);
    ``build(gpu, models)`` makes the workload's evaluator."""
    if args.measured is not None:
        raise CLIError("--latency and --measured exclude each other (one TTFT model)")
    if args.report is not None:
        raise CLIError("--report draws the measured TTFT model: use it with --measured")
    step_model = latency_from_args(args)
    fitted = isinstance(step_model, Linear)
    chunk = step_model.chunk if fitted else args.max_num_batched_tokens
    if chunk is None:
        raise CLIError(f"--latency: {args.latency}: engine_model.max_num_batched_tokens is "
                       f"missing")
    model = AloneTTFT(step_model, chunk)
    evaluator = build(gpu, {GPU_ONLY: model, OFFLOAD: model})
    withheld = plan_with_latency(step_model, kv.bytes_per_token,
                                 evaluator.requests_frame["context"],
                                 served_model=args.served_model,
                                 ttft_target="--target-ttft-ms" if target.kind == "ttft"
                                 else None)
    result = backed_plan(evaluator, target, withheld)
    document = {
        **document_head(evaluator.description, kv, gpu, gpu_given, target, names),
        **models_fields(evaluator),
        "measured": {"path": str(args.latency), "synthetic": False, "fitted": fitted,
                     "step_time": True},
        "models": {"fitted step time" if fitted else "step time":
                   _fields(step_model, str(args.latency), chunk)},
        **answer_fields(result, result.cpu_tokens, kv),
    }
    return print_document(document, withheld, args.json, model_lines(step_model), result,
                          target, names, args.verbose)
