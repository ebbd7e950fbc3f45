"""KV sizes and capacity parsing: the lab's numbers, every preset's formula, the units."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.sizes import units
from pipeline.sizes.units import KVSize, capacity_list, parse_capacity, preset

LAB = preset("qwen2.5-1.5b")


def test_lab_model_bytes_per_token():
    assert LAB.bytes_per_token == 2 * 28 * 2 * 128 * 2 == 28_672
    assert "2 x 28 layers x 2 KV heads x 128 head dim x 2 bytes" in LAB.formula


def test_lab_document_is_0_1299_gib():
    assert round(LAB.bytes(4864) / 2**30, 4) == 0.1299


def test_lmcache_1_5_gb_holds_56173_tokens():
    # LMCache's max_local_cpu_size 1.5 "GB" is 1.5 x 2^30 bytes: the lab's "about 56000".
    assert parse_capacity("1.5GiB").tokens(LAB) == 56_173 == int(1.5 * 2**30) // 28_672


def test_lab_working_set_is_1_34_gib():
    assert round(LAB.bytes(50_110) / 2**30, 2) == 1.34
    assert units.format_bytes(LAB.bytes(50_110)) == "1.34 GiB (1.44 GB)"


@pytest.mark.parametrize("name, expected", [
    ("qwen2.5-0.5b", 2 * 24 * 2 * 64 * 2), ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),
    ("qwen2.5-72b", 2 * 80 * 8 * 128 * 2), ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),
    ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2), ("mistral-7b-v0.3", 2 * 32 * 8 * 128 * 2),
    ("DeepSeek-V3", (512 + 64) * 61 * 2)])
def test_presets(name, expected):
    kv = preset(name)
    assert kv.bytes_per_token == expected
    assert kv.formula.startswith("MLA" if "deepseek" in name.lower() else "standard")
    assert kv.source.startswith("https://huggingface.co/")


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown model preset 'gpt-5'.*qwen2.5-1.5b"):
        preset("gpt-5")


def test_units_decimal_and_binary():
    assert parse_capacity("40GB").size_bytes == 40 * 10**9
    assert parse_capacity("512MiB").size_bytes == 512 * 2**20
    assert parse_capacity("1 kib").size_bytes == 1024
    assert parse_capacity("56000").tokens(None) == 56000
    assert parse_capacity("56_000 tokens").tokens(None) == 56000
    assert "GB = 10^9 bytes" in parse_capacity("40GB").describe(LAB)
    assert "GiB = 2^30 bytes" in parse_capacity("1.5GiB").describe(LAB)


@pytest.mark.parametrize("text", ["-1", "-1.5GiB", "1.5G", "abc", "", "1.5", "nan", "inf",
                                  "1e99", "GiB", "1.5 GiBs"])
def test_bad_capacities(text):
    with pytest.raises(ValueError):
        parse_capacity(text)


def test_size_needs_a_model():
    with pytest.raises(ValueError, match="give a model"):
        parse_capacity("1GiB").tokens(None)


@given(st.integers(0, 10**6), st.sampled_from(sorted(units.UNITS)),
       st.integers(1, 10**6))
def test_size_is_floor_of_bytes_over_bytes_per_token(count, unit, per_token):
    kv = KVSize("m", per_token, "test")
    assert parse_capacity(f"{count}{unit}").tokens(kv) == count * units.UNITS[unit] // per_token


@given(st.integers(0, 10**4), st.integers(0, 99), st.integers(1, 10**5))
def test_fractional_sizes_are_exact(whole, hundredths, per_token):
    # Decimal arithmetic: 1.25GiB is exactly 1.25 * 2^30 bytes, no float rounding.
    kv = KVSize("m", per_token, "test")
    size = parse_capacity(f"{whole}.{hundredths:02d}GiB").size_bytes
    assert size == (whole * 100 + hundredths) * 2**30 // 100


def test_capacity_list_factory():
    parse = capacity_list(LAB)
    assert parse("21520, 1.5GiB,0") == [21520, 56173, 0]
    with pytest.raises(argparse.ArgumentTypeError, match=">= 0"):
        parse("1,-2")
    with pytest.raises(argparse.ArgumentTypeError, match="empty"):
        parse(" , ")


def test_kv_from_args():
    parser = argparse.ArgumentParser()
    units.add_kv_arguments(parser)
    assert units.kv_from_args(parser.parse_args([])) == LAB
    assert units.kv_from_args(parser.parse_args(["--kv-shape", "28,2,128,bf16"])) \
        .bytes_per_token == 28_672
    assert units.kv_from_args(parser.parse_args(["--kv-shape", "28,2,128,fp32"])) \
        .bytes_per_token == 57_344
    assert units.kv_from_args(parser.parse_args(["--kv-bytes-per-token", "100"])) \
        .bytes_per_token == 100
    for argv in (["--model", "nope"], ["--kv-shape", "1,2"], ["--kv-shape", "1,2,3,fp7"]):
        with pytest.raises(SystemExit):               # usage errors: argparse's types
            parser.parse_args(argv)
    for dest, value, match in (("model", "nope", "--model"), ("kv_shape", "1,2", "--kv-shape")):
        given = {"kv_bytes_per_token": None, "kv_shape": None, "model": None, dest: value}
        with pytest.raises(ValueError, match=match):   # a namespace built by hand
            units.kv_from_args(argparse.Namespace(**given))
    with pytest.raises(SystemExit):                   # a usage error: argparse's type
        parser.parse_args(["--kv-bytes-per-token", "0"])
    with pytest.raises(ValueError, match="--kv-bytes-per-token"):   # a namespace built by hand
        units.kv_from_args(argparse.Namespace(kv_bytes_per_token=0, kv_shape=None, model=None))


def test_deferred_capacity_list():
    parsed = units.capacities("21520,1.5GiB")
    assert [c.tokens(LAB) for c in parsed] == [21520, 56173]
    assert parsed[1].describe(LAB).startswith("56,173 tokens (1.5 GiB")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown unit"):
        units.capacities("1,2 parsecs")
