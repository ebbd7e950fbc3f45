"""Engine-faithful cache models for block mode: vLLM's GPU allocator, LMCache's CPU tier.

* ``vllm_gpu``: vLLM's v1 block pool (the engine's compiled ``pipeline.engine.kpool``) run
  one request at a time (partial tail slot, null block, hit cap, free-queue placement by
  version), and as a tier object (``VllmTier``); ``vllm_layout``: what each request caches.
* ``vllm_fast``: every capacity at once (block depths + a scalar per capacity), replaying
  the pool where that form is not exact.
* ``lmcache_cpu``: LMCache's local CPU backend under vLLM v1, replayed literally;
  ``lmcache_fast``: the same replay in numba (its rules are no stack algorithm).
* ``options``: the models' CLI options and checks, built from the registry's declared
  options; ``tier_objects``: LMCache's backend as a tier object
  (``lookup``/``place``); ``curves``: their curves for the report; ``bench``: fast vs
  literal timings.

All read a ``pipeline.blocks.stream.BlockStream`` and follow the model API of
``pipeline.blocks.model_api`` (entries of ``pipeline.cache.registry``: vllm, vllm-replay, lmcache,
lmcache-replay).
"""
