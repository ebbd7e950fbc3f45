"""KV cache sizes: bytes per token from a model's shape, and capacities in tokens or bytes.

Two formulas (one per attention kind):

* **standard** (MHA/GQA): ``2 (K and V) x layers x KV heads x head dim x dtype bytes``.
* **MLA** (DeepSeek-V2/V3): one latent vector per token and layer, no separate K and V:
  ``(kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes``. vLLM sizes MLA pages this way
  (``vllm/v1/kv_cache_interface.py``, ``MLAAttentionSpec``: a single latent per token,
  ``head_size_v = 0``).

A capacity is tokens (``56000``) or a size (``1.5GiB``, ``40GB``, ``512MiB``): GB/MB/KB/TB are
powers of 10, GiB/MiB/KiB/TiB powers of 2. A size holds ``floor(bytes / bytes per token)``
tokens. LMCache's ``max_local_cpu_size`` is called GB but multiplied by 2^30
(``lmcache/v1/cache_engine.py``, ``LMCacheEngineBuilder._Create_memory_allocator``:
``int(max_local_cpu_size * 1024**3)``), so LMCache's "5 GB" is ``5GiB`` here, or, written
as LMCache's setting, ``5lmcacheGB`` (the unit ``lmcacheGB`` = 2^30 bytes, and the output
says so).

Commands: ``add_kv_arguments`` adds the model options, a capacity option takes
``type=capacity`` (one) or ``type=capacities`` (a comma list), and after parsing
``resolve_capacities(args, "gpu", "cpu")`` turns them into tokens in place and returns what
``size_report`` / ``size_lines`` print (empty when every capacity was given in tokens).

>>> kv = preset("qwen2.5-1.5b")
>>> kv.bytes_per_token
28672
>>> parse_capacity("1.5GiB").tokens(kv)
56173
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = ["DTYPE_BYTES", "UNITS", "KVSize", "PRESETS", "MODELS", "ModelShape", "model_shape",
           "parse_model_shape", "Capacity", "preset", "shape",
           "parse_capacity", "capacity", "capacities", "capacity_list", "format_bytes", "gib", "gb",
           "size_up",
           "add_kv_arguments", "kv_from_args", "DEFAULT_PRESET", "resolve_capacities",
           "size_lines"]

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2,
               "half": 2, "fp8": 1, "int8": 1}
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
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
DEFAULT_PRESET = "qwen2.5-1.5b"       # the lab's model
_LIMIT = Decimal(2**63 - 1)           # no capacity (in tokens or units) beyond int64


@dataclass(frozen=True)
class KVSize:
    """A model's KV cache footprint: bytes per token, how it was derived, and a name."""

    name: str
    bytes_per_token: int
    formula: str
    source: str = ""

    def __post_init__(self) -> None:
        if self.bytes_per_token < 1:
            raise ValueError(f"bytes per token must be >= 1, got {self.bytes_per_token}")

    def bytes(self, tokens: int) -> int:
        """Bytes of ``tokens`` tokens of KV cache."""
        return tokens * self.bytes_per_token

    def tokens(self, size_bytes: int) -> int:
        """Whole tokens that fit in ``size_bytes`` bytes."""
        return size_bytes // self.bytes_per_token

    def describe(self) -> str:
        """One line: name, bytes per token and the formula that gave them."""
        return f"{self.name}: {self.bytes_per_token:,} bytes per token ({self.formula})"


def _dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of "
                         f"{', '.join(sorted(DTYPE_BYTES))}") from None


def shape(name: str, layers: int, kv_heads: int, head_dim: int, dtype: str = "bf16",
          source: str = "") -> KVSize:
    """Standard attention (MHA/GQA): 2 x layers x KV heads x head dim x dtype bytes."""
    size = _dtype_bytes(dtype)
    if min(layers, kv_heads, head_dim) < 1:
        raise ValueError(f"layers, KV heads and head dim must be >= 1, got "
                         f"{layers}, {kv_heads}, {head_dim}")
    return KVSize(name, 2 * layers * kv_heads * head_dim * size,
                  f"standard: 2 x {layers} layers x {kv_heads} KV heads x {head_dim} head dim "
                  f"x {size} bytes ({dtype})", source)


def mla_shape(name: str, layers: int, kv_lora_rank: int, qk_rope_head_dim: int,
              dtype: str = "bf16", source: str = "") -> KVSize:
    """MLA: (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes (one latent, no K/V pair)."""
    size = _dtype_bytes(dtype)
    return KVSize(name, (kv_lora_rank + qk_rope_head_dim) * layers * size,
                  f"MLA: ({kv_lora_rank} kv_lora_rank + {qk_rope_head_dim} qk_rope_head_dim) "
                  f"x {layers} layers x {size} bytes ({dtype})", source)


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder's shape as its config.json gives it (``num_hidden_layers``,
    ``hidden_size``, ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``,
    ``vocab_size``, ``tie_word_embeddings``): what FLOPs and weight bytes per token follow
    from. Linear layers only (q, k, v, o and a SwiGLU MLP of gate, up and down); norms and
    biases are under 0.1 % of the weights and left out."""

    name: str
    layers: int
    hidden_size: int
    intermediate_size: int
    attention_heads: int
    kv_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        sizes = (self.layers, self.hidden_size, self.intermediate_size, self.attention_heads,
                 self.kv_heads, self.vocab_size)
        if min(sizes) < 1:
            raise ValueError(f"every size of a model shape must be >= 1, got {sizes}")
        if self.hidden_size % self.attention_heads or self.attention_heads % self.kv_heads:
            raise ValueError(f"hidden size {self.hidden_size} must divide into "
                             f"{self.attention_heads} heads, and those into {self.kv_heads} "
                             f"KV heads")

    @property
    def head_dim(self) -> int:
        """hidden size / attention heads."""
        return self.hidden_size // self.attention_heads

    @property
    def layer_parameters(self) -> int:
        """Weights of the decoder layers: per layer q and o (hidden x hidden), k and v
        (hidden x KV heads x head dim) and the MLP (3 x hidden x intermediate)."""
        kv = self.kv_heads * self.head_dim
        per_layer = (2 * self.hidden_size * self.hidden_size + 2 * self.hidden_size * kv
                     + 3 * self.hidden_size * self.intermediate_size)
        return self.layers * per_layer

    @property
    def lm_head_parameters(self) -> int:
        """vocab x hidden (the output projection, the embedding table when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def parameters(self) -> int:
        """All weights: layers, embedding table and (when untied) a separate LM head."""
        tables = 1 if self.tie_word_embeddings else 2
        return self.layer_parameters + tables * self.lm_head_parameters

    def kv(self, dtype: str = "bf16") -> KVSize:
        """The KV footprint (standard formula) of this shape."""
        return shape(self.name, self.layers, self.kv_heads, self.head_dim, dtype, self.source)


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


#: Published dense shapes (config.json of each repository: num_hidden_layers, hidden_size,
#: intermediate_size, num_attention_heads, num_key_value_heads, vocab_size,
#: tie_word_embeddings; head dim = hidden_size / num_attention_heads).
MODELS: dict[str, ModelShape] = {m.name.lower(): m for m in (
    ModelShape("Qwen2.5-0.5B", 24, 896, 4864, 14, 2, 151936, True, _hf("Qwen/Qwen2.5-0.5B")),
    ModelShape("Qwen2.5-1.5B", 28, 1536, 8960, 12, 2, 151936, True, _hf("Qwen/Qwen2.5-1.5B")),
    ModelShape("Qwen2.5-7B", 28, 3584, 18944, 28, 4, 152064, False, _hf("Qwen/Qwen2.5-7B")),
    ModelShape("Qwen2.5-72B", 80, 8192, 29568, 64, 8, 152064, False,
               _hf("Qwen/Qwen2.5-72B")),
    ModelShape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128256, False,
               _hf("meta-llama/Llama-3.1-8B")),
    ModelShape("Llama-3.1-70B", 80, 8192, 28672, 64, 8, 128256, False,
               _hf("meta-llama/Llama-3.1-70B")),
    ModelShape("Mistral-7B-v0.3", 32, 4096, 14336, 32, 8, 32768, False,
               _hf("mistralai/Mistral-7B-v0.3")),
)}

#: KV footprints: the dense shapes above (KV cache in bf16, vLLM's default
#: ``kv_cache_dtype=auto`` for these) and DeepSeek-V3's MLA (config.json: kv_lora_rank,
#: qk_rope_head_dim), a mixture-of-experts model with no ModelShape.
PRESETS: dict[str, KVSize] = {
    **{key: model.kv() for key, model in MODELS.items()},
    "deepseek-v3": mla_shape("DeepSeek-V3", 61, 512, 64, source=_hf("deepseek-ai/DeepSeek-V3")),
}


def model_shape(name: str) -> ModelShape:
    """A dense model shape by preset name (case-insensitive); ValueError otherwise."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        if name.lower() in PRESETS:
            raise ValueError(f"{PRESETS[name.lower()].name} has no dense model shape (a "
                             f"mixture-of-experts MLA model): expected one of "
                             f"{', '.join(m.name for m in MODELS.values())}") from None
        raise ValueError(f"unknown model preset {name!r}: expected one of "
                         f"{', '.join(PRESETS)}") from None


def parse_model_shape(text: str) -> ModelShape:
    """``LAYERS,HIDDEN,INTERMEDIATE,HEADS,KV_HEADS,VOCAB[,tied]``, e.g.
    ``28,1536,8960,12,2,151936,tied``."""
    parts = [part.strip() for part in text.split(",")]
    tied = parts[-1].lower() == "tied"
    numbers = parts[:-1] if tied else parts
    if len(numbers) != 6:
        raise ValueError(f"expected LAYERS,HIDDEN,INTERMEDIATE,HEADS,KV_HEADS,VOCAB[,tied], "
                         f"got {text!r}")
    try:
        values = [int(part) for part in numbers]
    except ValueError:
        raise ValueError(f"expected integers in {text!r}") from None
    return ModelShape(f"shape {text}", *values, tie_word_embeddings=tied)


def preset(name: str) -> KVSize:
    """A preset by name (case-insensitive); ValueError naming the known ones."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}: expected one of "
                         f"{', '.join(PRESETS)}") from None


def parse_shape(text: str) -> KVSize:
    """``LAYERS,KV_HEADS,HEAD_DIM[,DTYPE]`` (standard formula), e.g. ``28,2,128,bf16``."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) not in (3, 4):
        raise ValueError(f"expected LAYERS,KV_HEADS,HEAD_DIM[,DTYPE], got {text!r}")
    try:
        layers, heads, dim = (int(part) for part in parts[:3])
    except ValueError:
        raise ValueError(f"expected integers in LAYERS,KV_HEADS,HEAD_DIM, got {text!r}") \
            from None
    return shape(f"shape {text}", layers, heads, dim, parts[3] if len(parts) == 4 else "bf16")


# --- sizes and capacities ------------------------------------------------------------------

@dataclass(frozen=True)
class Capacity:
    """A capacity as given: ``count`` tokens, or ``count`` x ``unit`` bytes (``unit`` set)."""

    text: str
    count: Decimal
    unit: str | None = None          # None: tokens; else a key of UNITS

    @property
    def size_bytes(self) -> int | None:
        """The size in whole bytes, or None for a token count."""
        return None if self.unit is None else int(self.count * UNITS[self.unit])

    def tokens(self, kv: KVSize | None) -> int:
        """Whole tokens: the count itself, or floor(bytes / bytes per token)."""
        if self.unit is None:
            return int(self.count)
        if kv is None:
            raise ValueError(f"{self.text!r} is a size: give a model to convert it to tokens")
        return kv.tokens(self.size_bytes)

    def describe(self, kv: KVSize | None) -> str:
        """``56,173 tokens (1.5 GiB = 1,610,612,736 bytes; GiB = 2^30 bytes)`` or ``N tokens``."""
        tokens = self.tokens(kv)
        if self.unit is None:
            return f"{tokens:,} tokens"
        name = _UNIT_NAMES[self.unit]
        return (f"{tokens:,} tokens ({self.count.normalize():f} {name} = {self.size_bytes:,} "
                f"bytes; {name} = {_UNIT_MEANING[self.unit]}; {kv.bytes_per_token:,} bytes "
                f"per token)")

    def as_dict(self, kv: KVSize) -> dict[str, object]:
        """JSON form: as given, tokens, and for a size its bytes, unit and unit's bytes."""
        out: dict[str, object] = {"given": self.text, "tokens": self.tokens(kv)}
        if self.unit is not None:
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
        raise ValueError(f"expected tokens or a size such as 1.5GiB, 40GB, 512MiB, got {text!r}")
    number, unit = match.groups()
    try:
        count = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a number in {text!r}") from None
    if count > _LIMIT:
        raise ValueError(f"capacity {text!r} is too large")
    unit_key = unit.upper()
    if unit_key in ("", "TOKENS", "TOKEN", "TOK"):
        if count != count.to_integral_value():
            raise ValueError(f"a token count must be a whole number, got {text!r}")
        return Capacity(text, count)
    if unit_key not in UNITS:
        raise ValueError(f"unknown unit {unit!r} in {text!r}: use tokens or one of "
                         f"{', '.join(_UNIT_NAMES.values())} (GB = 10^9, GiB = 2^30 bytes, "
                         f"lmcacheGB = LMCache's max_local_cpu_size GB = 2^30 bytes)")
    return Capacity(text, count, unit_key)


def capacity(text: str) -> Capacity:
    """argparse type: one capacity (tokens or a size), converted later with ``tokens(kv)``."""
    try:
        return parse_capacity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    """--model, --kv-bytes-per-token, --kv-shape (at most one; default the lab's model)."""
    from pipeline.arguments import positive_int
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--model", metavar="PRESET", default=None,
                       help=f"model preset for the KV size: {', '.join(PRESETS)} "
                            f"(default {DEFAULT_PRESET}, the lab's model)")
    group.add_argument("--kv-bytes-per-token", metavar="BYTES", type=positive_int, default=None,
                       help="KV bytes per token, instead of a preset")
    group.add_argument("--kv-shape", metavar="L,H,D[,DTYPE]", default=None,
                       help="layers, KV heads, head dim[, dtype] (standard formula 2 x L x H x "
                            "D x dtype bytes), e.g. 28,2,128,bf16")


def kv_from_args(args: argparse.Namespace) -> KVSize:
    """The KVSize the options chose; ValueError naming the option on bad input."""
    if args.kv_bytes_per_token is not None:
        if args.kv_bytes_per_token < 1:
            raise ValueError(f"--kv-bytes-per-token: must be >= 1, got {args.kv_bytes_per_token}")
        return KVSize("custom", args.kv_bytes_per_token, "given with --kv-bytes-per-token")
    if args.kv_shape is not None:
        try:
            return parse_shape(args.kv_shape)
        except ValueError as exc:
            raise ValueError(f"--kv-shape: {exc}") from None
    try:
        return preset(args.model or DEFAULT_PRESET)
    except ValueError as exc:
        raise ValueError(f"--model: {exc}") from None


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def resolve_capacities(args: argparse.Namespace, *dests: str) -> dict[str, object]:
    """Turn the capacity options ``dests`` of ``args`` (a ``Capacity``, a list of them, an
    int, or None) into tokens in place, through the model ``kv_from_args`` chooses.

    Returns ``{}`` when every one was given in tokens, else ``{"kv": {...}, "options":
    {"--cpu": Capacity.as_dict}}`` for the output (which unit, which bytes per token).
    CLIError naming the option on a bad model option. Commands call it first in ``main``.
    """
    from pipeline.errors import CLIError
    try:
        kv = kv_from_args(args)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    options: dict[str, object] = {}
    for dest in dests:
        value = getattr(args, dest, None)
        given = value if isinstance(value, list) else [value]
        if not any(isinstance(item, Capacity) for item in given):
            continue
        tokens = [item.tokens(kv) if isinstance(item, Capacity) else item for item in given]
        setattr(args, dest, tokens if isinstance(value, list) else tokens[0])
        sized = [item for item in given if isinstance(item, Capacity) and item.unit]
        if sized:
            parts = [item.as_dict(kv) for item in given]
            options[_flag(dest)] = parts if isinstance(value, list) else parts[0]
    if not options:
        return {}
    return {"kv": {"name": kv.name, "bytes_per_token": kv.bytes_per_token,
                   "formula": kv.formula}, "options": options}


def size_lines(sizes: dict[str, object]) -> list[str]:
    """The text form of ``resolve_capacities``' answer: one line per option given as a size."""
    if not sizes:
        return []
    kv = sizes["kv"]
    lines = [f"sizes converted with {kv['name']}: {kv['bytes_per_token']:,} bytes per token "
             f"({kv['formula']})"]
    for flag, value in sizes["options"].items():
        parts = value if isinstance(value, list) else [value]
        lines.append(f"{flag} " + ", ".join(
            f"{p['given']} = {p['tokens']:,} tokens" + (
                f" ({p['bytes']:,} bytes; {p['unit']} = {p['unit_meaning']})"
                if "unit" in p else "") for p in parts))
    return lines
