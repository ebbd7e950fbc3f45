"""The cache-model interface: tiers and the ``Tier`` base, the one registry of cache models,
kvlab's two-tier cache at every capacity pair and the one-pass LRU stack distances."""
