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
import functools
import html
from collections.abc import Callable
from pathlib import Path

import polars as pl

from kvlab import make_exports
from pipeline.base.arguments import Parser, add_document_arguments, derive, non_negative_int, \
    positive_float, positive_int, unit_ratio
from pipeline.base.config import LAB_CPU, LAB_DOCS, LAB_GPU, LAB_TOKENS, REAL_MEASURED
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.units import KVSize, add_kv_arguments, capacities, capacity, \
    capacity_tokens, kv_from_args, model_given, one_of, sized_option
from pipeline.sizes.vllm_memory import add_memory_arguments, gpu_from_utilization
from pipeline.workloads.stream_limits import check_document_blocks
from pipeline.catalog.model_options import add_model_arguments, add_order_arguments, run_options
from pipeline.commands.plan_fleet import add_fleet_plan_arguments, fleet_plan, fleet_requested
from pipeline.sizes.limits import MAX_ACCESSES, check_count
from pipeline.plan.search import DocumentEvaluator, Evaluator, PlanResult, Target
from pipeline.plan.output import answer_fields, backed_plan, describe_target, document_head, \
    model_json, model_lines, models_fields, print_document
from pipeline.plan.blocks import BlockEvaluator
from pipeline.plan.policies import PolicyDocumentEvaluator
from pipeline.catalog import policy_names
from pipeline.base.staging import Outputs
from pipeline.workloads.sources import add_input_arguments, load_workload
from pipeline.plan.load import add_load_plan_arguments, add_tpot_target, plan_under_load
from pipeline.plan.tiers import add_tier_plan_arguments, tier_plan
from pipeline.plan.tier_ttft import tier_ttft_plan
from kvlab.kvsim import TIERS
from pipeline.ttft.model import FitError, TTFTModel, fit_configs, measured_requests, \
    model_for_capacity, residuals_by_pass
from pipeline.ttft.scope import measured_kv, ttft_problem
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.workload import Workload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``plan``."""
    target = parser.add_argument_group("target (one of)").add_mutually_exclusive_group(
        required=True)
    target.add_argument("--target-ttft-ms", type=positive_float, metavar="MS",
                        help="predicted TTFT (--statistic of a pass) at most MS")
    target.add_argument("--target-ttft-p90-ms", type=positive_float, metavar="MS",
                        help="TTFT p90 under a load (--speed/--rate/--concurrency, "
                             "--latency): the smallest GPU KV capacity, from the engine model")
    target.add_argument("--target-hit-ratio", type=unit_ratio, metavar="R",
                        help="share of prompt tokens served from cache (GPU or CPU), "
                             "at least R (0 < R <= 1)")
    parser.add_argument("--statistic", choices=("p50", "mean"), default="p50",
                        help="TTFT statistic of a pass (default %(default)s)")
    parser.add_argument("--pass", dest="passes_to_meet", type=pass_choice, default="warm",
                        metavar="WHICH",
                        help="passes that must meet it: warm (every pass after the first; "
                             "default), all, or 1-based numbers such as 2,3")
    parser.add_argument("--gpu", type=capacities, default=None, metavar="SIZE[,SIZE...]",
                        help=f"GPU KV capacity: tokens, blocks (1345blocks, of --block-size "
                             f"tokens) or a size with --model (0.6GiB, 20GiB, 200GB, 512MiB) "
                             f"(default: the lab's {LAB_GPU} tokens); one value, a list only "
                             f"with --fleet (the grid per instance)")
    add_kv_arguments(parser)
    work = parser.add_argument_group("workload (default: the lab's documents)")
    add_document_arguments(work)
    add_order_arguments(work)
    add_model_arguments(work)
    add_input_arguments(parser)
    add_load_plan_arguments(parser)
    fit = parser.add_argument_group("TTFT model")
    fit.add_argument("--measured", type=Path,
                     help=f"measured TTFT jsonl (default: {REAL_MEASURED} if present, else "
                          "the bundled synthetic data/ttft.jsonl)")
    fit.add_argument("--measured-gpu", type=capacity, default=str(LAB_GPU),
                     help="GPU capacity the measurement ran with: tokens, blocks or a size "
                          "with --model (default %(default)s)")
    fit.add_argument("--measured-cpu", type=capacity, default=str(LAB_CPU),
                     help="lmcache CPU capacity the measurement ran with: tokens, blocks "
                          "or a size with --model (default %(default)s)")
    fit.add_argument("--measured-tokens", type=non_negative_int, default=LAB_TOKENS,
                     help="simulator tokens per measured document (default %(default)s)")
    fit.add_argument("--measured-docs", type=positive_int, metavar="N",
                     help="documents the measurement read (default: its sidecar's, else the "
                          f"lab's {LAB_DOCS}); a request of a document beyond is refused")
    fit.add_argument("--latency", type=Path, metavar="FITTED",
                     help="TTFT from a fitted step-time file (python -m pipeline fit) instead "
                          "of --measured; printed only when its KV bytes per token (and "
                          "--served-model) match and its prompt range covers the workload")
    fit.add_argument("--served-model", metavar="NAME",
                     help="with --latency: the model planned for (TTFT is withheld when the "
                          "fitted file was fitted on another)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead "
                        "(always complete)")
    parser.add_argument("--verbose", action="store_true",
                        help="text: also print the TTFT model's fit (its notes, and the model "
                             "even when TTFT is withheld) and how the answer was searched")
    parser.add_argument("--report", type=Path, metavar="HTML",
                        help="also write a page with predicted TTFT against the CPU capacity "
                             "and the fit's error per pass (atomically)")
    add_memory_arguments(parser)
    add_fleet_plan_arguments(parser)
    add_tpot_target(parser)
    add_tier_plan_arguments(parser)


_MEASURED = ("measured_gpu", "measured_cpu", "measured_tokens", "measured_docs")
_DOCUMENTS = ("statistic", "passes_to_meet", "docs", "tokens", "passes", "gpu_order",
              "cpu_order", "verbose")
_LOAD = ("speed", "rate", "concurrency", "seed", "max_num_seqs")
_STEP_TIME = ("max_num_batched_tokens", "gpu_tflops", "gpu_fp8_tflops", "gpu_hbm_gbps",
              "host_link_gbps", "step_overhead_ms", "model_shape")
#: each mode of plan: (what the error calls it, the options it does not use, why); giving
#: one of them is a usage error naming it (``refuse_unused``)
MODES = {
    "fleet": ("--fleet", ("target_ttft_ms", "concurrency", "measured", "report",
                          "served_model", *_MEASURED, *_DOCUMENTS),
              "it plans for --target-ttft-p90-ms or --target-hit-ratio, loads by --speed"),
    "load": ("--target-ttft-p90-ms", ("measured", *_MEASURED, *_DOCUMENTS),
             "it sizes the GPU of an engine under a load, TTFT from --latency's step times"),
    "fitted": ("--latency", (*_LOAD, *_MEASURED, "target_tpot_p90_ms"),
               "TTFT from its step times, each request alone"),
    "measured": ("the measured TTFT model", ("served_model", *_LOAD, *_STEP_TIME,
                                             "target_tpot_p90_ms"),
                 "one request at a time; --target-ttft-p90-ms runs the engine under a load, "
                 "--served-model goes with --latency FITTED"),
}


@functools.cache
def _parsed_defaults() -> tuple[dict, dict]:
    """(dest -> default, dest -> flag) of plan's options, from a parser of its own."""
    template = Parser(add_help=False)
    add_arguments(template)
    flags = {a.dest: a.option_strings[0] for a in template._actions if a.option_strings}
    return vars(template.parse_args(["--target-hit-ratio", "1"])), flags


def refuse_unused(args: argparse.Namespace, mode: str) -> None:
    """A usage error (one line naming the option, exit 2) when an option that plan's
    ``mode`` (a key of ``MODES``) does not use was given a value other than its default."""
    name, unused, why = MODES[mode]
    defaults, flags = _parsed_defaults()
    for dest in unused:
        if getattr(args, dest) != defaults[dest]:
            raise UsageError(f"{flags[dest]}: not with {name} ({why})")


def pass_choice(text: str) -> str:
    """argparse type of ``--pass``: warm, all, or comma-separated pass numbers >= 1 (whether
    the workload has them is checked once it is built)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if text not in ("warm", "all") and (not parts or not all(
            part.isdigit() and int(part) >= 1 for part in parts)):
        raise argparse.ArgumentTypeError(f"expected warm, all or pass numbers >= 1 such as "
                                          f"2,3, got {text!r}")
    return text


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
