"""Block-level prefix caching: requests as prefix-chained blocks, two tiers,
tail-first or head-first order per tier.

``stream`` turns a block frame into arrays, ``lru_depths`` (with ``bands``) gives every
capacity from one pass of LRU depths (the literal replay it equals is a test oracle,
``tests/oracles/block_lru.py``), ``model_api``
holds the model API (its ``GPU_MODELS`` / ``CPU_MODELS`` are views of ``pipeline.catalog``),
``command`` is ``python -m pipeline blocks``.
"""
