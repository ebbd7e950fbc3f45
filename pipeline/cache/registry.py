"""The registry's interface: what a cache model's entry says (``CacheModel``, ``Option``), the
table of entries (``MODELS``) and every lookup over it. It names no model: each package
declares its own entries (``pipeline/components/entries.py``, ``pipeline/policies/entries.py``,
``pipeline/onepass/entries.py``) and ``pipeline.catalog`` collects them in one place, in
display order; callers read the registry through ``pipeline.catalog``.

An entry says how to make the model's tier (an object with ``lookup``/``place``, and
``access`` for the policies: ``pipeline.cache.tiers.Tier``), its fast paths, each optional
(block mode: a GPU model ``f(stream, capacities, order, **options)`` and a CPU model
``f(stream, gpu_hit_tokens, capacities, order, **options)``, see
``pipeline.catalog.model_api``, and for a policy the compiled ``block_kernel`` they run; per
access: a ``onepass`` engine for every capacity and a compiled ``replay_kernel`` at one
capacity: a caller checks that the one it wants is there), its unit, the one touch order it
follows (engines), its declared options (``Option``: the CLI flags and checks are built from
them, ``pipeline.catalog.model_options``), what it models given its options (``describes``) and
where it is used (a ``policy`` of the family, a ``measured`` config model).

``register(entry)`` adds one (a new policy is one module plus one line in its package's
``entries.py``, or one ``register`` call at run time) and ``unregister(name)`` drops it. The
views ``GPU_MODELS``, ``CPU_MODELS``, ``POLICIES``, ``MODEL_OPTIONS`` and ``MODEL_ORDERS`` are
read from the entries at every use, so a registered model appears in each at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Option", "CacheModel", "MODELS", "BUILTIN_NAMES", "DEPRECATED_NAMES", "register",
           "unregister", "added", "entry", "names",
           "GPU_MODELS", "CPU_MODELS", "POLICIES", "MODEL_OPTIONS", "MODEL_ORDERS",
           "options", "option_owner", "describe", "models_line", "models_field", "make_policy",
           "make_tier", "policy_names"]


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
    onepass: object | None = None            # per access: every capacity in one exact pass
    #                                          (a ``pipeline.onepass.stack_passes.OnePass``)
    replay_kernel: Callable | None = None    # per access: compiled replay at one capacity
    block_kernel: Callable | None = None     # block mode: the compiled kernel of gpu and cpu
    policy: bool = False                     # one of the policy family (``policies``)
    measured: bool = False                   # a measured config's model (sidecar ``model``)
    describes: Callable[[Mapping], str] | None = None   # options -> what it models (else summary)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(option.dest for option in self.options)


#: name -> entry, in display order (filled by ``pipeline.catalog``)
MODELS: dict[str, CacheModel] = {}
#: the names ``pipeline.catalog`` registered (the built-in entries)
BUILTIN_NAMES: set[str] = set()

#: old name -> new name, accepted one more release with a warning
#: (``pipeline.catalog.model_options.ModelName``)
DEPRECATED_NAMES: dict[str, str] = {"ideal": "block-lru", "ideal-replay": "block-lru-replay"}


def describe(name: str, options: Mapping | None = None) -> str:
    """``name`` and, in parentheses, what it models: the entry's ``describes(options)`` (the
    engine and version for vllm and lmcache; ``, replayed literally`` for a ``-replay``
    name), else its summary (``models_line``)."""
    model = entry(name)
    if model.describes is None:
        return f"{name} ({model.summary})"
    replayed = ", replayed literally" if name.endswith("-replay") else ""
    return f"{name} ({model.describes(options or {})}{replayed})"


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
    return [model for name, model in MODELS.items() if name not in BUILTIN_NAMES]


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
    ``access``): a policy's class, or an engine's (``vllm_gpu.VllmTier``, ``lmcache.LMCacheTier``)
    with its options; OPT takes ``future=``. ``capacity`` is in the entry's sizes: a policy's
    in the sizes it is given (blocks when every size is 1), vllm's and lmcache's in tokens.
    Keys are placed in the tier's touch order by the caller. ValueError for an unknown name."""
    model = entry(name)
    if model.tier is None:
        raise ValueError(f"cache model {name!r} has no tier object")
    if getattr(model.tier, "needs_future", False):
        return make_policy(name, capacity, options.get("future"))
    return model.tier(capacity, **options)
