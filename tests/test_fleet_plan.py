"""``plan --fleet``: its answer is the smallest memory of an explicit grid of ``fleet`` runs
(recomputed here from their --json rows), TTFT only where the step-time model backs it,
bad input one line (exit 2 for usage), outputs all or nothing."""

import json

import pytest

from conftest import ROOT, folder_snapshot
from pipeline.cli import main
from pipeline.commands.plan_fleet import gpu_block_grid

WORKLOAD = ["--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "2",
            "--system-prompt-length", "256", "--question-length", "16", "--output-tokens",
            "4", "--model", "qwen2.5-1.5b", "--jobs", "1"]
ROUTERS, INSTANCES, BLOCKS = ["round-robin", "prefix-approx"], [1, 2], [20, 30, 45]
GRID = ["--router", ",".join(ROUTERS), "--instances", ",".join(map(str, INSTANCES)),
        "--gpu", ",".join(f"{b}blocks" for b in BLOCKS)]
KV = 28_672                                     # Qwen2.5-1.5B, the --model given


def _plan(capsys, *argv):
    status = main(["plan", *WORKLOAD, "--fleet", *GRID, "--json", *argv])
    captured = capsys.readouterr()
    return status, (json.loads(captured.out) if captured.out else None), captured.err


@pytest.fixture(scope="module")
def grid_rows(tmp_path_factory):
    """The grid as fleet --json rows (one fleet run per point)."""
    out = tmp_path_factory.mktemp("fleet") / "out"
    import io
    from contextlib import redirect_stdout
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        assert main(["fleet", *WORKLOAD, *GRID, "--latency", "roofline", "--out",
                     str(out), "--json"]) == 0
    rows = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert len(rows) == len(ROUTERS) * len(INSTANCES) * len(BLOCKS)
    return rows


def _expected(rows, meets, cpu_tokens=0, shared=False):
    """Per router: (instances, gpu_blocks, total tokens) of the least memory meeting it."""
    best = {}
    for r in rows:
        if not meets(r):
            continue
        total = r["instances"] * r["gpu_blocks"] * 16 + (
            cpu_tokens if shared else r["instances"] * cpu_tokens)
        key = (total, r["instances"])
        if r["router"] not in best or key < best[r["router"]][0]:
            best[r["router"]] = (key, (r["instances"], r["gpu_blocks"], total))
    return {router: found[1] for router, found in best.items()}


def _hit(r):
    return (r["gpu_hit_tokens"] + r["cpu_hit_tokens"]) / r["prompt_tokens"]


def _answers(document):
    return {a["router"]: (a["instances"], a["gpu_blocks"], a["total_tokens"])
            for a in document["answers"] if a["status"] == "met"}


@pytest.mark.parametrize("quantile", [0.3, 0.7])
def test_hit_ratio_answer_is_the_smallest_grid_point(capsys, grid_rows, quantile):
    ratios = sorted(_hit(r) for r in grid_rows)
    target = ratios[int(quantile * (len(ratios) - 1))]
    status, document, _ = _plan(capsys, "--target-hit-ratio", f"{target:.6f}")
    assert status == 0
    expected = _expected(grid_rows, lambda r: _hit(r) >= float(f"{target:.6f}"))
    assert expected and _answers(document) == expected
    for a in document["answers"]:
        if a["status"] == "met":
            assert a["total_bytes"] == a["total_tokens"] * KV
            assert a["total_gib"] == pytest.approx(a["total_tokens"] * KV / 2**30)
    assert document["ttft"]["source"] == "roofline" and document["ttft"]["withheld"] is None


def test_ttft_answer_is_the_smallest_grid_point_and_unreachable_says_so(capsys, grid_rows):
    p90 = sorted({r["ttft_p90_ms"] for r in grid_rows})
    target = p90[len(p90) // 2]
    status, document, _ = _plan(capsys, "--target-ttft-p90-ms", repr(target))
    assert status == 0
    expected = _expected(grid_rows, lambda r: r["ttft_p90_ms"] <= target)
    assert _answers(document) == expected
    met = {a["router"]: a for a in document["answers"]}
    assert all(met[r]["ttft_p90_ms"] <= target for r in expected)
    status, document, _ = _plan(capsys, "--target-ttft-p90-ms", repr(p90[0] / 2))
    assert status == 1 and {a["status"] for a in document["answers"]} == {"unreachable"}


def test_cpu_tier_counts_per_instance_or_once_when_shared(capsys, grid_rows):
    for shared in (False, True):
        extra = ["--cpu", "256", *(["--cpu-shared"] if shared else [])]
        status, document, _ = _plan(capsys, "--target-hit-ratio", "0.01", *extra)
        assert status == 0
        for a in document["answers"]:
            assert a["cpu_tokens"] == (256 if shared else 256 * a["instances"])
            assert a["total_tokens"] == a["gpu_tokens"] + a["cpu_tokens"]


@pytest.fixture(scope="module")
def text_plan(tmp_path_factory):
    """One text-mode ``plan --fleet --target-hit-ratio 0.3 --out DIR`` run: (status, stdout,
    DIR); the text test and the --out test assert on it (``--out`` leaves the text as is)."""
    import io
    from contextlib import redirect_stdout
    out = tmp_path_factory.mktemp("plan") / "plan"
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        status = main(["plan", *WORKLOAD, "--fleet", *GRID, "--target-hit-ratio", "0.3",
                       "--out", str(out)])
    return status, buffer.getvalue(), out


def test_text_output_names_the_grid_and_the_ttft_source(text_plan):
    status, text, _ = text_plan
    assert status == 0
    assert ("TTFT: roofline (H100, Qwen2.5-1.5B, bf16 weights, MFU 0.691, MBU 0.754) (a "
            "roofline at measured efficiency") in text
    assert "grid: instances 1,2 x GPU blocks per instance 20,30,45" in text
    assert "(roofline)" in text and "GiB" in text


def test_a_fitted_file_is_labelled_and_withheld_for_another_model(capsys):
    fitted = str(ROOT / "data" / "steptime" / "example.fitted.json")
    status, document, _ = _plan(capsys, "--target-hit-ratio", "0.3", "--latency", fitted)
    assert status == 0 and document["ttft"]["source"] == "fitted"
    assert document["ttft"]["withheld"] is None
    assert any(a["ttft_p90_ms"] is not None for a in document["answers"])
    status, document, _ = _plan(capsys, "--target-hit-ratio", "0.3", "--latency", fitted,
                                "--model", "llama-3.1-8b")
    assert status == 0 and "28,672 KV bytes per token" in document["ttft"]["withheld"]
    assert all(a["ttft_p90_ms"] is None for a in document["answers"])
    status, _, err = _plan(capsys, "--target-ttft-p90-ms", "5", "--latency", fitted,
                           "--model", "llama-3.1-8b")
    assert status == 1 and "TTFT withheld" in err and len(err.strip().splitlines()) == 1


def test_out_writes_both_tables(text_plan):
    import polars as pl
    status, _, out = text_plan
    assert status == 0
    assert pl.read_parquet(out / "fleet.parquet").height == 12
    assert pl.read_parquet(out / "plan.parquet")["router"].to_list() == ROUTERS


@pytest.mark.parametrize("argv, status, message", [
    (["--fleet", "--router", "kv-cost", "--target-hit-ratio", "0.5"], 2,
     "--fleet needs --instances"),
    (["--instances", "2", "--target-hit-ratio", "0.5"], 2, "--pattern groups needs --fleet"),
    (["--fleet", "--instances", "2", "--router", "round-robin", "--router-option",
      "kv-cost.temperature=1", "--target-hit-ratio", "0.5"], 2,
     "router kv-cost is not among --router round-robin"),
    (["--fleet", "--instances", "2", "--router", "kv-cost", "--router-option",
      "kv-cost.heat=1", "--target-hit-ratio", "0.5"], 2, "has no option 'heat'"),
    (["--fleet", "--instances", "2", "--router", "bogus", "--target-hit-ratio", "0.5"], 2,
     "unknown router 'bogus'"),
    (["--fleet", "--instances", "0", "--target-hit-ratio", "0.5"], 2,
     "instance counts must be >= 1"),
    (["--fleet", "--instances", "2", "--target-ttft-ms", "3"], 2,
     "--target-ttft-ms: not with --fleet"),
    (["--fleet", "--instances", "2", "--target-hit-ratio", "0.5", "--concurrency", "2"], 2,
     "--concurrency: not with --fleet"),
    (["--fleet", "--instances", "2", "--target-hit-ratio", "0.5", "--gpu", "3blocks"], 1,
     "--gpu 3blocks: the longest request needs"),
    (["--fleet", "--instances", "2", "--target-hit-ratio", "0.5", "--out", "/nonexistent/x"],
     1, "--out: folder /nonexistent does not exist"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, status, message):
    (tmp_path / "keep").write_text("x")
    before = folder_snapshot(tmp_path)
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    try:
        code = main(["plan", *WORKLOAD, *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == status and message in err and len(err.strip().splitlines()) == 1
    assert folder_snapshot(tmp_path) == before


def test_default_grid_is_geometric_and_distinct():
    assert gpu_block_grid(10, 1000, 3) == [10, 100, 1000]
    assert gpu_block_grid(5, 5) == [5]
    grid = gpu_block_grid(66, 466)
    assert grid[0] == 66 and grid[-1] == 466 and len(grid) == 6


@pytest.mark.parametrize("tier, cpu_tokens, text", [
    (["--tier", "cpu:600tokens", "--tier", "disk:4000tokens:2:0.5"], 600,
     "LMCache stack cpu:600tokens+disk:4000tokens:2:0.5 (CPU 600 + disk 4,000 tokens)"),
    (["--kv-offloading-size", str(1200 * KV / 2**30), "--kv-offloading-backend", "native"],
     1200, "vLLM native offloading 1,200 tokens"),
])
def test_the_engines_own_tier_is_paid_for_and_named(capsys, tier, cpu_tokens, text):
    """``--tier`` (once refused as ambiguous) and native offloading: each answer's memory
    counts the tier's CPU tokens per instance, and the text names the tier."""
    status, document, err = _plan(capsys, "--target-hit-ratio", "0.05", "--router",
                                  "round-robin", *tier)
    assert status == 0, err
    for answer in document["answers"]:
        assert answer["cpu_tokens"] == answer["instances"] * cpu_tokens
        assert answer["total_tokens"] == (answer["instances"] * answer["gpu_blocks"] * 16
                                          + answer["cpu_tokens"])
    assert main(["plan", *WORKLOAD, "--fleet", *GRID, "--target-hit-ratio", "0.05",
                 "--router", "round-robin", *tier]) == 0
    shown = capsys.readouterr().out
    assert f"tier per instance {text}" in shown and f"+ {text} per instance" in shown
