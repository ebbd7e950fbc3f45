"""Every capacity option of ``blocks``, ``trace``, ``policies`` and ``measured`` takes tokens
or a size through the model's bytes per token (``pipeline.sizes.units.resolve_capacities``); the
output says the unit and the bytes per token; a bad size is one line naming the option."""

from __future__ import annotations

import argparse
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.sizes import units
from pipeline.cli import main
from pipeline.base.errors import CLIError

LAB_BPT = 28_672
SMALL_TRACE = ["trace", "--pattern", "zipf", "--num-documents", "3", "--document-length", "40",
               "--num-requests", "6", "--block-size", "16", "--no-report"]


def run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_lmcache_gb_is_two_to_the_thirty():
    cap = units.parse_capacity("1.5lmcacheGB")
    assert cap.size_bytes == int(1.5 * 2**30)
    assert cap.tokens(units.preset("qwen2.5-1.5b")) == 56_173
    text = cap.describe(units.preset("qwen2.5-1.5b"))
    assert "lmcacheGB = 2^30 bytes" in text and "max_local_cpu_size" in text
    assert units.parse_capacity("1.5GB").size_bytes == 1_500_000_000


@given(st.lists(st.one_of(st.integers(0, 10**7).map(str),
                          st.tuples(st.integers(0, 5000), st.sampled_from(sorted(units.UNITS)))
                          .map(lambda t: f"{t[0]}{t[1]}")), min_size=1, max_size=4),
       st.integers(1, 10**6))
def test_resolve_equals_literal_conversion(texts, per_token):
    """Each item becomes count (tokens) or floor(count x unit bytes / bytes per token)."""
    args = argparse.Namespace(model=None, kv_shape=None, kv_bytes_per_token=per_token,
                              gpu=units.capacities(",".join(texts)),
                              cpu=units.capacity(texts[0]), other=7)
    args, sizes = units.resolve_capacities(args, "gpu", "cpu", "other", "absent")

    def literal(text: str) -> int:
        digits = "".join(ch for ch in text if ch.isdigit())
        unit = text[len(digits):].upper()
        return int(digits) if not unit else int(digits) * units.UNITS[unit] // per_token
    assert args.gpu == [literal(t) for t in texts] and args.cpu == literal(texts[0])
    assert args.other == 7
    has_unit = any(not t.isdigit() for t in texts)
    assert bool(sizes) == has_unit
    if has_unit:
        assert sizes["kv"]["bytes_per_token"] == per_token
        assert [p["tokens"] for p in sizes["options"]["--gpu"]] == args.gpu


def test_resolve_bad_model_names_the_option():
    args = argparse.Namespace(model="nope", kv_shape=None, kv_bytes_per_token=None, gpu=None)
    with pytest.raises(CLIError, match="--model"):
        units.resolve_capacities(args, "gpu")


def test_blocks_sizes(capsys):
    tokens = run_json(capsys, ["blocks", "--docs", "2", "--tokens", "64", "--passes", "fwd",
                               "--gpu", "64", "--cpu", "0"])
    assert "sizes" not in tokens                        # tokens only: output unchanged
    sized = run_json(capsys, ["blocks", "--docs", "2", "--tokens", "64", "--passes", "fwd",
                              "--gpu", f"{64 * LAB_BPT}B", "--cpu", "0", "--model",
                              "qwen2.5-1.5b"])
    assert sized["passes"] == tokens["passes"]
    assert sized["sizes"]["options"]["--gpu"] == {
        "given": f"{64 * LAB_BPT}B", "tokens": 64, "bytes": 64 * LAB_BPT, "unit": "B",
        "unit_bytes": 1, "unit_meaning": "1 byte"}
    other = run_json(capsys, ["blocks", "--docs", "1", "--tokens", "16", "--passes", "fwd",
                              "--cpu", "1MiB", "--kv-bytes-per-token", "1024"])
    assert other["sizes"]["options"]["--cpu"]["tokens"] == 1024
    assert other["sizes"]["kv"]["bytes_per_token"] == 1024


def test_trace_sizes(capsys, tmp_path):
    out = run_json(capsys, [*SMALL_TRACE, "--out", str(tmp_path / "t"), "--json",
                            "--gpu", "0,4MB", "--cpu", "1.5lmcacheGB", "--model",
                            "llama-3.1-8b"])
    per_token = units.preset("llama-3.1-8b").bytes_per_token
    assert out["sizes"]["kv"]["name"] == "Llama-3.1-8B"
    assert [p["tokens"] for p in out["sizes"]["options"]["--gpu"]] == [0, 4 * 10**6 // per_token]
    assert out["sizes"]["options"]["--cpu"][0]["unit_meaning"].startswith("2^30 bytes")
    assert main([*SMALL_TRACE, "--out", str(tmp_path / "u"), "--gpu", "1GiB", "--model",
                 "qwen2.5-1.5b"]) == 0
    text = capsys.readouterr().out
    assert f"1GiB = {2**30 // LAB_BPT:,} tokens" in text and "GiB = 2^30 bytes" in text


def test_policies_sizes(capsys, tmp_path):
    out = run_json(capsys, ["policies", "--gpu-policy", "lru", "--docs", "3", "--tokens",
                            "100", "--capacities", "100,0.01GiB", "--cpu", "2KiB",
                            "--kv-bytes-per-token", "10", "--json", "--out", str(tmp_path)])
    caps = [row["capacity"] for row in out["curves"]]
    assert caps == [100, int(0.01 * 2**30) // 10]
    assert out["cpu"] == 2048 // 10
    assert out["sizes"]["options"]["--cpu"]["unit"] == "KiB"


def test_measured_sizes(capsys):
    assert main(["measured", "data/ttft.jsonl", "--cpu", "1.5lmcacheGB", "--model",
                 "qwen2.5-1.5b"]) == 0
    text = capsys.readouterr().out
    assert "lmcache CPU 56173 tokens" in text
    assert "--cpu 1.5lmcacheGB = 56,173 tokens (1,610,612,736 bytes; lmcacheGB = 2^30" in text


@pytest.mark.parametrize("argv, name", [
    (["blocks", "--cpu", "1.5parsec"], "--cpu"),
    (["blocks", "--gpu", "-1GiB"], "--gpu"),
    (["blocks", "--gpu", "1GiB", "--model", "nope"], "--model"),
    ([*SMALL_TRACE, "--gpu", "1,2GiBs"], "--gpu"),
    ([*SMALL_TRACE, "--cpu-sweep-gpu", "x1"], "--cpu-sweep-gpu"),
    (["policies", "--capacities", "1,1.5 GiB GiB"], "--capacities"),
    (["policies", "--cpu", "1e999GB"], "--cpu"),
    (["policies", "--trace", "data/ttft.jsonl", "--capacities", "1GiB"], "--capacities"),
    (["measured", "data/ttft.jsonl", "--gpu", "2..5GB"], "--gpu"),
    (["measured", "data/ttft.jsonl", "--cpu", "1GiB", "--kv-shape", "1,2"], "--kv-shape"),
])
def test_bad_size_is_one_line_and_writes_nothing(capsys, tmp_path, argv, name):
    out = tmp_path / "out"
    extra = {"trace": ["--out", str(out)], "policies": ["--out", str(out)],
             "measured": ["--json", str(out)], "blocks": []}[argv[0]]
    try:
        status = main([*argv, *extra])
    except SystemExit as exc:
        status = exc.code
    assert status not in (0, None)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err and "\n" not in err and "Traceback" not in err and name in err, err
    assert captured.out == "" and not out.exists()
