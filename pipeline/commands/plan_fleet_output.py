"""``plan --fleet``'s answer: its JSON document (``plan_document``) and that document as text
(``print_document``)."""

from __future__ import annotations

import argparse

import polars as pl

from pipeline.engine.options import engine_models
from pipeline.fleet.aggregates import OVERLOAD_COLUMNS, point_columns
from pipeline.sizes.units import KVSize
from pipeline.steptime.registry import name_of
from pipeline.steptime.roofline import roofline_caveat
from pipeline.commands.plan_cost import search_lines
from pipeline.fleet.cost_tiers import TierChoice

__all__ = ["plan_document", "print_document", "with_tier", "tier_models_lines"]


def with_tier(args: argparse.Namespace, tiers: list[TierChoice] | None) -> argparse.Namespace:
    """The options whose CPU tier names the cache models: the largest of ``--tier-options``
    when one is a tier."""
    tiered = [tier for tier in tiers or () if tier.kind != "none"]
    return tiered[-1].with_args(args) if tiered else args


def tier_models_lines(args: argparse.Namespace, tiers: list[TierChoice] | None) -> list[str]:
    """The answer's models lines: one per kind of CPU tier searched (its largest option,
    named when there are several kinds), the first as ``with_tier``'s."""
    tiered = [tier for tier in tiers or () if tier.kind != "none"]
    largest = {tier.kind: tier for tier in tiered}
    if len(largest) < 2:
        return [engine_models(with_tier(args, tiers))[0]]
    return [f"{engine_models(tier.with_args(args))[0]} (--tier-options {tier.text})"
            for tier in [tiered[-1]] + [tier for tier in largest.values()
                                        if tier is not tiered[-1]]]


def plan_document(args, workload, kv: KVSize, model, withheld: str | None, plan: pl.DataFrame,
              fleet: pl.DataFrame, load: float, prices=None, aggregated=(),
              tiers=None) -> dict:
    kind = "ttft_p90" if args.target_ttft_p90_ms is not None else "hit_ratio"
    value = args.target_ttft_p90_ms if kind == "ttft_p90" else args.target_hit_ratio
    point = list(point_columns(fleet)) + [tag for tag in ("gpu_type", "cpu_tier", "tier")
                                          if tag in fleet.columns and tag in plan.columns]
    plan = (plan.join(fleet.select(*point, "requests", *OVERLOAD_COLUMNS), on=point,
                      how="left") if fleet.height else   # a cost search that ran nothing
            plan.with_columns(pl.lit(None).alias(name)
                              for name in ("requests", *OVERLOAD_COLUMNS)))
    answers = []
    for row in plan.iter_rows(named=True):
        met = row["total_tokens"] is not None
        answers.append({
            "router": row["router"], "status": "met" if met else "unreachable",
            **({"decode_instances": row["decode_instances"]}
               if "decode_instances" in row else {}),
            **({"kind": row["kind"]} if "kind" in row else {}),
            **({"gpu_type": row["gpu_type"]} if "gpu_type" in row else {}),
            **({"tier": row["tier"]} if "tier" in row else {}),
            **{key: row[key] for key in ("instances", "gpu_blocks", "gpu_tokens",
                                         "cpu_tokens", "total_tokens", "total_gib",
                                         "hit_ratio", "ttft_p90_ms")},
            **({key: row[key] for key in ("tpot_p90_ms", "goodput_fraction") if key in row}),
            "total_bytes": kv.bytes(row["total_tokens"]) if met else None,
            # the answer's point under its simulated load (pipeline.engine.overload)
            "overloaded": bool(row["overloaded"]) if met else None,
            **{key: row[key] for key in ("offered_rate", "served_rate",
                                         "queue_at_last_arrival", "requests")},
            **({} if prices is None else {key: row[key] for key in (
                "usd_per_hour", "usd_per_million_output_tokens")})})
    extra = {} if prices is None else {"cost": {
        "gpu": prices.gpu, "gpu_usd_per_hour": prices.gpu_per_hour,
        "cpu_memory_usd_per_gib_hour": prices.cpu_per_gib_hour,
        "disk_usd_per_gib_hour": prices.disk_per_gib_hour, "sources": prices.sources,
        "points_fitting_gpu": int(fleet["fits_gpu"].sum()) if fleet.height else 0,
        "points": fleet.height}}
    return {
        "kind": "kvlab-fleet-plan", "version": 1,
        "cache_models": engine_models(with_tier(args, tiers))[1],
        "target": {"kind": kind, "value": value, **_tpot_target(args)},
        "workload": f"{workload.label}: {workload.size:,} requests",
        "kv": {"name": kv.name, "bytes_per_token": kv.bytes_per_token,
               "describe": kv.describe()},
        "ttft": {"source": name_of(model),
                 "step_time_model": model.label, "provenance": model.provenance,
                 "withheld": withheld},
        "grid": {"routers": args.router, "instances": args.instances,
                 **({} if args.kv_transfer is None else {
                     "decode_instances": args.decode_instances,
                     "decode_router": args.decode_router,
                     "kv_transfer": args.kv_transfer.describe(),
                     "pd_decider": (args.pd_decider.describe() if getattr(
                         args, "pd_decider", None) is not None else None),
                     "aggregated": aggregated}),
                 "gpu_blocks": args.gpu_blocks, "block_size": args.block_size,
                 "cpu_tokens": args.cpu, "cpu_shared": args.cpu_shared,
                 **({} if tiers is None else {
                     "cpu_tiers": [tier.cpu_tokens for tier in tiers],
                     "tier_options": [tier.as_dict() for tier in tiers]}),
                 "load": load},
        **extra,
        "answers": answers}


def _tpot_target(args: argparse.Namespace) -> dict:
    """The document's other targets: ``tpot_p90_ms`` (--target-tpot-p90-ms) and
    ``goodput`` with its SLOs (--target-goodput)."""
    found = {}
    if getattr(args, "target_tpot_p90_ms", None) is not None:
        found["tpot_p90_ms"] = args.target_tpot_p90_ms
    if getattr(args, "target_goodput", None) is not None:
        found.update(goodput=args.target_goodput, slo_ttft_ms=args.slo_ttft_ms,
                     slo_tpot_ms=args.slo_tpot_ms)
    return found


def print_document(document: dict) -> None:
    target, ttft, grid = document["target"], document["ttft"], document["grid"]
    wanted = (f"TTFT p90 <= {target['value']:g} ms" if target["kind"] == "ttft_p90"
              else f"hit ratio >= {target['value']:g}")
    cpu = ("no CPU tier" if not grid["cpu_tokens"] else
           f"CPU {'pool' if grid['cpu_shared'] else 'tier per instance'} "
           f"{grid['cpu_tokens']:,} tokens")
    options = {tier["text"]: TierChoice(**tier) for tier in grid.get("tier_options", ())}
    if options and {tier.kind for tier in options.values()} <= {"none", "lmcache"}:
        cpu = (f"CPU {'pool' if grid['cpu_shared'] else 'tier per instance'} " + " or ".join(
            f"{tokens:,} tokens" if tokens else "none" for tokens in grid["cpu_tiers"]))
    elif options:
        cpu = "tier per instance " + " or ".join(t.describe() for t in options.values())
    if "tpot_p90_ms" in target:
        wanted += f" and TPOT p90 <= {target['tpot_p90_ms']:g} ms"
    if "goodput" in target:
        slos = " and ".join(f"{name} <= {target[key]:g} ms" for name, key in (
            ("TTFT", "slo_ttft_ms"), ("TPOT", "slo_tpot_ms")) if target.get(key) is not None)
        wanted += f" and goodput >= {target['goodput']:g} ({slos})"
    cost = document.get("cost")
    goal = ("the cheapest point per router (USD per hour)" if cost else
            "the smallest total KV memory per router")
    print(f"target: {wanted} at load {grid['load']:g}, {goal}")
    print(f"workload: {document['workload']}")
    print(f"KV: {document['kv']['describe']}")
    bound = roofline_caveat(ttft["step_time_model"]) if ttft["source"] == "roofline" else ""
    types = list(((document.get("cost") or {}).get("gpu_types")) or ())
    if len(types) > 1 and ttft["source"] == "roofline":     # the label is the first type's
        bound += (f"; --gpu-types {','.join(types)}: each point timed on its own GPU's "
                  f"roofline")
    print(f"TTFT: {ttft['step_time_model']}{bound}" if ttft["withheld"] is None
          else f"TTFT: withheld: {ttft['withheld']}")
    engines = (f"instances {','.join(map(str, grid['instances']))}"
               if "decode_instances" not in grid else
               f"instances {','.join(map(str, grid['aggregated']))} or "
               f"prefill instances {','.join(map(str, grid['instances']))} x decode instances "
               f"{','.join(map(str, grid['decode_instances']))} ({grid['decode_router']} "
               f"router, KV over {grid['kv_transfer']})" if grid.get("aggregated") else
               f"prefill instances {','.join(map(str, grid['instances']))} x decode instances "
               f"{','.join(map(str, grid['decode_instances']))} ({grid['decode_router']} "
               f"router, KV over {grid['kv_transfer']})")
    print(f"grid: {engines} x GPU blocks per instance "
          f"{','.join(map(str, grid['gpu_blocks']))} ({grid['block_size']} tokens each), "
          f"{cpu}; the answer is the "
          + ("cheapest of these points that fits one GPU, then the least memory"
             if document.get("cost") else "smallest of these points"))
    for a in document["answers"]:
        if a["status"] != "met":
            print(f"  {a['router']}: no point of the grid meets it")
            continue
        engines = (f"({a['instances']} prefill + {a['decode_instances']} decode)"
                   if a.get("decode_instances") else str(a["instances"]))
        if a.get("gpu_type"):
            engines += f" {a['gpu_type']}"
        parts = f"{engines} x {a['gpu_blocks']:,} blocks"
        tier = options.get(a.get("tier"), next(iter(options.values()))
                           if len(options) == 1 else None)     # the engines' own tier
        if tier is not None and tier.kind in ("stack", "native"):
            parts += f" + {tier.describe()} per instance"
        elif a["cpu_tokens"]:
            parts += f" + CPU {a['cpu_tokens']:,} tokens"
        shown = (f", TTFT p90 {a['ttft_p90_ms']:,.2f} ms ({ttft['source']})"
                 if a["ttft_p90_ms"] is not None else "")
        if a.get("tpot_p90_ms") is not None:
            shown += f", TPOT p90 {a['tpot_p90_ms']:,.2f} ms"
        if a.get("goodput_fraction") is not None:
            shown += f", goodput {a['goodput_fraction']:.3f}"
        price = (f"; ${a['usd_per_hour']:,.2f}/hour, ${a['usd_per_million_output_tokens']:,.3f}"
                 f" per million output tokens" if cost else "")
        print(f"  {a['router']}: {a['total_tokens']:,} tokens = {a['total_gib']:.3f} GiB "
              f"({parts}); hit ratio {a['hit_ratio']:.3f}{shown}{price}")
    if "search" in document:
        for line in search_lines(document):
            print(line)
    if cost and cost.get("gpu_types"):
        print("GPU prices: " + ", ".join(f"{name} ${usd:g}/hour"
                                         for name, usd in cost["gpu_types"].items()))
    if cost:
        disk = any(tier.disk_tokens for tier in options.values())
        print(f"prices: {cost['gpu']} ${cost['gpu_usd_per_hour']:g}/hour, CPU memory "
              f"${cost['cpu_memory_usd_per_gib_hour']:g}/GiB-hour"
              + (f", disk ${cost['disk_usd_per_gib_hour']:g}/GiB-hour" if disk else "")
              + f" ({cost['sources']['gpu']}; {cost['sources']['cpu']}"
              + (f"; {cost['sources']['disk']}" if disk else "")
              + f"); {cost['points_fitting_gpu']} of {cost['points']} "
              f"points fit " + ("their GPU" if cost.get("gpu_types") else f"one {cost['gpu']}"))
