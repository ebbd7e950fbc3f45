"""The one registry of cache models: one ``CacheModel`` entry per model name.

An entry says how to make the model's tier (an object with ``lookup``/``place``, and
``access`` for the policies: ``pipeline.cache.tiers.Tier``), its fast paths (block mode: a GPU
model ``f(stream, capacities, order, **options)`` and a CPU model ``f(stream, gpu_hit_tokens,
capacities, order, **options)``, see ``pipeline.catalog.model_api``, and for a policy the
compiled ``block_kernel`` they run; per access: a ``onepass`` engine for every capacity and a
compiled ``replay_kernel`` at one capacity), its unit, the one touch order it follows
(engines), its declared options (``Option``: the CLI flags and checks are built from them,
``pipeline.catalog.model_options``) and where it is used (a ``policy`` of the family, a
``measured`` config model).

``MODELS`` holds the built-in entries in display order; ``register(entry)`` adds one (a new
policy is one module plus one ``register`` call, or one line in ``_builtin``) and
``unregister(name)`` drops it. Nothing registers on import elsewhere. The views
``GPU_MODELS``, ``CPU_MODELS``, ``POLICIES``, ``MODEL_OPTIONS`` and ``MODEL_ORDERS`` are
read from the entries at every use, so a registered model appears in each at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from pipeline.base.arguments import checked, positive_int
from pipeline.components import block_lru_replay as block_replay
from pipeline.onepass import lru_depths as block_onepass
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, TRACE
from pipeline.components import lmcache_cpu, lmcache_fast, vllm_gpu
from pipeline.onepass import vllm_fast
from pipeline.components.lmcache_cpu import DEFAULT_CHUNK_SIZE
from pipeline.components.vllm_gpu import DEFAULT_VLLM_VERSION, PREPEND_SINCE, unhashed_to_head
from pipeline.policies.arc import ARC
from pipeline.policies.clock import Clock
from pipeline.policies.lfu import LFU
from pipeline.policies.opt import OPT
from pipeline.policies.s3fifo import S3FIFO
from pipeline.policies.sieve import Sieve
from pipeline.policies.simple import FIFO, LRU, MRU
import pipeline.policies.kernels as kernels
from pipeline.policies.blockmode import policy_cpu_model, policy_gpu_model
from pipeline.policies.kernels import blocks as block_kernels
from pipeline.onepass.stack_passes import LRU_PASS, MRU_PASS, OPT_PASS, OnePass

__all__ = ["Option", "CacheModel", "MODELS", "DEPRECATED_NAMES", "register",
           "unregister", "added", "entry", "names",
           "GPU_MODELS", "CPU_MODELS", "POLICIES", "MODEL_OPTIONS", "MODEL_ORDERS",
           "options", "option_owner", "describe", "models_line", "models_field", "policy_entry", "make_policy", "make_tier", "policy_names",
           "vllm_version"]


#: argparse type: a vLLM version such as 0.33.0
vllm_version = checked(unhashed_to_head)


@dataclass(frozen=True)
class Option:
    """A model's own option: argparse ``dest``, its ``help``, ``type`` (or a boolean flag),
    the model's ``default`` when the flag is not given (a callable takes the run's block
    size), and ``check(value, block_size)``: an error message or None."""

    dest: str
    help: str
    type: Callable | None = None
    default: object = None
    boolean: bool = False
    check: Callable[[object, int | None], str | None] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def value(self, given: object, block_size: int | None) -> object:
        """The value the model runs with: ``given``, else the default."""
        if given is not None:
            return given
        return self.default(block_size) if callable(self.default) else self.default


@dataclass(frozen=True)
class CacheModel:
    """One registry entry (see the module docstring)."""

    name: str
    summary: str
    unit: str                                # block, chunk, object, context
    tier: Callable | None = None             # (capacity, **options) -> tier object
    gpu: Callable | None = None              # block-mode GPU model (fast path)
    cpu: Callable | None = None              # block-mode CPU model (fast path)
    order: str | None = None                 # the one touch order it follows
    options: tuple[Option, ...] = ()
    onepass: OnePass | None = None           # per access: every capacity in one exact pass
    replay_kernel: Callable | None = None    # per access: compiled replay at one capacity
    block_kernel: Callable | None = None     # block mode: the compiled kernel of gpu and cpu
    policy: bool = False                     # one of the policy family (``policies``)
    measured: bool = False                   # a measured config's model (sidecar ``model``)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(option.dest for option in self.options)


def _default_chunk_size(block_size: int | None) -> int:
    """LMCache's chunk size (256) on the block grid: the smallest multiple of ``block_size``
    that is at least 256 (256 itself for 16-token blocks, 512 for a Mooncake trace's 512)."""
    if not block_size:
        return DEFAULT_CHUNK_SIZE
    return -(-DEFAULT_CHUNK_SIZE // block_size) * block_size


def _chunk_on_grid(chunk: object, block_size: int | None) -> str | None:
    if chunk is not None and block_size and chunk % block_size:
        return (f"--chunk-size {chunk}: must be a multiple of the block size {block_size} "
                f"(--block-size)")
    return None


def output_tokens(text: str) -> int | str:
    """argparse type of ``--output-tokens``: an integer >= 1, or ``trace``."""
    if text == TRACE:
        return TRACE
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or {TRACE!r}, "
                                         f"got {text!r}") from None


_SINCE = ".".join(map(str, PREPEND_SINCE))
VLLM_OPTIONS = (
    Option("output_tokens", "vllm model: tokens generated per request (max_tokens): N for "
           "every request, or 'trace': each request's own (Mooncake output_length, token "
           "JSONL max_tokens or output_token_ids; 1 where none) (default: trace when the "
           "input gives lengths, else 1)",
           output_tokens, 1),
    Option("vllm_version", f"vllm model: free-queue placement of unhashed blocks, head since "
           f"{_SINCE}, tail before (default {DEFAULT_VLLM_VERSION})", vllm_version,
           DEFAULT_VLLM_VERSION),
)
LMCACHE_OPTIONS = (
    Option("chunk_size", f"lmcache model: chunk_size in tokens, a multiple of the block size "
           f"(default the smallest multiple >= {DEFAULT_CHUNK_SIZE}: {DEFAULT_CHUNK_SIZE} for "
           f"16-token blocks, 512 for 512)", positive_int, _default_chunk_size,
           check=_chunk_on_grid),
    Option("save_unfull_chunk", "lmcache model: store a prompt's partial last chunk (default "
           "off, as LMCache >= 0.4)", default=False, boolean=True),
)


def _vllm_tier(capacity: int, block_size: int = 16, output_tokens: int = 1,
               vllm_version: str = DEFAULT_VLLM_VERSION):
    from pipeline.components.tier_objects import VllmTier
    return VllmTier(capacity, block_size, output_tokens, vllm_version)


def _lmcache_tier(capacity: int, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  save_unfull_chunk: bool = False):
    """LMCache's CPU backend; the caller's chunk keys decide whether a partial last chunk
    is stored (``save_unfull_chunk``)."""
    from pipeline.components.tier_objects import LMCacheTier
    return LMCacheTier(capacity, chunk_size)


def _llamacpp_tier(capacity: int | None, state_size=None):
    """llama.cpp's live context and RAM prompt cache of ``capacity`` bytes (None: no RAM
    cache); it serves ``request(prompt, completion)`` (token sequences, not keys)."""
    from pipeline.components.llamacpp_cache import LlamaCppPromptCache
    return LlamaCppPromptCache(capacity, state_size)


def _two_tier_cache(gpu: int, cpu: int = 0):
    from kvlab.kvsim import TwoTierCache
    return TwoTierCache(gpu, cpu)


def policy_entry(name: str, cls: type, summary: str, onepass: OnePass | None = None,
                 replay_kernel: Callable | None = None,
                 block_kernel: Callable | None = None) -> CacheModel:
    """The entry of a policy of the family: its class is its tier and the reference of
    every fast path it declares (``onepass``: ``pipeline.onepass.stack_passes``;
    ``replay_kernel``: ``pipeline.policies.kernels``; ``block_kernel``:
    ``pipeline.policies.kernels.blocks``). Without a fast path the class is replayed."""
    return CacheModel(name, summary, "block", tier=cls,
                      gpu=policy_gpu_model(name, cls, block_kernel),
                      cpu=policy_cpu_model(name, cls, block_kernel), onepass=onepass,
                      replay_kernel=replay_kernel, block_kernel=block_kernel, policy=True)


def _builtin() -> list[CacheModel]:
    block_lru_gpu, block_lru_cpu = block_onepass.block_lru_gpu, block_onepass.block_lru_cpu
    k, b = kernels, block_kernels
    policies = [
        policy_entry("lru", LRU, "least recently used", LRU_PASS, k.replay_lru, b.block_lru),
        policy_entry("fifo", FIFO, "first in, first out", None, k.replay_fifo, b.block_fifo),
        policy_entry("mru", MRU, "most recently used", MRU_PASS, k.replay_mru, b.block_mru),
        policy_entry("lfu", LFU, "least frequently used", None, k.replay_lfu, b.block_lfu),
        policy_entry("clock", Clock, "CLOCK (second chance)", None, k.replay_clock,
                     b.block_clock),
        policy_entry("sieve", Sieve, "SIEVE", None, k.replay_sieve, b.block_sieve),
        policy_entry("s3fifo", S3FIFO, "S3-FIFO", None, k.replay_s3fifo),
        policy_entry("arc", ARC, "ARC", None, k.replay_arc),
        policy_entry("opt", OPT, "Belady's OPT (the ceiling)", OPT_PASS, k.replay_opt,
                     b.block_opt),
    ]
    # lru in block mode is the one-pass block-lru engine (proven equal to its class replay)
    policies[0] = replace(policies[0], gpu=block_lru_gpu, cpu=block_lru_cpu)
    return [
        CacheModel("block-lru", "one-pass block LRU, CPU tier fed past the GPU hit: no "
                   "engine's rules, not a bound", "block", tier=LRU,
                   gpu=block_lru_gpu, cpu=block_lru_cpu),
        CacheModel("block-lru-replay", "block-lru replayed literally (reference)", "block",
                   tier=LRU, gpu=block_replay.replay_gpu, cpu=block_replay.replay_cpu),
        CacheModel("vllm", "vLLM's v1 block allocator (one pass)", "block", tier=_vllm_tier,
                   gpu=vllm_fast.vllm_gpu, order=TAIL_FIRST, options=VLLM_OPTIONS),
        CacheModel("vllm-replay", "vLLM's v1 block allocator replayed literally", "block",
                   tier=_vllm_tier, gpu=vllm_gpu.replay_gpu, order=TAIL_FIRST,
                   options=VLLM_OPTIONS),
        CacheModel("lmcache", "LMCache's local CPU backend (compiled)", "chunk",
                   tier=_lmcache_tier, cpu=lmcache_fast.lmcache_cpu, order=HEAD_FIRST,
                   options=LMCACHE_OPTIONS),
        CacheModel("lmcache-replay", "LMCache's local CPU backend replayed literally", "chunk",
                   tier=_lmcache_tier, cpu=lmcache_cpu.replay_cpu, order=HEAD_FIRST,
                   options=LMCACHE_OPTIONS),
        *policies,
        CacheModel("llamacpp", "llama.cpp's prompt cache (live context + RAM cache)",
                   "context", tier=_llamacpp_tier, measured=True),
        CacheModel("two-tier", "kvlab's TwoTierCache in tokens", "object",
                   tier=_two_tier_cache, measured=True),
    ]


#: name -> entry, in display order
MODELS: dict[str, CacheModel] = {model.name: model for model in _builtin()}
_BUILTIN = frozenset(MODELS)

#: old name -> new name, accepted one more release with a warning
#: (``pipeline.catalog.model_options.ModelName``)
DEPRECATED_NAMES: dict[str, str] = {"ideal": "block-lru", "ideal-replay": "block-lru-replay"}


def describe(name: str, options: Mapping | None = None) -> str:
    """``name`` and, in parentheses, what it models: the engine and version for vllm and
    lmcache, else the entry's summary (``models_line``)."""
    options = options or {}
    if name in ("vllm", "vllm-replay"):
        what = f"vLLM {options.get('vllm_version', DEFAULT_VLLM_VERSION)} block pool"
    elif name in ("lmcache", "lmcache-replay"):
        what = "LMCache LocalCPUBackend"
    else:
        return f"{name} ({entry(name).summary})"
    return f"{name} ({what}{', replayed literally' if name.endswith('-replay') else ''})"


def models_line(gpu: str, cpu: str | None, gpu_options: Mapping | None = None,
                cpu_options: Mapping | None = None) -> str:
    """The first line of every answer that sizes a tier: ``models: GPU vllm (vLLM 0.33.0
    block pool), CPU lmcache (LMCache LocalCPUBackend)``; ``cpu`` None: no CPU tier."""
    shown = describe(cpu, cpu_options) if cpu is not None else "none (no CPU tier)"
    return f"models: GPU {describe(gpu, gpu_options)}, CPU {shown}"


def models_field(gpu: str, cpu: str | None) -> dict[str, str | None]:
    """The ``models`` field of those answers' JSON documents: ``{"gpu": ..., "cpu": ...}``."""
    return {"gpu": gpu, "cpu": cpu}


def register(model: CacheModel) -> CacheModel:
    """Add ``model`` (ValueError when its name is taken); return it."""
    if model.name in MODELS:
        raise ValueError(f"cache model {model.name!r} is already registered")
    MODELS[model.name] = model
    return model


def added() -> list[CacheModel]:
    """The entries registered at run time (``register``), in registration order."""
    return [model for name, model in MODELS.items() if name not in _BUILTIN]


def unregister(name: str) -> None:
    """Drop a registered model (KeyError when absent)."""
    del MODELS[name]


def entry(name: str) -> CacheModel:
    """The entry of ``name``; ValueError naming the accepted ones otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown cache model {name!r}; accepted: "
                         f"{', '.join(MODELS)}") from None


def names(**wanted: bool) -> list[str]:
    """Names of the entries whose fields are truthy as asked, e.g. ``names(policy=True)``,
    ``names(gpu=True)`` (a block-mode GPU model), in display order."""
    return [name for name, model in MODELS.items()
            if all(bool(getattr(model, key)) == value for key, value in wanted.items())]


class _View(Mapping):
    """A read-only mapping name -> ``pick(entry)`` over the entries where it is not None,
    read afresh at every use."""

    def __init__(self, pick: Callable[[CacheModel], object]) -> None:
        self._pick = pick

    def _items(self) -> dict:
        return {name: value for name, model in MODELS.items()
                if (value := self._pick(model)) not in (None, ())}

    def __getitem__(self, name: str):
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)})"


#: block-mode GPU models: name -> f(stream, capacities, order, **options) -> (K, R) tokens
GPU_MODELS: Mapping[str, Callable] = _View(lambda model: model.gpu)
#: block-mode CPU models: name -> f(stream, gpu_hit_tokens, capacities, order, **options)
CPU_MODELS: Mapping[str, Callable] = _View(lambda model: model.cpu)
#: the policy family: name -> tier class (every class takes ``(capacity)``, OPT ``future``)
POLICIES: Mapping[str, type] = _View(lambda model: model.tier if model.policy else None)
#: model name -> the option names (argparse dests) it takes
MODEL_OPTIONS: Mapping[str, tuple[str, ...]] = _View(lambda model: model.option_names)
#: model name -> the only order it follows (the engine's own)
MODEL_ORDERS: Mapping[str, str] = _View(lambda model: model.order)


def options() -> dict[str, Option]:
    """Every declared option, by dest, in registry order (each once)."""
    found: dict[str, Option] = {}
    for model in MODELS.values():
        for option in model.options:
            found.setdefault(option.dest, option)
    return found


def option_owner(dest: str) -> str:
    """The first model (registry order) that declares option ``dest``."""
    return next(name for name, model in MODELS.items() if dest in model.option_names)


def policy_names() -> list[str]:
    """The policy family's names, in display order."""
    return names(policy=True)


def make_policy(name: str, capacity: float, future: Sequence[Hashable] | None = None):
    """A fresh tier of policy ``name``; ``future`` (the key sequence) is needed by OPT."""
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}")
    if getattr(cls, "needs_future", False):
        if future is None:
            raise ValueError(f"policy {name!r} needs the future key sequence")
        return cls(capacity, future)
    return cls(capacity)


def make_tier(name: str, capacity: float, **options: object):
    """A fresh tier object of model ``name`` (``lookup``/``place``; a policy's also
    ``access``): a policy's class, or an engine's (``pipeline.components.tier_objects``)
    with its options; OPT takes ``future=``. ``capacity`` is in the entry's sizes: a policy's
    in the sizes it is given (blocks when every size is 1), vllm's and lmcache's in tokens.
    Keys are placed in the tier's touch order by the caller. ValueError for an unknown name."""
    model = entry(name)
    if model.tier is None:
        raise ValueError(f"cache model {name!r} has no tier object")
    if getattr(model.tier, "needs_future", False):
        return make_policy(name, capacity, options.get("future"))
    return model.tier(capacity, **options)
