"""What ``plan`` prints: the JSON document's parts and the text rendering of it."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import polars as pl

from pipeline.sizes.units import KVSize, size_up
from pipeline.base.errors import CLIError
from pipeline.plan.search import Evaluator, PlanResult, Target, plan
from pipeline.ttft.model import TTFTModel

__all__ = ["exit_status", "document_head", "tokens_and_size", "size_up", "lmcache_setting",
           "model_json", "describe_target",
           "model_lines", "finite", "render_text"]

TIER_WORDS = {"gpu": "GPU hit", "cpu": "CPU reload", "miss": "recompute"}


def tokens_and_size(tokens: int, kv: KVSize, at_least: bool = False) -> dict:
    """Tokens, bytes, GiB and GB (4 decimals; rounded up when the size answers "at least",
    so that every unit holds the tokens)."""
    size = kv.bytes(tokens)
    if at_least:
        return {"tokens": tokens, "bytes": size, "GiB": size_up(size, 2**30, 4),
                "GB": size_up(size, 10**9, 4)}
    return {"tokens": tokens, "bytes": size, "GiB": round(size / 2**30, 4),
            "GB": round(size / 1e9, 4)}


def document_head(description: str, kv: KVSize, gpu: int, gpu_given: str, target: Target,
                  names: list[str]) -> dict:
    """The workload, KV size, GPU and target parts of plan's JSON document."""
    return {
        "workload": description,
        "kv": {"name": kv.name, "bytes_per_token": kv.bytes_per_token, "formula": kv.formula,
               "source": kv.source, "describe": kv.describe()},
        "gpu": {**tokens_and_size(gpu, kv), "given": gpu_given},
        "target": {"kind": target.kind, "value": target.value, "statistic": target.statistic,
                   "passes": [names[i] for i in target.passes]},
    }


def models_fields(evaluator: Evaluator) -> dict:
    """The cache models of a plan document: ``cache_models`` ({"gpu": ..., "cpu": ...}; plan's
    ``models`` are its TTFT models) and the text's first line (``print_document`` takes it
    out of the JSON)."""
    return {"cache_models": evaluator.cache_models, "cache_models_line": evaluator.models_line}


def lmcache_setting(tokens: int, kv: KVSize) -> float:
    """max_local_cpu_size that holds ``tokens`` (its "GB" are 2^30 bytes), rounded up."""
    return size_up(kv.bytes(tokens), 2**30, 2)


def model_json(model: TTFTModel, bytes_per_token: int) -> dict:
    """A model as JSON; its reload bandwidth at the measured KV ``bytes_per_token``."""
    bandwidth = model.reload_bandwidth_gbps(bytes_per_token)
    return {"method": model.method, "requests": model.n, "params": model.params,
            "stderr": model.stderr, "tier_ms": model.tier_ms, "tier_stderr": model.tier_stderr,
            "reference_tokens": model.reference_tokens,
            "reload_bandwidth_gbps": None if bandwidth is None else
            {"value": bandwidth[0], "stderr": bandwidth[1]},
            "not_exercised": list(model.not_exercised),
            "not_identifiable": list(model.not_identifiable), "notes": list(model.notes)}


def describe_target(target: Target, names: list[str]) -> str:
    chosen = ", ".join(names[i] for i in target.passes)
    if target.kind == "ttft":
        return f"predicted {target.statistic} TTFT <= {target.value:g} ms in {chosen}"
    return f"cache hit ratio >= {target.value:g} in {chosen}"


def model_lines(config: str, model: TTFTModel, bytes_per_token: int) -> list[str]:
    """The text lines of one config's model; the reload bandwidth at the measured KV
    ``bytes_per_token``."""
    label = {"baseline": "baseline (GPU only)", "lmcache": "lmcache (GPU + CPU)"}.get(config,
                                                                                       config)
    if model.method == "least squares":
        parts = ", ".join(f"{name} {model.params[name]:.4g} +- {model.stderr[name]:.2g}"
                          for name in model.params)
    else:
        parts = ", ".join(f"{TIER_WORDS[tier]} {ms:.1f} +- {model.tier_stderr.get(tier, 0):.1f}"
                          f" ms" for tier, ms in sorted(model.tier_ms.items(),
                                                        key=lambda item: item[1]))
        parts = f"medians at {model.reference_tokens:,} tokens: {parts}"
    lines = [f"  {label}, {model.method} over {model.n} requests: {parts}"]
    bandwidth = model.reload_bandwidth_gbps(bytes_per_token)
    if bandwidth and config != "baseline":
        lines.append(f"    effective CPU reload bandwidth {bandwidth[0]:.1f} +- {bandwidth[1]:.1f}"
                     f" GB/s at {bytes_per_token:,} bytes per token")
    lines += [f"    {note}" for note in model.notes]
    return lines


def finite(value: object) -> object:
    """``value`` with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def _figure_rows(result: PlanResult) -> list[dict]:
    below = result.below.rows(named=True) if result.below is not None else [None] * \
        result.figures.height
    return [{"pass": row["pass_name"], "at": row, "below": low}
            for row, low in zip(result.figures.rows(named=True), below)]


def _model_text(document: dict, verbose: bool) -> list[str]:
    """The TTFT model's lines: the model per config and its error; its notes (indented
    deeper) only when ``verbose``."""
    measured = document["measured"]
    if measured.get("step_time"):                   # plan --latency: a step-time model
        lines = [f"TTFT model: fitted step time from {measured['path']}:"
                 if measured.get("fitted") else f"TTFT model: step time {measured['path']}:"]
    else:
        lines = [f"TTFT model from {measured['path']}"
                 f"{' (SYNTHETIC stand-in)' if measured['synthetic'] else ''}:"]
    lines += [line for line in document["model_lines"]
              if verbose or not line.startswith("    ")]
    if not measured.get("step_time"):
        worst = measured["worst_error_pct"]
        lines.append(f"  predicted vs measured per pass: worst error {worst['p50']:.1f} % "
                     f"(p50), {worst['mean']:.1f} % (mean)")
    return lines


def render_text(document: dict, result: PlanResult, target: Target, names: list[str],
                verbose: bool = False) -> str:
    """The text answer: what bears on the question (the workload, sizes, target, the TTFT
    model when it backs the figures, the answer and its figures); ``verbose`` adds the
    model's notes, the model even when TTFT is withheld, and the search."""
    kv, answer = document["kv"], document["answer"]
    lines = [f"workload: {document['workload']}",
             f"KV size: {kv['describe']}",
             f"GPU KV cache: {document['gpu']['given']}",
             f"target: {describe_target(target, names)}"]
    if verbose or not document.get("ttft_withheld"):
        lines += _model_text(document, verbose)
    lines.append("")
    cpu = answer["cpu"]
    if answer["status"] == "gpu_alone":
        lines.append(f"answer: no CPU tier needed: the GPU alone ({document['gpu']['tokens']:,} "
                     f"tokens) already meets it")
    elif answer["status"] == "unreachable":
        lines.append(f"answer: NO CPU size can meet it: even {cpu['tokens']:,} tokens = "
                     f"{size_up(cpu['bytes'], 2**30, 2):.2f} GiB (every CPU hit this workload "
                     f"can get) falls short")
    else:
        lines.append(f"answer: a CPU tier of {cpu['tokens']:,} tokens = "
                     f"{size_up(cpu['bytes'], 2**30, 2):.2f} GiB "
                     f"({size_up(cpu['bytes'], 10**9, 2):.2f} GB; GiB = 2^30 bytes, GB = 10^9 "
                     f"bytes)")
        lines.append(f"  LMCache: max_local_cpu_size: {answer['lmcache_max_local_cpu_size']:.2f}"
                     f" (LMCache's GB are 2^30 bytes)")
    if verbose:
        lines.append(f"  ({result.search}; {result.evaluations} evaluations)")
    if document.get("ttft_withheld"):
        more = "" if verbose else " (--verbose: the TTFT model)"
        lines.append(f"TTFT withheld: {document['ttft_withheld']}; the figures are hit "
                     f"ratios only{more}")
    columns = [f"CPU {cpu['tokens']:,} tokens"]
    if result.below is not None:
        columns.append(f"CPU {cpu['tokens'] - 1:,} tokens (one below)")
    lines.append(("\n" + f"{'':<14}" + "".join(f"  {title:<29}" for title in columns)).rstrip())
    lines.append((f"{'pass':<14}" + "  p50 ms  mean ms  hit ratio  " * len(columns)).rstrip())
    for row in _figure_rows(result):
        cells = [row["at"]] + ([row["below"]] if row["below"] else [])
        lines.append(f"{row['pass']:<14}" + "".join(
            f"{_num(c['p50_ms'], 8, 1)}{_num(c['mean_ms'], 9, 1)}{_num(c['hit_ratio'], 11, 4)}  "
            for c in cells).rstrip())
    return "\n".join(lines)


def answer_fields(result: PlanResult, cpu_tokens: int, kv: KVSize) -> dict:
    """The answer and the figures at it (and one token below) of a plan document."""
    return {
        "answer": {"status": result.status,
                   "cpu": tokens_and_size(cpu_tokens, kv, at_least=True),
                   "lmcache_max_local_cpu_size": lmcache_setting(cpu_tokens, kv),
                   "search": result.search, "evaluations": result.evaluations},
        "figures": result.figures.to_dicts(),
        "figures_one_token_below": None if result.below is None else result.below.to_dicts(),
    }


def exit_status(status: str) -> int:
    """``plan``'s exit status for an answer's status: 1 when no size searched meets the
    target (``unreachable``; the answer is printed all the same), else 0."""
    return 1 if status == "unreachable" else 0


def print_document(document: dict, withheld: str | None, as_json: bool, lines: list[str],
                   result: PlanResult, target: Target, names: list[str],
                   verbose: bool = False) -> int:
    """Print a plan document as JSON (complete) or as text (``render_text``: with its model
    lines); the exit status (``exit_status``)."""
    if withheld is not None:
        document["ttft_withheld"] = withheld
    first = document.pop("cache_models_line", None)
    if as_json:
        print(json.dumps(finite(document), indent=2, allow_nan=False))
        return exit_status(result.status)
    document["model_lines"] = lines
    if first is not None:
        print(first)
    print(render_text(document, result, target, names, verbose))
    return exit_status(result.status)


def without_ttft(result: PlanResult) -> PlanResult:
    """``result`` with its predicted TTFT columns emptied (TTFT withheld)."""
    def clear(figures: pl.DataFrame | None) -> pl.DataFrame | None:
        return None if figures is None else figures.with_columns(
            pl.lit(None, pl.Float64).alias("p50_ms"), pl.lit(None, pl.Float64).alias("mean_ms"))
    return replace(result, figures=clear(result.figures), below=clear(result.below))


def backed_plan(evaluator: Evaluator, target: Target, withheld: str | None) -> PlanResult:
    """The plan for ``target``, its TTFT columns emptied when TTFT is ``withheld`` (the
    reason); a TTFT target is refused then."""
    if withheld is not None and target.kind == "ttft":
        raise CLIError(f"--target-ttft-ms: TTFT withheld: {withheld}; ask for "
                       f"--target-hit-ratio instead")
    result = plan(evaluator, target)
    return result if withheld is None else without_ttft(result)
