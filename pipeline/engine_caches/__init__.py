"""Engine-faithful cache models for block mode: vLLM's GPU allocator, LMCache's CPU tier.

* ``vllm_gpu``: vLLM's v1 block pool (the engine's compiled ``pipeline.engine.kpool``) run
  one request at a time (partial tail slot, null block, hit cap, free-queue placement by
  version), and as a tier object (``VllmTier``); ``vllm_layout``: what each request caches.
* ``vllm_fast``: every capacity at once (block depths + a scalar per capacity), replaying
  the pool where that form is not exact.
* ``lmcache``: LMCache's local CPU backend under vLLM v1 (its one compiled implementation,
  ``pipeline.engine.ktier``) in block mode and as a tier object (``LMCacheTier``; its rules
  are no stack algorithm: one replay per capacity).
* ``options``: the models' CLI options and checks, built from the registry's declared
  options; ``curves``: their curves for the report; ``bench``: their timings.

All read a ``pipeline.blocks.stream.BlockStream`` and follow the model API of
``pipeline.blocks.model_api`` (entries of ``pipeline.cache.registry``: vllm, vllm-replay,
lmcache).
"""
