"""The one-pass engines (layer: engine loop / one-pass): every capacity of a cache in one exact
pass. ``stack_distance`` (+ ``stack_distance_kernels``: kvlab's LRU by byte-weighted stack
distances), ``two_tier`` (kvlab's TwoTierCache at every capacity pair), ``lru_depths`` and
``bands`` (block LRU), ``vllm_fast`` (vLLM's pool by block depths), ``stack_passes`` (+
``stack_kernels``: LRU, MRU and OPT per access); their registry entries are ``entries.py``."""
