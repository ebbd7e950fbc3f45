"""Block-level prefix caching: requests as prefix-chained blocks, two tiers,
tail-first or head-first order per tier.

``stream`` turns a block frame into arrays, ``literal_replay`` replays the rules literally
(the reference), ``lru_depths`` gives every capacity from one pass of LRU depths, ``model_api``
holds the model API (its ``GPU_MODELS`` / ``CPU_MODELS`` are views of ``pipeline.catalog``),
``command`` is ``python -m pipeline blocks``.
"""
