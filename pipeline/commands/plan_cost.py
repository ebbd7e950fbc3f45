"""``plan --fleet --cost``: aggregated and disaggregated fleets in one search, the
cheapest per router, the other kind's best as the runner-up and why it loses, and the
price/TTFT frontier page."""

from __future__ import annotations

import argparse

import polars as pl

from pipeline.base.arguments import Options, derive
from pipeline.charts.cost import cost_page, frontier_section
from pipeline.fleet.cost import cost_requested
from pipeline.fleet.cost_search import KINDS, SearchResult, closest_miss, frontier
from pipeline.fleet.plan import Targets

__all__ = ["both_kinds", "best_of_kinds", "with_search", "frontier_page", "search_lines"]


def both_kinds(args: argparse.Namespace) -> tuple[Options, list[int]]:
    """(the options with ``--instances`` set aside, its instance counts) when a cost plan
    gives both ``--instances`` and ``--prefill-instances``: both kinds are searched; else
    (the options, [])."""
    if cost_requested(args) and args.instances is not None \
            and args.prefill_instances is not None:
        return derive(args, instances=None), list(args.instances)
    return args, []


def best_of_kinds(answers: pl.DataFrame) -> pl.DataFrame:
    """Per router and load: the cheaper kind's answer (a row of nulls when neither kind
    meets the target)."""
    ranked = answers.sort("usd_per_hour", "instances", "total_tokens", nulls_last=True,
                          maintain_order=True)          # ties: the setup searched first
    return ranked.group_by("router", "load", maintain_order=True).first().sort("load")


def _brief(row: dict) -> dict:
    keys = ("kind", "gpu_type", "instances", "decode_instances", "gpu_blocks", "cpu_tokens",
            "tier", "usd_per_hour",
            "usd_per_million_output_tokens", "ttft_p90_ms", "tpot_p90_ms", "hit_ratio",
            "goodput_fraction")
    return {key: row.get(key) for key in keys}


def with_search(document: dict, search: SearchResult, targets: Targets) -> dict:
    """The plan document with the search's counts, each answer's kind, the other kind's
    best (``runner_up``, with ``why`` it loses) and, where nothing meets the target, the
    ``closest`` miss."""
    answers = search.answers
    for answer in document["answers"]:
        mine = answers.filter(pl.col("router") == answer["router"]).to_dicts()
        priced = sorted((r for r in mine if r.get("usd_per_hour") is not None),
                        key=lambda r: (r["usd_per_hour"], r["instances"], r["total_tokens"]))
        chosen = priced[0] if priced and answer["status"] == "met" else None
        answer["kind"] = None if chosen is None else chosen["kind"]
        kinds = {r["kind"] for r in mine}
        if chosen is not None and len(kinds) > 1:
            other = [r for r in priced if r["kind"] != chosen["kind"]]
            if other:
                runner = other[0]
                why = (f"costs ${runner['usd_per_hour'] - chosen['usd_per_hour']:,.2f} per "
                       f"hour more")
                answer["runner_up"] = {**_brief(runner), "why": why}
            else:
                kind = next(k for k in kinds if k != chosen["kind"])
                near = closest_miss(search.fleet.filter(pl.col("kind") == kind)
                                    if search.fleet.height else search.fleet,
                                    answer["router"], targets)
                answer["runner_up"] = {
                    "kind": kind, "why": "no point of this kind meets the target",
                    "closest": None if near is None else _brief(near)}
        elif chosen is not None:
            answer["runner_up"] = None
        if answer["status"] != "met":
            near = closest_miss(search.fleet, answer["router"], targets)
            answer["closest"] = None if near is None else _brief(near)
    document["search"] = {"planned": search.planned, "simulated": search.simulated,
                          "pruned": search.pruned, "not_fitting": search.unfit,
                          "kinds": [k for k in KINDS if k in set(answers["kind"].to_list())]}
    return document


def search_lines(document: dict) -> list[str]:
    """The text lines a cost plan adds under each answer, then the counts."""
    lines = []
    for answer in document["answers"]:
        runner, near = answer.get("runner_up"), answer.get("closest")
        if runner:
            if runner.get("usd_per_hour") is not None:
                lines.append(f"  {answer['router']}: runner-up ({runner['kind']}): "
                             f"{_engines(runner)} x {runner['gpu_blocks']:,} blocks, "
                             f"${runner['usd_per_hour']:,.2f}/hour: {runner['why']}")
            else:
                closest = runner.get("closest")
                tail = "" if closest is None else (
                    f" (closest: {_engines(closest)} x {closest['gpu_blocks']:,} blocks, "
                    f"TTFT p90 {closest['ttft_p90_ms']:,.2f} ms{_tpot(closest)}, hit ratio "
                    f"{closest['hit_ratio']:.3f}, ${closest['usd_per_hour']:,.2f}/hour)")
                lines.append(f"  {answer['router']}: runner-up ({runner['kind']}): "
                             f"{runner['why']}{tail}")
        if near:
            lines.append(f"  {answer['router']}: closest miss: {_engines(near)} x "
                         f"{near['gpu_blocks']:,} blocks, TTFT p90 {near['ttft_p90_ms']:,.2f} "
                         f"ms{_tpot(near)}, hit ratio {near['hit_ratio']:.3f}, "
                         f"${near['usd_per_hour']:,.2f}/hour")
    search = document["search"]
    cpu = search.get("cpu_s_per_simulation")
    lines.append(f"search: {search['simulated']} of {search['planned']} points simulated "
                 f"({search['pruned']} priced above an answer of their router and kind, "
                 f"{search['not_fitting']} not fitting one GPU), cheapest first"
                 + ("" if cpu is None else f"; {cpu:.2f} s of process CPU per simulation"))
    return lines


def _tpot(row: dict) -> str:
    return "" if row.get("tpot_p90_ms") is None else f", TPOT p90 {row['tpot_p90_ms']:,.2f} ms"


def _engines(row: dict) -> str:
    gpu = f" {row['gpu_type']}" if row.get("gpu_type") else ""
    tier = (f" (+ tier {row['tier']})" if ":" in (row.get("tier") or "")   # a stack, native
            else f" (+ CPU {row['cpu_tokens']:,} tokens)" if row.get("cpu_tokens") else "")
    if row.get("kind") == "disaggregated":
        return f"({row['instances']} prefill + {row['decode_instances']} decode){gpu}{tier}"
    return f"{row['instances']}{gpu}{tier}"


def frontier_page(search: SearchResult, target_ms: float | None, workload) -> str:
    """The HTML page of every simulated configuration's price against TTFT p90."""
    synthetic = ("The workload is synthetic (a --pattern)." if workload.label.startswith(
        "--pattern") else f"Workload: {workload.label}.")
    section = frontier_section(search.fleet, frontier(search.fleet), target_ms,
                               synthetic + " TTFT comes from the step-time model named in "
                               "the plan's output.")
    return cost_page(section, f"{search.simulated} of {search.planned} configurations "
                     f"simulated, cheapest first; the rest cost more than an answer or do "
                     f"not fit one GPU.")
