"""Engine-faithful cache models for block mode: vLLM's GPU allocator, LMCache's CPU tier.

* ``vllm_gpu``: vLLM's v1 block allocator replayed literally (partial tail slot, null block,
  hit cap, free-queue placement by version); the readable reference.
* ``vllm_layout`` / ``vllm_fast``: its one-pass engine (block depths + a scalar per capacity);
  ``vllm_compiled``: the allocator in numba, for the capacities the one-pass form cannot do.
* ``lmcache_cpu``: LMCache's local CPU backend under vLLM v1, replayed literally;
  ``lmcache_fast``: the same replay in numba (its rules are no stack algorithm).
* ``options``: the models' CLI options and checks, built from the registry's declared
  options; ``tier_objects``: vLLM's pool and LMCache's backend as tier objects
  (``lookup``/``place``); ``curves``: their curves for the report; ``bench``: fast vs
  literal timings.

All read a ``pipeline.workloads.stream.BlockStream`` and follow the model API of
``pipeline.catalog.model_api`` (entries of ``pipeline.catalog``: vllm, vllm-replay, lmcache,
lmcache-replay).
"""
