"""Engine components (layer: components): each engine's cache rules, written once, over a
``pipeline.workloads.stream.BlockStream``; their registry entries are ``entries.py``.

* ``vllm_gpu``: vLLM's v1 block allocator replayed literally (the readable reference);
  ``vllm_layout`` / ``vllm_compiled``: its block layout and the allocator in numba;
  ``kpool``: the engine loop's compiled block pool (with ``kjit`` and ``engine_layout``,
  the engine state's array layout).
* ``lmcache_cpu``: LMCache's local CPU backend, replayed literally; ``lmcache_fast``: the
  same in numba; ``ktier`` / ``kgeneric``: the engine loop's compiled CPU tier and the
  bridge to any tier object.
* ``block_lru_replay``: the block-lru rules replayed literally (reference);
  ``llamacpp_cache``: llama.cpp's prompt cache; ``tier_objects``: vLLM's pool and LMCache's
  backend as tier objects (``lookup``/``place``).
"""
