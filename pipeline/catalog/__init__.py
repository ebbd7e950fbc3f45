"""The catalog of cache models: every package's registry entries, collected in one place.

``pipeline.cache.registry`` is the interface (``CacheModel``, ``Option``, ``MODELS`` and the
lookups over it) and names no model; each package declares its own entries
(``pipeline.components.entries``, ``pipeline.policies.entries``, ``pipeline.onepass.entries``)
and this module registers them, in display order, on its import. Callers read the registry
here (``from pipeline import catalog``): the interface is re-exported, so
``catalog.entry(name)``, ``catalog.GPU_MODELS``, ``catalog.register(...)`` and the rest see
every built-in entry. Beside it: ``model_api`` (a block-mode model run by name),
``policy_replay`` (a policy's hits by name, on the fast path it declares) and ``options``
(every model's CLI options, built from the entries' declared options).
"""

from __future__ import annotations

from pipeline.cache.registry import (BUILTIN_NAMES, CPU_MODELS, DEPRECATED_NAMES, GPU_MODELS, MODEL_OPTIONS,
                                     MODEL_ORDERS, MODELS, POLICIES, CacheModel, Option,
                                     describe, entry, make_policy, make_tier, models_field,
                                     models_line, names, option_owner, options, policy_names,
                                     register, unregister, added)
from pipeline.components import entries as components
from pipeline.components.entries import output_tokens, vllm_version
from pipeline.onepass import entries as onepass
from pipeline.policies import entries as policies
from pipeline.policies.entries import policy_entry

__all__ = ["Option", "CacheModel", "MODELS", "DEPRECATED_NAMES", "register", "unregister", "added",
           "entry", "names", "GPU_MODELS", "CPU_MODELS", "POLICIES", "MODEL_OPTIONS",
           "MODEL_ORDERS", "options", "option_owner", "describe", "models_line",
           "models_field", "make_policy", "make_tier", "policy_names", "policy_entry",
           "vllm_version", "output_tokens", "BUILTIN"]

#: every built-in entry, in display order, each with the one-pass fast paths declared for it
BUILTIN: tuple[CacheModel, ...] = tuple(onepass.with_fast_paths(model) for model in (
    onepass.BLOCK_LRU, components.BLOCK_LRU_REPLAY, onepass.VLLM, components.VLLM_REPLAY,
    components.SGLANG_RADIX, components.LMCACHE, *policies.ENTRIES, components.LLAMACPP,
    components.TWO_TIER))

for _model in BUILTIN:
    if _model.name not in MODELS:
        register(_model)
        BUILTIN_NAMES.add(_model.name)
del _model
