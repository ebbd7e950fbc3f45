"""``--tier``: LMCache's tier stack on the command line (``pipeline.components.lmcache_stack``).

``--tier cpu:SIZE[:GBPS[:LATENCY_MS]] --tier disk:SIZE:GBPS:LATENCY_MS
--tier remote:SIZE:GBPS:LATENCY_MS[:shared]``, repeatable, in LMCache's order: the CPU tier
first (LMCache's disk and remote backends need its memory as their buffer), then the disk,
then the remote store, each once. SIZE as ``--cpu`` takes it, with a unit (``20GiB``,
``56000tokens``, ``512blocks``); GBPS in GB/s (10^9 bytes per second); LATENCY_MS in ms per
load. The CPU tier's link defaults to a measured figure (``CPU_LINK_GBPS``, labelled with its
source); the disk and remote tiers have no default. Any problem is one line naming the option
(exit 2).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import partial

from pipeline.components.lmcache import DEFAULT_CHUNK_SIZE
from pipeline.base.errors import UsageError
from pipeline.components.lmcache_stack import (CPU_LINK_GBPS, CPU_LINK_SOURCE, POLICIES,
                                              LMCacheStack, Tier)
from pipeline.sizes.units import BLOCKS, Capacity, kv_from_args, parse_capacity

__all__ = ["TierSpec", "tier_spec", "add_tier_arguments", "tier_stack_factory",
           "stack_models_line", "stack_lines", "check_stack_pricing", "stack_chunk", "ORDER"]

ORDER = ("cpu", "disk", "remote")
_FORMS = {"cpu": "cpu:SIZE[:GBPS[:LATENCY_MS]]", "disk": "disk:SIZE:GBPS:LATENCY_MS",
          "remote": "remote:SIZE:GBPS:LATENCY_MS[:shared]"}


@dataclass(frozen=True)
class TierSpec:
    """One ``--tier`` as given: its text, kind, capacity, GB/s, latency ms, shared."""

    text: str
    kind: str
    size: Capacity
    gbps: float
    latency_ms: float
    shared: bool = False


def _number(text: str, what: str, suffixes: tuple[str, ...], positive: bool) -> float:
    cleaned = text.strip().lower()
    for suffix in suffixes:
        if cleaned.endswith(suffix):
            cleaned = cleaned[:-len(suffix)].strip()
            break
    try:
        value = float(cleaned)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(f"{what} must be {'> 0' if positive else '>= 0'}, "
                                         f"got {text!r}")
    return value


def tier_spec(text: str) -> TierSpec:
    """argparse type of ``--tier`` (see the module docstring)."""
    parts = text.split(":")
    kind = parts[0].strip().lower()
    if kind not in _FORMS:
        raise argparse.ArgumentTypeError(f"{text!r}: a tier is cpu, disk or remote "
                                         f"({', '.join(_FORMS.values())})")
    shared = len(parts) > 1 and parts[-1].strip().lower() == "shared"
    if shared:
        if kind != "remote":
            raise argparse.ArgumentTypeError(f"{text!r}: only a remote store is shared")
        parts = parts[:-1]
    fields = parts[1:]
    wanted = (1, 3) if kind == "cpu" else (3, 3)
    if not wanted[0] <= len(fields) <= wanted[1] or any(not f.strip() for f in fields):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {_FORMS[kind]} (SIZE with a "
                                         f"unit, GBPS in GB/s, LATENCY_MS in ms)")
    try:
        size = parse_capacity(fields[0])
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: SIZE: {exc}") from None
    if size.unit is None and not fields[0].strip().lower().endswith(("tokens", "token", "tok")):
        raise argparse.ArgumentTypeError(f"{text!r}: SIZE {fields[0]!r} needs a unit (20GiB, "
                                         f"56000tokens, 512blocks)")
    if size.count <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: SIZE must be > 0")
    gbps = _number(fields[1], f"{text!r}: GBPS", ("gb/s", "gbps"), True) \
        if len(fields) > 1 else CPU_LINK_GBPS
    latency = _number(fields[2], f"{text!r}: LATENCY_MS", ("ms",), False) \
        if len(fields) > 2 else 0.0
    return TierSpec(text, kind, size, gbps, latency, shared)


def add_tier_arguments(group) -> None:
    """``--tier`` (repeatable) in the engine's option group."""
    group.add_argument(
        "--tier", dest="tiers", type=tier_spec, action="append", default=None,
        metavar="KIND:SIZE:GBPS:LATENCY_MS",
        help="LMCache's tier stack instead of --cpu, repeatable in LMCache's order: "
             f"{_FORMS['cpu']}, then {_FORMS['disk']}, then {_FORMS['remote']}; SIZE with a "
             f"unit as --cpu takes it, GBPS in GB/s, LATENCY_MS per load; loads are "
             f"synchronous in the step (bytes / GBPS + latency per tier). The CPU link "
             f"defaults to {CPU_LINK_GBPS:g} GB/s ({CPU_LINK_SOURCE}). Needs --model for the "
             f"bytes per token")
    group.add_argument(
        "--tier-policy", choices=list(POLICIES), default=None,
        help="LMCache's cache_policy of the --tier stack's CPU and disk tiers (default lru; "
             "the remote store evicts as its server: LRU)")


def check_tiers(specs: list[TierSpec], *, fleet: bool) -> None:
    """A usage error naming the ``--tier`` for an order LMCache cannot have or a shared store
    outside a fleet."""
    kinds = [spec.kind for spec in specs]
    for i, spec in enumerate(specs):
        if spec.kind in kinds[:i]:
            raise UsageError(f"--tier {spec.text}: a second {spec.kind} tier (LMCache has one "
                             f"of each: cpu, then disk, then remote)")
        if i == 0 and spec.kind != "cpu":
            raise UsageError(f"--tier {spec.text}: the cpu tier comes first (LMCache's disk "
                             f"and remote backends use its memory as their buffer)")
        if i and ORDER.index(spec.kind) < ORDER.index(kinds[i - 1]):
            raise UsageError(f"--tier {spec.text}: after {kinds[i - 1]} (LMCache looks up "
                             f"cpu, then disk, then remote)")
        if spec.shared and not fleet:
            raise UsageError(f"--tier {spec.text}: a shared remote store needs a fleet "
                             f"(the fleet command's instances share it)")


def tier_stack_factory(args: argparse.Namespace, chunk_size: int, *, fleet: bool = False):
    """A picklable factory of fresh ``LMCacheStack``s as ``--tier`` asks, or None without
    it; a usage error (one line naming the option) on bad input or with ``--cpu``."""
    specs = getattr(args, "tiers", None)
    if not specs:
        if getattr(args, "tier_policy", None) is not None:
            raise UsageError("--tier-policy: it is the --tier stack's policy; give --tier")
        return None
    if getattr(args, "cpu", 0):
        raise UsageError("--tier: give the CPU tier as --tier cpu:SIZE, not with --cpu")
    if getattr(args, "cpu_shared", False):
        raise UsageError("--cpu-shared: with --tier each instance has its own CPU tier; share "
                         "a remote store with --tier remote:SIZE:GBPS:LATENCY_MS:shared")
    if getattr(args, "engine", None) not in (None, "vllm"):
        raise UsageError(f"--tier: LMCache's stack runs under vLLM's engine, not --engine "
                         f"{args.engine}")
    if getattr(args, "cpu_tier_model", None) not in (None, "lmcache"):
        raise UsageError(f"--tier: the tier stack is LMCache's; --cpu-model "
                         f"{args.cpu_tier_model} is not")
    check_tiers(specs, fleet=fleet)
    try:
        kv = kv_from_args(args, f"--tier {specs[0].text}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    tiers = []
    for spec in specs:
        tokens = spec.size.tokens(kv, args.block_size) if spec.size.unit != BLOCKS \
            else int(spec.size.count) * args.block_size
        if tokens < chunk_size:
            raise UsageError(f"--tier {spec.text}: {tokens:,} tokens hold no chunk of "
                             f"{chunk_size} tokens")
        tiers.append(Tier(spec.kind, tokens, spec.gbps, spec.latency_ms, spec.shared))
    return partial(LMCacheStack, tuple(tiers), args.block_size, float(kv.bytes_per_token),
                   chunk_size, policy=args.tier_policy or "lru")


def stack_models_line(args: argparse.Namespace, options: dict) -> str:
    """The answer's first line with ``--tier``: vLLM's allocator, then LMCache's stack."""
    from pipeline import catalog as registry
    tiers = ", then ".join(
        f"{spec.kind} {spec.size.text} at {spec.gbps:g} GB/s + {spec.latency_ms:g} ms"
        + (" (shared)" if spec.shared else "") for spec in args.tiers)
    line = registry.models_line("vllm", None, None, options).split(", CPU ")[0]
    policy = f", {args.tier_policy.upper()}" if getattr(args, "tier_policy", None) else ""
    return (f"{line}, tiers LMCache 0.5.6 stack (chunks of {options.get('chunk_size')} "
            f"tokens{policy}): {tiers}; loads synchronous in the step")


def stack_lines(requests) -> list[str]:
    """The tokens each tier served and the loads' time, for a run with ``--tier`` (its
    requests frame has ``disk_hit_tokens`` and ``load_ms``); none otherwise (native
    offloading writes ``load_ms`` too, without the stack's tiers)."""
    if not {"load_ms", "disk_hit_tokens"} <= set(requests.columns):
        return []
    disk, remote = int(requests["disk_hit_tokens"].sum()), int(requests["remote_hit_tokens"].sum())
    cpu = int(requests["cpu_hit_tokens"].sum()) - disk - remote
    loads = requests["load_ms"]
    loaded = loads.filter(loads > 0)
    line = (f"tier loads: cpu {cpu:,} tokens, disk {disk:,}, remote {remote:,}; "
            f"{float(loads.sum()) / 1e3:,.3g} s of loads in all")
    if loaded.len():
        line += (f", per loading request p50 / p90 {float(loaded.quantile(0.5)):,.3g} / "
                 f"{float(loaded.quantile(0.9)):,.3g} ms")
    return [line]


def check_stack_pricing(args: argparse.Namespace, model) -> None:
    """A usage error when ``--tier`` runs on the time clock with a step model that is not
    compiled: the stack's loads are priced in the compiled loop only."""
    from pipeline.engine.compiled import compiled_model
    if getattr(args, "tiers", None) and model is not None and \
            compiled_model(model.step_ms) is None:
        raise UsageError(f"--tier: its loads are priced in the compiled loop, and the step "
                         f"model {type(model).__name__} is not compiled (roofline or fitted)")


def stack_chunk(given, block_size: int) -> int:
    """LMCache's chunk for a tier stack: ``given`` (``--chunk-size``/``--cpu-chunk-size``)
    or the larger of LMCache's default and the block; a usage error when it is not whole
    blocks."""
    chunk = int(given or max(DEFAULT_CHUNK_SIZE, block_size))
    if chunk % block_size:
        raise UsageError(f"--chunk-size {chunk}: a multiple of the block size {block_size}")
    return chunk
