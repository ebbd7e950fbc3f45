"""The cache-model interface (layer: core): tiers and the ``Tier`` base (``tiers``) and the
registry's interface (``registry``; the entries are collected by ``pipeline.catalog``)."""
