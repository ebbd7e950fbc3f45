"""Benchmarks (layer: commands): scripts that print figures, never tests.

``python -m pipeline bench`` (``pipeline.bench.run``) times the default run and then runs
``pipeline.bench.curve`` (one-pass LRU curves against kvlab's LRUCache and libCacheSim);
``blocks``, ``engine_caches``, ``policies``, ``trace`` and ``fleet`` time the others.
"""
