"""Block-level prefix caching: requests as prefix-chained blocks, two tiers,
tail-first or head-first order per tier.

``stream`` turns a block frame into arrays, ``model`` replays the rules literally (the
reference), ``onepass`` gives every capacity from one pass of LRU depths, ``models`` holds
the model API and registries, ``command`` is ``python -m pipeline blocks``.
"""
