#!/usr/bin/env bash
# Put vLLM 0.33.0's Python files (its wheel's .py files, about 330 MB downloaded once) in
# ~/.cache/kvlab/vllm-0.33.0, for the tests that run vLLM's own scheduler, allocator and
# offloading manager on CPU (tests/test_engine_vllm_equal.py, tests/test_vllm_offload.py;
# scripts/stub_importer.py). Version: $1, default 0.33.0; cache folder: $KVLAB_CACHE.
exec "$(dirname "$0")/ensure_wheel_sources.sh" vllm "${1:-0.33.0}" vllm/v1/core/kv_cache_manager.py
