"""Plan a CPU offload tier: the smallest one that meets a TTFT or hit-ratio target.

``python -m pipeline plan --target-ttft-ms 100`` answers for the lab's documents at the lab's
GPU capacity (21520 tokens) with the lab's model (Qwen2.5-1.5B, 28,672 KV bytes per token):
the CPU tier in tokens and in GiB/GB, with the predicted figures per pass there and one token
below. Without a trace PATH or --pattern the workload is the lab's documents, whole (or in
blocks with --block-size). TTFT comes from a model fitted per engine config on a measured
file (``pipeline.ttft.model``); hits from the one-pass engines (``pipeline.plan.search``).
A target that no size searched meets is answered all the same (text or --json), exit status 1.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Callable

import polars as pl

from kvlab import make_exports
from pipeline.base.arguments import derive
from pipeline.base.config import LAB_GPU
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.units import KVSize, capacity_tokens, kv_from_args, model_given, \
    one_of, sized_option
from pipeline.sizes.vllm_memory import gpu_from_utilization
from pipeline.workloads.stream_limits import check_document_blocks
from pipeline.catalog.model_options import run_options
from pipeline.commands.plan_fleet import fleet_plan, fleet_requested
from pipeline.sizes.limits import MAX_ACCESSES, check_count
from pipeline.plan.search import DocumentEvaluator, Evaluator, PlanResult, Target
from pipeline.plan.output import answer_fields, backed_plan, describe_target, document_head, \
    model_json, model_lines, models_fields, print_document
from pipeline.plan.blocks import BlockEvaluator
from pipeline.plan.policies import PolicyDocumentEvaluator
from pipeline.catalog import policy_names
from pipeline.base.staging import Outputs
from pipeline.workloads.sources import load_workload
from pipeline.plan.load import plan_under_load
from pipeline.plan.tiers import tier_plan
from pipeline.plan.tier_ttft import tier_ttft_plan
from kvlab.kvsim import TIERS
from pipeline.ttft.model import FitError, TTFTModel, fit_configs, measured_requests, \
    model_for_capacity, residuals_by_pass
from pipeline.ttft.scope import measured_kv, ttft_problem
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.workload import Workload
from pipeline.commands.plan_options import add_arguments, refuse_unused  # noqa: F401 (cli)


def _passes(text: str, count: int) -> tuple[int, ...]:
    if text == "warm":
        return tuple(range(1, count)) or (0,)
    if text == "all":
        return tuple(range(count))
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        numbers = []
    if not numbers or any(not 1 <= n <= count for n in numbers):
        raise CLIError(f"--pass: expected warm, all or pass numbers 1..{count}, got {text!r}")
    return tuple(sorted({n - 1 for n in numbers}))


def _pass_names(workload: Workload) -> list[str]:
    """The workload's pass names in order (a request without one is in pass ``all``)."""
    return (workload.requests.sort("request")["pass_name"].fill_null("all")
            .unique(maintain_order=True).to_list())


def _workload(args: argparse.Namespace) -> tuple[Workload, str, str]:
    """The workload (a trace, a pattern or the lab's documents, whole or in blocks), its
    description and the option that chose it, checked."""
    if args.path is not None or args.pattern is not None:
        loaded = load_workload(args)
        source = "PATH" if args.path is not None else f"--pattern {args.pattern}"
        if loaded.requests.height == 0:
            raise CLIError(f"{source}: the workload has no requests")
        return (loaded, f"{loaded.label}: {loaded.requests.height:,} requests in "
                f"{loaded.block_size}-token blocks", source)
    try:
        documents = DocumentWorkload(args.docs, args.tokens, tuple(args.passes))
    except ValueError as exc:
        raise CLIError(f"--docs/--tokens/--passes: {exc}") from None
    if documents.working_set == 0:
        raise CLIError(f"--docs/--tokens: the workload has no tokens to cache "
                       f"({documents.docs} documents x {documents.tokens} tokens)")
    if args.block_size is None:
        policies = policy_names()
        for tier in ("gpu", "cpu"):
            model = getattr(args, f"{tier}_model")
            if getattr(args, f"{tier}_model_given", False) and model != "block-lru" \
                    and model not in policies:
                raise UsageError(f"--{tier}-model {model}: engine models need block mode "
                                 f"(--block-size, a trace PATH or --pattern); whole "
                                 f"documents take a policy ({', '.join(policies)})")
        check_count(documents.docs * len(documents.passes), MAX_ACCESSES,
                    f"--docs {documents.docs} x {len(documents.passes)} --passes", "accesses")
        whole = documents.workload(None)
        return whole, f"{whole.label} ({whole.requests.height} requests)", "--docs"
    check_document_blocks(documents.docs, len(documents.passes), documents.tokens,
                          args.block_size)
    return (documents.workload(args.block_size),
            f"{documents.docs} documents x {documents.tokens} tokens in {args.block_size}-token "
            f"blocks, passes {','.join(documents.passes)}", "--block-size")


def document_policies(args: argparse.Namespace) -> tuple[str, str] | None:
    """Document mode's (GPU, CPU) policies when a policy was asked for either tier (the
    other tier: lru), or None: kvlab's TwoTierCache (``block-lru`` names it too)."""
    policies = policy_names()
    given = {tier: getattr(args, f"{tier}_model") for tier in ("gpu", "cpu")
             if getattr(args, f"{tier}_model_given", False)
             and getattr(args, f"{tier}_model") in policies}
    if not given:
        return None
    return given.get("gpu", "lru"), given.get("cpu", "lru")


def _evaluator_builder(args: argparse.Namespace, workload: Workload, description: str,
                option: str) -> Callable[[int, dict[str, TTFTModel]], Evaluator]:
    """How to build the workload's evaluator at a GPU capacity with TTFT models: document
    mode for whole items, else block mode with the run's models (their options checked
    now)."""
    if workload.block_size is None:
        chosen = document_policies(args)
        if chosen is not None:
            return lambda gpu, models: PolicyDocumentEvaluator(description, workload, gpu,
                                                               models, *chosen)
        return lambda gpu, models: DocumentEvaluator(description, workload, gpu, models)
    gpu_options, cpu_options = run_options(args, workload.block_size, workload.requests.height,
                                           workload.blocks.height, workload)
    description = (f"{description} (GPU {args.gpu_model} {args.gpu_order}, CPU "
                   f"{args.cpu_model} {args.cpu_order})")

    def build(gpu: int, models: dict[str, TTFTModel]) -> Evaluator:
        try:
            return BlockEvaluator(description, workload, gpu, models, args.gpu_order,
                                  args.cpu_order, args.gpu_model, args.cpu_model, gpu_options,
                                  cpu_options)
        except ValueError as exc:
            raise CLIError(f"{option}: {exc}") from None
    return build


def _models(args: argparse.Namespace) -> tuple[dict[str, TTFTModel], pl.DataFrame, str, bool]:
    source, synthetic = make_exports.measured_source(str(args.measured) if args.measured
                                                     else None)
    try:
        requests = measured_requests(source, args.measured_gpu_tokens, args.measured_cpu_tokens,
                                     args.measured_tokens, args.measured_docs)
        models = fit_configs(requests)
        for capacity, needed in ((0, ("gpu", "miss")), (1, TIERS)):
            model = model_for_capacity(models, capacity)
            unpriced = [tier for tier in model.unpriced_tiers() if tier in needed]
            if unpriced:
                raise FitError(f"no request of config {model.config} is served by the "
                               f"{' or '.join(unpriced)} tier: the model cannot price it")
    except FitError as exc:
        raise CLIError(f"{source}: {exc}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    return models, requests, source, synthetic


def _write_report(args: argparse.Namespace, evaluator: Evaluator, kv: KVSize, target: Target,
                  result: PlanResult, errors: pl.DataFrame, names: list[str], gpu: int,
                  provenance: str, withheld: str | None = None) -> None:
    """The page: what the target was first (hit ratio or TTFT against the CPU tier, the
    answer marked), then the other, then the fit; ``withheld`` (why TTFT is not predicted)
    replaces the TTFT chart by that sentence. Written through ``pipeline.base.staging``."""
    from pipeline.charts import page_html
    from pipeline.charts.plan import (fit_section, hit_ratio_section, measured_points,
                                      ttft_capacity_section)

    points = measured_points(errors, args.measured_cpu_tokens, names) if (
        gpu == args.measured_gpu_tokens and args.block_size is None and args.path is None
        and args.pattern is None) \
        else None
    hits = ("Cache hit ratio against the CPU tier", "",
            [hit_ratio_section(evaluator, kv, target, names, result,
                               int(points["cpu_capacity"].max()) if points is not None
                               and points.height else 0)])
    ttft = ("Predicted TTFT against the CPU tier", "",
            [ttft_capacity_section(evaluator, kv, target.statistic, points, result,
                                   provenance)]) if withheld is None else (
        "Predicted TTFT against the CPU tier", f"<p>TTFT withheld: {html.escape(withheld)}.</p>",
        [])
    page = page_html("kvlab: sizing the CPU tier", f"{evaluator.description}; "
                     f"{kv.describe()}; target: {describe_target(target, names)}; TTFT model "
                     f"fitted on {provenance}.",
                     [*([hits, ttft] if target.kind == "hit_ratio" else [ttft, hits]),
                      ("The TTFT model against the measurement", "",
                       [fit_section(errors, target.statistic)])])
    outputs = Outputs()
    outputs.add(args.report, page.encode("utf-8"), "--report")
    outputs.commit()


def _check_engine_models(args: argparse.Namespace) -> None:
    """``--target-ttft-p90-ms`` runs the engine model: vLLM's allocator and no CPU tier, so a
    cache model it would not run is a usage error, not silently dropped."""
    if args.cpu_model_given:
        raise UsageError(f"--cpu-model {args.cpu_model}: not with --target-ttft-p90-ms (it "
                         f"sizes the GPU of an engine without a CPU tier)")
    if args.gpu_model_given and args.gpu_model != "vllm":
        raise UsageError(f"--gpu-model {args.gpu_model}: not with --target-ttft-p90-ms (its "
                         f"engine runs vLLM's allocator, vllm)")


def main(args: argparse.Namespace) -> int:
    """Validate everything, fit, search, print (text or --json)."""
    if args.tier_costs is not None:
        return (tier_plan if args.target_ttft_p90_ms is None else tier_ttft_plan)(args)
    if fleet_requested(args):
        if args.fleet:
            refuse_unused(args, "fleet")
        return fleet_plan(args)
    if args.target_ttft_p90_ms is not None:
        refuse_unused(args, "load")
        _check_engine_models(args)
        return plan_under_load(args)
    refuse_unused(args, "measured" if args.latency is None else "fitted")
    utilization = None
    if getattr(args, "gpu_memory_utilization", None) is not None:
        args, utilization = gpu_from_utilization(args, args.block_size)
    given = one_of(args.gpu, "--gpu", "a list only with --fleet")
    try:
        kv = kv_from_args(args, sized_option(args, "gpu", "measured_gpu", "measured_cpu"))
        gpu = LAB_GPU if given is None else capacity_tokens(given, kv, args.block_size, "--gpu")
        args = derive(args, gpu=gpu,                # tokens from here on (run_options)
                      measured_gpu_tokens=capacity_tokens(args.measured_gpu, kv,
                                                          args.block_size, "--measured-gpu"),
                      measured_cpu_tokens=capacity_tokens(args.measured_cpu, kv,
                                                          args.block_size, "--measured-cpu"))
        default = " (the lab's)" if given is None else ""
        gpu_given = (utilization["line"] if utilization is not None else
                     given.describe(kv) if given is not None and given.is_size else
                     f"{gpu:,} tokens{default} = {kv.bytes(gpu) / 2**30:.2f} GiB")
        if not model_given(args):
            gpu_given += f" (KV of the lab's model {kv.name}: no --model given)"
    except ValueError as exc:
        raise CLIError(str(exc) if str(exc).startswith("--") else f"--gpu: {exc}") from None
    workload, description, option = _workload(args)
    build = _evaluator_builder(args, workload, description, option)
    names = _pass_names(workload)
    chosen = _passes(args.passes_to_meet, len(names))
    target = (Target("ttft", args.target_ttft_ms, args.statistic, chosen)
              if args.target_ttft_ms is not None
              else Target("hit_ratio", args.target_hit_ratio, args.statistic, chosen))
    if args.latency is not None:
        from pipeline.plan.fitted import fitted_plan
        return fitted_plan(args, kv, gpu, gpu_given, build, names, target)
    models, measured, source, synthetic = _models(args)
    if args.report is not None and not args.report.parent.is_dir():
        raise CLIError(f"--report: folder {args.report.parent} does not exist")
    evaluator = build(gpu, models)
    found = measured_kv(source, synthetic)
    withheld = ttft_problem(kv, found, models, measured, args.measured_tokens,
                            evaluator.requests_frame["context"])
    result = backed_plan(evaluator, target, withheld)
    errors = residuals_by_pass(measured, models)
    if args.report is not None:
        _write_report(args, evaluator, kv, target, result, errors, names, gpu,
                      f"{source} ({'SYNTHETIC stand-in' if synthetic else 'real measurement'})",
                      withheld)
    cpu_tokens = result.cpu_tokens
    document = {
        **document_head(evaluator.description, kv, gpu, gpu_given, target, names),
        **models_fields(evaluator),
        "measured": {"path": source, "synthetic": synthetic,
                     "worst_error_pct": {"p50": errors["error_p50_pct"].abs().max(),
                                         "mean": errors["error_mean_pct"].abs().max()},
                     "per_pass": errors.to_dicts()},
        "models": {config: model_json(model, found.bytes_per_token)
                   for config, model in models.items()},
        **answer_fields(result, cpu_tokens, kv),
    }
    lines = [line for config, model in models.items()
             for line in model_lines(config, model, found.bytes_per_token)]
    return print_document(document, withheld, args.json, lines, result, target, names,
                          args.verbose)


if __name__ == "__main__":
    import sys

    from pipeline.cli import run_command

    sys.exit(run_command("plan"))
