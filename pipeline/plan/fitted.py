"""``plan --latency FITTED``: TTFT from a fitted step-time file instead of a measured one.

The file (``python -m pipeline fit``) prices each request alone on the engine
(``pipeline.fit.plan_ttft``). Its TTFT is printed only when it can back this plan: the KV
bytes per token it was fitted with equal the plan's, ``--served-model`` (when given) is the
model it was fitted on, and every prompt of the workload lies in its fitted prompt-length
range; otherwise the figures are hit ratios only and the output says why.
"""

from __future__ import annotations

import argparse

from pipeline.base.errors import CLIError
from pipeline.fit.plan_ttft import StepTimeTTFT, fitted_problem, load_step_time_ttft
from pipeline.plan.search import Target
from pipeline.plan.output import answer_fields, backed_plan, document_head, models_fields, \
    print_document
from pipeline.ttft.model import GPU_ONLY, OFFLOAD

__all__ = ["fitted_plan", "model_lines"]


def model_lines(model: StepTimeTTFT) -> list[str]:
    """The text lines that describe the fitted model."""
    c = model.coefficients
    parts = ", ".join(f"{name} {value:.4g}" for name, value in c.items())
    return [f"  {model.describe()}: {parts}"]


def fitted_plan(args: argparse.Namespace, kv, gpu: int, gpu_given: str, build,
                names: list[str], target: Target) -> int:
    """Plan with the fitted file ``args.latency`` (see the module docstring); ``build(gpu,
    models)`` makes the workload's evaluator."""
    if args.measured is not None:
        raise CLIError("--latency and --measured exclude each other (one TTFT model)")
    if args.report is not None:
        raise CLIError("--report draws the measured TTFT model: use it with --measured")
    try:
        model = load_step_time_ttft(args.latency)
    except ValueError as exc:
        raise CLIError(f"--latency {exc}") from None
    evaluator = build(gpu, {GPU_ONLY: model, OFFLOAD: model})
    withheld = fitted_problem(model, args.served_model, kv.bytes_per_token,
                              evaluator.requests_frame["context"])
    result = backed_plan(evaluator, target, withheld)
    cpu = result.cpu_tokens
    document = {
        **document_head(evaluator.description, kv, gpu, gpu_given, target, names),
        **models_fields(evaluator),
        "measured": {"path": str(args.latency), "synthetic": False, "fitted": True},
        "models": {"fitted step time": {"path": str(args.latency),
                                        "served_model": model.served_model,
                                        "kv_bytes_per_token": model.kv_bytes_per_token,
                                        "prompt_tokens_range": list(model.prompt_tokens_range),
                                        "chunk": model.chunk,
                                        "coefficients": model.coefficients}},
        **answer_fields(result, cpu, kv),
    }
    return print_document(document, withheld, args.json, model_lines(model), result, target,
                          names, args.verbose)
