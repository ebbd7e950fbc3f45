"""The CPU tiers a cost search compares (``plan --fleet --cost --tier-options``): no tier,
LMCache's CPU backend of a size, LMCache's tier stack (CPU + disk, as ``--tier`` gives it)
or vLLM's native offloading of a size, each resolved to the engine options that build it
(``cpu``, ``tiers``, ``kv_offloading_size``) and to the memory it pays for per instance
(CPU tokens and disk tokens, priced per GiB-hour by ``pipeline.fleet.cost``).

One option is ``none``, ``SIZE`` (as ``--cpu`` takes it), ``native:SIZE`` (vLLM's
``--kv-offloading-size``, here in any unit ``--cpu`` takes), or ``--tier`` specs joined by
``+`` (``cpu:200GiB+disk:2TiB:5:0.2``: parsed by ``pipeline.engine.tier_options.tier_spec``,
in LMCache's order). A remote store is not searched: its memory is another machine's, with
no price here. Any problem is one line naming ``--tier-options`` (exit 2).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pipeline.base.arguments import derive
from pipeline.base.errors import UsageError
from pipeline.engine.tier_options import TierSpec, check_tiers, tier_spec
from pipeline.sizes.units import Capacity, KVSize, capacity_tokens, kv_from_args, \
    one_capacity

__all__ = ["TierOption", "TierChoice", "tier_option_list", "resolve_tier_options",
           "engine_tier_tokens", "engine_tier_choice", "TIER_KINDS"]

#: an option's kinds, in the order a grid line names them
TIER_KINDS = ("none", "lmcache", "stack", "native")


@dataclass(frozen=True)
class TierOption:
    """One ``--tier-options`` item as given: its text, kind, size (``lmcache``, ``native``)
    or specs (``stack``)."""

    text: str
    kind: str
    size: Capacity | None = None
    specs: tuple[TierSpec, ...] = ()


@dataclass(frozen=True)
class TierChoice:
    """One option resolved: CPU and disk tokens per instance (what it pays for) and the
    options that build it (``with_args``)."""

    text: str
    kind: str
    cpu_tokens: int
    disk_tokens: int = 0
    specs: tuple[TierSpec, ...] = ()
    offload_gib: float | None = None

    def with_args(self, args: argparse.Namespace) -> argparse.Namespace:
        """``args`` with this tier as the engine's only CPU tier."""
        return derive(args, cpu=self.cpu_tokens if self.kind == "lmcache" else 0,
                      tiers=list(self.specs) or None, tier_policy=None,
                      kv_offloading_size=self.offload_gib,
                      kv_offloading_backend="native" if self.offload_gib else None)

    def describe(self) -> str:
        """``CPU 8,192 tokens``, ``LMCache stack cpu:1GiB+disk:4GiB:5:0.2 (CPU ..., disk
        ...)``, ``vLLM native offloading 8,192 tokens`` or ``no tier``."""
        if self.kind == "stack":
            return (f"LMCache stack {self.text} (CPU {self.cpu_tokens:,} + disk "
                    f"{self.disk_tokens:,} tokens)")
        if self.kind == "native":
            return f"vLLM native offloading {self.cpu_tokens:,} tokens"
        return f"CPU {self.cpu_tokens:,} tokens" if self.cpu_tokens else "no tier"

    def as_dict(self) -> dict:
        return {"text": self.text, "kind": self.kind, "cpu_tokens": self.cpu_tokens,
                "disk_tokens": self.disk_tokens}


def _one(text: str) -> TierOption:
    if text.lower() == "none":
        return TierOption(text, "none")
    if text.lower().startswith("native:"):
        return TierOption(text, "native", one_capacity(text.split(":", 1)[1]))
    if ":" not in text:
        return TierOption(text, "lmcache", one_capacity(text))
    specs = tuple(tier_spec(part) for part in text.split("+"))
    remote = next((spec for spec in specs if spec.kind == "remote"), None)
    if remote is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: a remote store is not searched (its "
                                         f"memory is another machine's, not priced here)")
    try:
        check_tiers(list(specs), fleet=True)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return TierOption(text, "stack", specs=specs)


def tier_option_list(text: str) -> list[TierOption]:
    """argparse type of ``--tier-options``: comma-separated options (module docstring)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"empty tier list {text!r}")
    return [_one(item) for item in items]


def _tokens(size: Capacity, kv: KVSize | None, block_size: int, text: str) -> int:
    try:
        tokens = capacity_tokens(size, kv, block_size, f"--tier-options {text}")
    except ValueError as exc:
        raise UsageError(f"--tier-options {text}: {exc}") from None
    if tokens <= 0:
        raise UsageError(f"--tier-options {text}: the size must be > 0 (none: no tier)")
    return tokens


def resolve_tier_options(args: argparse.Namespace, options: list[TierOption]
                         ) -> list[TierChoice]:
    """Each option in tokens per instance (each tier once, no tier first, then by CPU and
    disk tokens); a usage error naming ``--tier-options`` on a size without a model, a size
    of nothing, or a tier the options already set (``--cpu``, ``--kv-offloading-size``)."""
    for dest, flag in (("cpu", "--cpu"), ("kv_offloading_size", "--kv-offloading-size"),
                       ("kv_offloading_backend", "--kv-offloading-backend")):
        if getattr(args, dest, None):
            raise UsageError(f"--tier-options: give the CPU sizes there, not {flag} too")
    kv = None
    if any(o.kind in ("stack", "native") or (o.size is not None and o.size.is_size)
           for o in options):
        first = next(o for o in options if o.kind != "none")
        try:
            kv = kv_from_args(args, f"--tier-options {first.text}")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if getattr(args, "cpu_shared", False) and any(o.kind in ("stack", "native")
                                                  for o in options):
        kind = next(o for o in options if o.kind in ("stack", "native"))
        raise UsageError(f"--tier-options {kind.text}: --cpu-shared shares one LMCache CPU "
                         f"pool; a stack or native offloading is each engine's own")
    found: dict[tuple, TierChoice] = {}
    for option in options:
        if option.kind == "none":
            choice = TierChoice(option.text, "none", 0)
        elif option.kind == "lmcache":
            choice = TierChoice(option.text, "lmcache",
                                _tokens(option.size, kv, args.block_size, option.text))
        elif option.kind == "native":
            tokens = _tokens(option.size, kv, args.block_size, option.text)
            gib = (option.size.size_bytes if option.size.is_size
                   else tokens * kv.bytes_per_token) / (1 << 30)
            choice = TierChoice(option.text, "native", tokens, offload_gib=gib)
        else:
            by_kind = {spec.kind: _tokens(spec.size, kv, args.block_size, option.text)
                       for spec in option.specs}
            choice = TierChoice(option.text, "stack", by_kind["cpu"], by_kind.get("disk", 0),
                                option.specs)
        key = (choice.kind, choice.cpu_tokens, choice.disk_tokens,
               tuple((s.kind, s.gbps, s.latency_ms) for s in choice.specs))
        found.setdefault(key, choice)
    return sorted(found.values(), key=lambda c: (c.cpu_tokens, c.disk_tokens,
                                                 TIER_KINDS.index(c.kind)))


def engine_tier_tokens(args: argparse.Namespace, kv_bytes_per_token: int | None
                       ) -> tuple[int, int]:
    """(CPU tokens, disk tokens) per engine of the CPU tier the engine options give:
    ``--cpu`` (in tokens by then), ``--tier``'s cpu and disk (a remote store is another
    machine's: not counted) or ``--kv-offloading-size`` (its GiB in tokens)."""
    specs = getattr(args, "tiers", None)
    if specs and kv_bytes_per_token:
        kv = KVSize("kv", kv_bytes_per_token, "")
        tokens = {spec.kind: spec.size.tokens(kv, args.block_size) for spec in specs}
        return tokens.get("cpu", 0), tokens.get("disk", 0)
    size = getattr(args, "kv_offloading_size", None)
    if size and kv_bytes_per_token:
        return int(size * (1 << 30)) // kv_bytes_per_token, 0
    return int(getattr(args, "cpu", 0) or 0), 0


def engine_tier_choice(args: argparse.Namespace, kv_bytes_per_token: int | None
                       ) -> TierChoice | None:
    """The engine options' own ``--tier`` stack or ``--kv-offloading-size`` as the one
    ``TierChoice`` a plan pays for (None for ``--cpu`` or no tier), as ``--tier-options``
    would name it."""
    cpu, disk = engine_tier_tokens(args, kv_bytes_per_token)
    if getattr(args, "tiers", None):
        return TierChoice("+".join(spec.text for spec in args.tiers), "stack", cpu, disk,
                          tuple(args.tiers))
    size = getattr(args, "kv_offloading_size", None)
    if size and getattr(args, "kv_offloading_backend", None) == "native":
        return TierChoice(f"native:{size:g}GiB", "native", cpu, offload_gib=size)
    return None
