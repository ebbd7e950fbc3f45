"""The tiers a cost search compares (``pipeline.fleet.cost_tiers``), and ``fleet --cost``
pricing a tier stack's CPU and disk."""

from __future__ import annotations

import argparse
import json

import pytest

from conftest import cli_in_process

from pipeline.fleet.cost_tiers import engine_tier_tokens, resolve_tier_options, \
    tier_option_list

LLAMA = dict(model="llama-3.1-8b", block_size=16, kv_bytes_per_token=None, kv_shape=None,
             model_config=None, cpu=0, cpu_shared=False)


def test_tier_options_parse_each_kind_and_resolve_to_tokens():
    options = tier_option_list("none, 2GiB, native:1GiB, cpu:1GiB+disk:2GiB:5:0.2, 131072")
    assert [o.kind for o in options] == ["none", "lmcache", "native", "stack", "lmcache"]
    choices = resolve_tier_options(argparse.Namespace(**LLAMA), options)
    # Llama-3.1-8B: 131,072 bytes per token, so 1 GiB = 8,192 tokens; by CPU tokens, then
    # disk tokens, then kind
    assert [(c.kind, c.cpu_tokens, c.disk_tokens) for c in choices] == [
        ("none", 0, 0), ("native", 8192, 0), ("stack", 8192, 16384), ("lmcache", 16384, 0),
        ("lmcache", 131072, 0)]
    native = choices[1].with_args(argparse.Namespace(**LLAMA))
    assert (native.kv_offloading_size, native.cpu, native.tiers) == (1.0, 0, None)
    stack = choices[2].with_args(argparse.Namespace(**LLAMA))
    assert [spec.kind for spec in stack.tiers] == ["cpu", "disk"] and stack.cpu == 0
    assert engine_tier_tokens(stack, 131072) == (8192, 16384)
    assert engine_tier_tokens(native, 131072) == (8192, 0)


def test_the_same_tier_twice_is_searched_once():
    choices = resolve_tier_options(argparse.Namespace(**LLAMA),
                                   tier_option_list("1GiB,8192,512blocks,none,none"))
    assert [(c.kind, c.cpu_tokens) for c in choices] == [("none", 0), ("lmcache", 8192)]


@pytest.mark.parametrize("text", ["", "cpu:1GiB+cpu:2GiB", "native:", "4XB",
                                  "cpu:1GiB+disk:1GiB:0:1"])
def test_tier_options_refuse_bad_items(text):
    with pytest.raises(argparse.ArgumentTypeError):
        tier_option_list(text)


def test_fleet_cost_prices_a_tier_stack_cpu_and_disk(tmp_path):
    done = cli_in_process("fleet", "--pattern", "long-doc-qa",
         "--num-documents", "3", "--document-length", "1000", "--repeat-count", "2",
         "--model", "llama-3.1-8b", "--jobs", "1", "--instances", "1", "--gpu", "70blocks",
         "--tier", "cpu:512MiB", "--tier", "disk:4GiB:5:0.2", "--gpu-cost-per-hour", "2",
         "--cpu-memory-cost-per-gib-hour", "0.5", "--disk-cost-per-gib-hour", "0.25",
         "--json", "--out", str(tmp_path / "f"))
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    # 1 GPU + half a GiB of CPU memory + 4 GiB of disk
    assert row["usd_per_hour"] == pytest.approx(2 + 0.5 * 0.5 + 0.25 * 4)
    assert row["cpu_hit_tokens"] > 0
