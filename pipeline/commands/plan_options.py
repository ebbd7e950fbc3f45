"""``plan``'s options, and which of them each of its modes refuses (``refuse_unused``)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from pipeline.base.arguments import Parser, add_document_arguments, non_negative_int, \
    positive_float, positive_int, unit_ratio
from pipeline.base.config import LAB_CPU, LAB_DOCS, LAB_GPU, LAB_TOKENS, REAL_MEASURED
from pipeline.base.errors import UsageError
from pipeline.sizes.units import add_kv_arguments, capacities, capacity
from pipeline.sizes.vllm_memory import add_memory_arguments
from pipeline.catalog.model_options import add_model_arguments, add_order_arguments
from pipeline.commands.plan_fleet import add_fleet_plan_arguments
from pipeline.workloads.sources import add_input_arguments
from pipeline.plan.load import add_load_plan_arguments, add_tpot_target
from pipeline.plan.tiers import add_tier_plan_arguments

__all__ = ["MODES", "add_arguments", "pass_choice", "refuse_unused"]


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
