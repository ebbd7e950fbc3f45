"""Engine-faithful cache models for block mode (issues 15 and 16).

``vllm_gpu`` replays vLLM's v1 block allocator literally (partial tail slot, null block, hit
cap); ``vllm_fast`` is its one-pass engine. ``lmcache_cpu`` replays LMCache's local CPU
backend under vLLM v1 literally; ``lmcache_fast`` is the same replay compiled with numba (the
rules are not a stack algorithm, so no one-pass form is exact). All four read a
``pipeline.blocks.stream.BlockStream`` and follow the model API of ``pipeline.blocks.models``.
"""
