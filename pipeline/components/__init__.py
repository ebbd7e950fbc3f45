"""Engine components (layer: components): each engine's cache rules, written once and
compiled, over a ``pipeline.workloads.stream.BlockStream``; their registry entries are
``entries.py``. Literal Python ports are test oracles (``tests/oracles/``).

* ``kpool``: vLLM's v1 block pool, the engine loop's (with ``kjit`` and ``engine_layout``,
  the engine state's array layout); ``vllm_gpu`` runs it one request at a time (partial tail
  slot, null block, hit cap, free-queue placement by version) and as a tier object
  (``VllmTier``); ``vllm_layout``: what each request caches.
* ``ktier``: LMCache's local CPU backend (lookup/store over a run of chunk keys, hashed or
  dense); ``lmcache`` runs it in block mode and as a tier object (``LMCacheTier``);
  ``kgeneric``: the one place a tier plugs into the engine loop.
* ``vllm_offload`` (+ ``_kernels``, ``_policies``): vLLM's native CPU offload manager
  (``lru``, ``arc``), compiled and allocation-free; not yet wired into the engine loop.
* ``sglang_kradix``: SGLang 0.5.23's radix prefix tree over flat arrays (the rules of its
  ``radix_cache.py``; ``sglang_kradix_layout`` the arrays, ``sglang_kradix_heap`` the
  eviction heap, ``sglang_kradix_tree.RadixTree`` the Python-facing tree); ``sglang_ksched`` its scheduler loop over it, the
  ``sglang`` engine's (over ``sglang_kstate``, ``sglang_kadmit``, ``sglang_kbatch``);
  ``sglang_settings`` their settings; ``sglang_gpu`` the tree as a GPU model
  (docs/sglang.md).
* ``llamacpp_cache``: llama.cpp's prompt cache.
"""
