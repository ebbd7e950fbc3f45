"""KV cache sizes: capacities in tokens or bytes, through a model's bytes per token.

The presets and the formulas that give bytes per token are ``pipeline.sizes.model_presets``
(re-exported here).

A capacity is tokens (``56000``), blocks (``5860blocks``: 5860 x the command's
``--block-size`` tokens, vLLM's ``num_gpu_blocks`` with block 0, the null block, counted as
``simulate`` counts it) or a size (``1.5GiB``, ``40GB``, ``512MiB``): GB/MB/KB/TB are
powers of 10, GiB/MiB/KiB/TiB powers of 2. A size holds ``floor(bytes / bytes per token)``
tokens, and needs a model (``--model``, ``--kv-bytes-per-token`` or ``--kv-shape``): without
one it is a usage error naming ``--model``, never a silent default. LMCache's
``max_local_cpu_size`` is called GB but multiplied by 2^30
(``lmcache/v1/cache_engine.py``, ``LMCacheEngineBuilder._Create_memory_allocator``:
``int(max_local_cpu_size * 1024**3)``), so LMCache's "5 GB" is ``5GiB`` here, or, written
as LMCache's setting, ``5lmcacheGB`` (the unit ``lmcacheGB`` = 2^30 bytes, and the output
says so).

Commands: ``add_kv_arguments`` adds the model options, a capacity option takes
``type=capacity`` (one) or ``type=capacities`` (a comma list), and after parsing
``resolve_capacities(args, "gpu", "cpu", block_size=...)`` returns a copy of the options with
them in tokens and what ``size_lines`` prints (empty when every capacity was given in tokens).

>>> kv = preset("qwen2.5-1.5b")
>>> kv.bytes_per_token
28672
>>> parse_capacity("1.5GiB").tokens(kv)
56173
>>> parse_capacity("5860blocks").tokens(None, block_size=16)
93760
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pipeline.sizes.limits import MAX_CAPACITY
from pipeline.sizes.model_presets import DEFAULT_PRESET, DTYPE_BYTES, MODELS, PRESETS, KVSize, \
    ModelShape, model_shape, parse_model_shape, parse_shape, preset, shape

__all__ = ["DTYPE_BYTES", "UNITS", "BLOCKS", "KVSize", "PRESETS", "MODELS", "ModelShape",
           "model_shape", "parse_model_shape", "Capacity", "preset", "shape", "parse_capacity",
           "capacity", "one_capacity", "capacities", "capacity_list", "format_bytes", "gib",
           "gb", "size_up", "add_kv_arguments", "kv_from_args", "model_given", "sized_option",
           "one_of", "capacity_tokens", "DEFAULT_PRESET", "resolve_capacities", "size_lines"]

#: Size units: decimal (10^3k) and binary (2^10k).
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "LMCACHEGB": 2**30}
_UNIT_NAMES = {"B": "B", "KB": "KB", "MB": "MB", "GB": "GB", "TB": "TB",
               "KIB": "KiB", "MIB": "MiB", "GIB": "GiB", "TIB": "TiB",
               "LMCACHEGB": "lmcacheGB"}
#: what each unit is, as the output says it
_UNIT_MEANING = {"B": "1 byte", "KB": "10^3 bytes", "MB": "10^6 bytes", "GB": "10^9 bytes",
                 "TB": "10^12 bytes", "KIB": "2^10 bytes", "MIB": "2^20 bytes",
                 "GIB": "2^30 bytes", "TIB": "2^40 bytes",
                 "LMCACHEGB": "2^30 bytes, LMCache's max_local_cpu_size GB"}
#: the unit of a capacity in blocks (``5860blocks``)
BLOCKS = "BLOCKS"
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


# --- sizes and capacities ------------------------------------------------------------------

@dataclass(frozen=True)
class Capacity:
    """A capacity as given: ``count`` tokens, or ``count`` x ``unit`` bytes (``unit`` set)."""

    text: str
    count: Decimal
    unit: str | None = None          # None: tokens; BLOCKS: blocks; else a key of UNITS

    @property
    def is_size(self) -> bool:
        """Whether this is a size in bytes (it needs a model's bytes per token)."""
        return self.unit is not None and self.unit != BLOCKS

    @property
    def size_bytes(self) -> int | None:
        """The size in whole bytes, or None for a token count."""
        return int(self.count * UNITS[self.unit]) if self.is_size else None

    def tokens(self, kv: KVSize | None, block_size: int | None = None) -> int:
        """Whole tokens: the count itself, blocks x ``block_size``, or floor(bytes / bytes per
        token)."""
        if self.unit is None:
            return int(self.count)
        if self.unit == BLOCKS:
            if block_size is None:
                raise ValueError(f"{self.text!r} is in blocks: give a block size")
            return int(self.count) * block_size
        if kv is None:
            raise ValueError(f"{self.text!r} is a size: give a model to convert it to tokens")
        return kv.tokens(self.size_bytes)

    def describe(self, kv: KVSize | None) -> str:
        """``56,173 tokens (1.5 GiB = 1,610,612,736 bytes; GiB = 2^30 bytes)`` or ``N tokens``."""
        tokens = self.tokens(kv)
        if not self.is_size:
            return f"{tokens:,} tokens"
        name = _UNIT_NAMES[self.unit]
        return (f"{tokens:,} tokens ({self.count.normalize():f} {name} = {self.size_bytes:,} "
                f"bytes; {name} = {_UNIT_MEANING[self.unit]}; {kv.bytes_per_token:,} bytes "
                f"per token)")

    def as_dict(self, kv: KVSize | None, block_size: int | None = None) -> dict[str, object]:
        """JSON form: as given, tokens, and for a size its bytes, unit and unit's bytes (for
        blocks the block size)."""
        out: dict[str, object] = {"given": self.text, "tokens": self.tokens(kv, block_size)}
        if self.unit == BLOCKS:
            out.update(blocks=int(self.count), block_size=block_size)
        elif self.unit is not None:
            out.update(bytes=self.size_bytes, unit=_UNIT_NAMES[self.unit],
                       unit_bytes=UNITS[self.unit], unit_meaning=_UNIT_MEANING[self.unit])
        return out


def parse_capacity(text: str) -> Capacity:
    """Tokens (``56000``, ``56000 tokens``) or a size (``1.5GiB``); ValueError otherwise."""
    cleaned = text.strip().replace("_", "")
    match = _SIZE.match(cleaned)
    if cleaned.startswith("-"):
        raise ValueError(f"a capacity must be >= 0, got {text!r}")
    if not match:
        raise ValueError(f"expected tokens, blocks (5860blocks) or a size such as 1.5GiB, "
                         f"40GB, 512MiB, got {text!r}")
    number, unit = match.groups()
    try:
        count = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a number in {text!r}") from None
    if count > MAX_CAPACITY:
        raise ValueError(f"capacity {text!r} is too large")
    unit_key = unit.upper()
    if unit_key in ("", "TOKENS", "TOKEN", "TOK"):
        if count != count.to_integral_value():
            raise ValueError(f"a token count must be a whole number, got {text!r}")
        return Capacity(text, count)
    if unit_key in (BLOCKS, "BLOCK"):
        if count != count.to_integral_value():
            raise ValueError(f"a block count must be a whole number, got {text!r}")
        return Capacity(text, count, BLOCKS)
    if unit_key not in UNITS:
        raise ValueError(f"unknown unit {unit!r} in {text!r}: use tokens, blocks or one of "
                         f"{', '.join(_UNIT_NAMES.values())} (GB = 10^9, GiB = 2^30 bytes, "
                         f"lmcacheGB = LMCache's max_local_cpu_size GB = 2^30 bytes)")
    return Capacity(text, count, unit_key)


def capacity(text: str) -> Capacity:
    """argparse type: one capacity (tokens or a size), converted later with ``tokens(kv)``."""
    try:
        return parse_capacity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def one_capacity(text: str) -> Capacity:
    """argparse type of an option that takes one capacity: a comma list is refused."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"one capacity, not a list: got {text!r}")
    return capacity(text)


def capacity_list(kv: KVSize | None) -> Callable[[str], list[int]]:
    """argparse type factory: comma-separated capacities (tokens or sizes) -> tokens via ``kv``.

    For commands whose model is fixed before parsing; otherwise parse with ``capacity`` and
    convert after parsing with ``Capacity.tokens(kv)``.
    """
    def parse(text: str) -> list[int]:
        parts = [part for part in text.split(",") if part.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"empty capacity list {text!r}")
        try:
            return [parse_capacity(part).tokens(kv) for part in parts]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def capacities(text: str) -> list[Capacity]:
    """argparse type: comma-separated capacities kept as given; convert after parsing (when
    the model options are known) with ``[c.tokens(kv) for c in ...]``."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"empty capacity list {text!r}")
    try:
        return [parse_capacity(part) for part in parts]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gib(size_bytes: int) -> float:
    """Bytes in GiB (2^30)."""
    return size_bytes / 2**30


def gb(size_bytes: int) -> float:
    """Bytes in GB (10^9)."""
    return size_bytes / 10**9


def size_up(size_bytes: int, unit: int, digits: int) -> float:
    """``size_bytes`` in ``unit`` bytes, rounded *up* to ``digits`` decimals (exact integer
    arithmetic): the figure for a size that must hold at least ``size_bytes``.

    >>> size_up(200_000 * 131_072, 2**30, 2)      # 24.414... GiB: 24.41 GiB holds less
    24.42
    """
    scale = 10**digits
    return -(-size_bytes * scale // unit) / scale


def format_bytes(size_bytes: int) -> str:
    """``1.34 GiB (1.44 GB)``: both units, two decimals (more when small)."""
    digits = 2 if size_bytes >= 10**8 else 4
    return f"{gib(size_bytes):.{digits}f} GiB ({gb(size_bytes):.{digits}f} GB)"


# --- command-line options ------------------------------------------------------------------

def add_kv_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --kv-bytes-per-token, --kv-shape (at most one); an unknown preset or a bad
    shape is a usage error. A size in bytes needs one of them (``kv_from_args``)."""
    from pipeline.base.arguments import checked, positive_int
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--model", metavar="PRESET", default=None, type=checked(preset),
                       help=f"model preset for KV bytes per token (and the roofline's "
                            f"shape): {', '.join(PRESETS)}; needed by sizes in bytes and "
                            f"by TTFT, never assumed")
    group.add_argument("--kv-bytes-per-token", metavar="BYTES", type=positive_int, default=None,
                       help="KV bytes per token, instead of a preset")
    group.add_argument("--kv-shape", metavar="L,H,D[,DTYPE]", default=None,
                       type=checked(parse_shape),
                       help="layers, KV heads, head dim[, dtype] (standard formula 2 x L x H x "
                            "D x dtype bytes), e.g. 28,2,128,bf16")
    from pipeline.sizes.model_options import add_model_config_argument, add_parallel_arguments
    add_model_config_argument(group)
    add_parallel_arguments(parser)


def model_given(args: argparse.Namespace) -> bool:
    """Whether the options name a KV size (--model, --kv-bytes-per-token or --kv-shape)."""
    return any(getattr(args, dest, None) is not None
               for dest in ("model", "kv_bytes_per_token", "kv_shape", "model_config"))


def kv_from_args(args: argparse.Namespace, needed_for: str | None = None) -> KVSize:
    """The KVSize the options chose; ValueError naming the option on bad input.

    With none of --model, --kv-bytes-per-token, --kv-shape: a usage error (exit 2) naming
    ``--model`` when ``needed_for`` says what needs bytes (``"--gpu 20GiB"``), else the lab's
    model (``DEFAULT_PRESET``; callers that print bytes then say it is the lab's).
    ``--model-config``, ``--kv-cache-dtype`` and ``--tensor-parallel-size``: ``model_kv``."""
    from pipeline.sizes.model_options import model_kv
    kv = model_kv(args)
    if kv is not None:
        return kv
    if args.kv_bytes_per_token is not None:
        if args.kv_bytes_per_token < 1:
            raise ValueError(f"--kv-bytes-per-token: must be >= 1, got {args.kv_bytes_per_token}")
        return KVSize("custom", args.kv_bytes_per_token, "given with --kv-bytes-per-token")
    if args.kv_shape is not None:
        try:
            return parse_shape(args.kv_shape)
        except ValueError as exc:
            raise ValueError(f"--kv-shape: {exc}") from None
    if args.model is None and needed_for is not None:
        from pipeline.base.errors import UsageError
        raise UsageError(f"{needed_for} needs --model PRESET (or --kv-bytes-per-token / "
                         f"--kv-shape) for its bytes per token: no model is assumed")
    try:
        return preset(args.model or DEFAULT_PRESET)
    except ValueError as exc:
        raise ValueError(f"--model: {exc}") from None


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def sized_option(args: argparse.Namespace, *dests: str) -> str | None:
    """``"--gpu 20GiB"``: the first of the capacity options ``dests`` given as a size in
    bytes (what needs a model), or None."""
    for dest in dests:
        value = getattr(args, dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, Capacity) and item.is_size:
                return f"{_flag(dest)} {item.text}"
    return None


def one_of(value, flag: str, why: str = "one value"):
    """The one capacity of a ``capacities`` option (None stays None); a usage error naming
    ``flag`` for a list (``why`` says where a list goes)."""
    if not isinstance(value, list):
        return value
    if len(value) > 1:
        from pipeline.base.errors import UsageError
        raise UsageError(f"{flag}: one capacity here ({why}), got {len(value)}")
    return value[0]


def capacity_tokens(value: Capacity | int, kv: KVSize | None, block_size: int | None,
                    flag: str) -> int:
    """Tokens of one capacity option; a usage error naming ``flag`` for blocks without a
    block size."""
    if not isinstance(value, Capacity):
        return value
    if value.unit == BLOCKS and block_size is None:
        from pipeline.base.errors import UsageError
        raise UsageError(f"{flag} {value.text}: blocks need a block size (--block-size)")
    return value.tokens(kv, block_size)


def resolve_capacities(args: argparse.Namespace, *dests: str,
                       block_size: int | None = None) -> tuple[Any, dict[str, object]]:
    """The capacity options ``dests`` of ``args`` (a ``Capacity``, a list of them, an int,
    or None) in tokens, as (a frozen copy of ``args`` with them, ``pipeline.base.arguments.
    derive``; the sizes' data): blocks through ``block_size``, sizes through the
    model ``kv_from_args`` chooses (a size without a model, or blocks without a block size,
    is a usage error naming the option). ``--gpu-memory-utilization`` goes through
    ``pipeline.sizes.vllm_memory.resolve_with_utilization``, which calls this.

    The sizes' data is ``{}`` when every one was given in tokens, else ``{"kv": {...}, "options":
    {"--cpu": Capacity.as_dict}}`` for the output.
    CLIError naming the option on a bad model option. Commands call it first in ``main``.
    """
    from pipeline.base.errors import CLIError
    given_all = {dest: getattr(args, dest, None) for dest in dests}
    sized = sized_option(args, *dests)
    try:
        kv = kv_from_args(args, sized)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    options: dict[str, object] = {}
    changes: dict[str, object] = {}
    for dest, value in given_all.items():
        given = value if isinstance(value, list) else [value]
        if not any(isinstance(item, Capacity) for item in given):
            continue
        tokens = [capacity_tokens(item, kv, block_size, _flag(dest)) for item in given]
        changes[dest] = tokens if isinstance(value, list) else tokens[0]
        if any(isinstance(item, Capacity) and item.unit for item in given):
            parts = [item.as_dict(kv, block_size) if isinstance(item, Capacity) else
                     {"given": str(item), "tokens": item} for item in given]
            options[_flag(dest)] = parts if isinstance(value, list) else parts[0]
    from pipeline.base.arguments import derive
    args = derive(args, **changes)
    if not options:
        return args, {}
    return args, {"kv": {"name": kv.name, "bytes_per_token": kv.bytes_per_token,
                         "formula": kv.formula} if sized else None, "options": options}


def size_lines(sizes: dict[str, object]) -> list[str]:
    """The text form of ``resolve_capacities``' answer: the --gpu-memory-utilization
    arithmetic, then one line per option given in blocks or as a size."""
    if not sizes:
        return []
    lines = []
    lines += [sizes[key]["line"] for key in ("gpu_memory_utilization", "mem_fraction_static")
              if key in sizes]
    kv, options = sizes.get("kv"), sizes.get("options", {})
    if kv is not None and any("unit" in p for value in options.values()
                              for p in (value if isinstance(value, list) else [value])):
        lines.append(f"sizes converted with {kv['name']}: {kv['bytes_per_token']:,} bytes per "
                     f"token ({kv['formula']})")
    for flag, value in options.items():
        parts = value if isinstance(value, list) else [value]
        lines.append(f"{flag} " + ", ".join(_part(p) for p in parts))
    return lines


def _part(p: dict[str, object]) -> str:
    text = f"{p['given']} = {p['tokens']:,} tokens"
    if "unit" in p:
        return text + f" ({p['bytes']:,} bytes; {p['unit']} = {p['unit_meaning']})"
    if "blocks" in p:
        return text + f" ({p['blocks']:,} blocks of {p['block_size']} tokens)"
    return text
