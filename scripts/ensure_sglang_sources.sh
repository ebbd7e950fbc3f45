#!/usr/bin/env bash
# Put SGLang 0.5.23's Python files (its wheel's .py files) in ~/.cache/kvlab/sglang-0.5.23,
# for the tests that run SGLang's own RadixCache on CPU (tests/test_sglang_radix.py;
# scripts/sglang_reference.py). Version: $1, default 0.5.23; cache folder: $KVLAB_CACHE.
exec "$(dirname "$0")/ensure_wheel_sources.sh" sglang "${1:-0.5.23}" sglang/srt/mem_cache/radix_cache.py
