"""Sizes and limits (layer: core): capacities in tokens or bytes, model presets (KV bytes per
token), GPU presets, vLLM's KV memory, the capacity grids and every limit the commands
enforce."""
