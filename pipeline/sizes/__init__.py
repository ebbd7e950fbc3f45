"""Sizes and limits: capacities in tokens or bytes, model presets (KV bytes per token),
the capacity grids and every limit the commands enforce."""
