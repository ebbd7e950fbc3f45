"""Engine-faithful cache models for block mode: vLLM's GPU allocator, LMCache's CPU tier.

* ``vllm_gpu``: vLLM's v1 block allocator replayed literally (partial tail slot, null block,
  hit cap, free-queue placement by version); the readable reference.
* ``vllm_layout`` / ``vllm_fast``: its one-pass engine (block depths + a scalar per capacity);
  ``vllm_compiled``: the allocator in numba, for the capacities the one-pass form cannot do.
* ``lmcache_cpu``: LMCache's local CPU backend under vLLM v1, replayed literally;
  ``lmcache_fast``: the same replay in numba (its rules are no stack algorithm).
* ``options``: the engines' CLI options and checks; ``bench``: fast vs literal timings.

All read a ``pipeline.blocks.stream.BlockStream`` and follow the model API of
``pipeline.blocks.models`` (registered there as vllm, vllm-replay, lmcache, lmcache-replay).
"""
