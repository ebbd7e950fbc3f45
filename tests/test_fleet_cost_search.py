"""The cheapest-first search (``pipeline.fleet.cost_search``) against an exhaustive grid on
random grids with a fake simulator, and the frontier."""

from __future__ import annotations

import contextlib
import io

import polars as pl
import pytest

from conftest import cli_in_process
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.fleet.cost import Prices, cheapest, with_cost
from dataclasses import replace

from pipeline.fleet.cost_search import Setup, cheapest_search, frontier, kind_of, \
    point_price, search_setups
from pipeline.fleet.plan import Memory, Targets
from pipeline.fleet.sweep_point import Point

MEMORY = Memory(kv_bytes_per_token=1 << 16, block_size=16, cpu_tokens=4096)


def _rows(points: list[Point], ttft: dict) -> pl.DataFrame:
    return pl.DataFrame([
        {"router": p.router, "instances": p.instances, "gpu_blocks": p.gpu_blocks,
         "load": p.load, "ttft_p90_ms": ttft[p], "hit_ratio": 0.5, "output_tokens": 1000,
         "requests": 10, "throughput_rps": 1.0,
         **({"decode_instances": p.decode_instances} if p.decode_instances else {})}
        for p in points])


def _fake(ttft: dict, in_flight: int = 1) -> callable:
    """A sweep that starts ``in_flight`` points before it hears the first result, as a
    pool of workers does, and asks ``skip`` only for points it has not started."""
    calls: list[Point] = []

    def run(order, skip, seen):
        started = []
        queue = list(order)
        while queue or started:
            while queue and len(started) < in_flight:
                point = queue.pop(0)
                if not skip(point):
                    started.append(point)
            if not started:
                break
            point = started.pop(0)
            calls.append(point)
            seen(point, _rows([point], ttft))
    run.calls = calls
    return run


grids = st.tuples(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True),
                  st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True),
                  st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
                  st.lists(st.sampled_from([64, 128, 256]), min_size=1, max_size=2,
                           unique=True))


@settings(max_examples=80, deadline=None)
@given(grids, st.data(), st.floats(5, 100), st.sampled_from([None, 2048, 4096]),
       st.integers(1, 4))
def test_the_search_answers_what_the_whole_grid_answers(grid, data, target, cap, wave):
    routers, instances, decodes, blocks = grid
    points = [Point(r, n, b, 1.0, d) for r in routers for n in instances for d in decodes
              for b in blocks]
    ttft = {p: data.draw(st.floats(1, 120), label=p.key) for p in points}
    prices = Prices("X", 2.0, 0.01)
    run = _fake(ttft, wave)
    result = cheapest_search(points, run, prices, MEMORY, cap, Targets(ttft_p90_ms=target))
    for kind in ("aggregated", "disaggregated"):
        mine_points = [p for p in points if kind_of(p) == kind]
        if not mine_points:
            continue
        frame = _rows(mine_points, ttft)
        full = cheapest(with_cost(frame, MEMORY, prices, cap), ttft_p90_ms=target)
        got = result.answers.filter(pl.col("kind") == kind)
        for want in full.iter_rows(named=True):
            mine = got.filter(pl.col("router") == want["router"]).to_dicts()
            assert len(mine) == 1
            if want["usd_per_hour"] is None:
                assert mine[0].get("usd_per_hour") is None
                continue
            assert mine[0]["usd_per_hour"] == pytest.approx(want["usd_per_hour"])
            assert mine[0]["instances"] == want["instances"]
            assert mine[0]["gpu_blocks"] == want["gpu_blocks"]
    fitting = [p for p in points if cap is None or p.gpu_blocks * 16 <= cap]
    assert result.unfit == len(points) - len(fitting)
    assert result.simulated + result.pruned == len(fitting)
    assert len(run.calls) == result.simulated == len(set(run.calls))
    assert all(kind_of(p) in ("aggregated", "disaggregated") for p in run.calls)


@settings(max_examples=60, deadline=None)
@given(grids, st.lists(st.tuples(st.sampled_from([0, 2048, 8192, 32768]),
                                 st.sampled_from([0, 0, 16384, 131072])),
                       min_size=1, max_size=3, unique=True),
       st.data(), st.floats(5, 100), st.integers(1, 3), st.sampled_from([1, 2]))
def test_searching_cpu_tiers_answers_what_the_whole_grid_answers(grid, tiers, data, target,
                                                                 wave, gpus):
    # each tier (CPU tokens, disk tokens) is a setup of its own, disaggregated points with
    # it on their prefill engines, the answers shared: equal to the cheapest point of every
    # tier's whole grid, each paying for its CPU memory and disk
    routers, instances, decodes, blocks = grid
    points = [Point(r, n, b, 1.0, d) for r in routers for n in instances for d in decodes
              for b in blocks]
    prices = Prices("X", 2.0, 0.05, 0.02)
    setups, frames = [], {"aggregated": [], "disaggregated": []}
    for tier, disk in tiers:
        ttft = {p: data.draw(st.floats(1, 120), label=f"{p.key}/{tier}/{disk}")
                for p in points}
        memory = replace(MEMORY, cpu_tokens=tier, gpus=gpus)
        setups.append(Setup({"cpu_tier": tier, "disk_tier": disk}, points,
                            _fake(ttft, wave), prices, memory, disk_tokens=disk))
        for kind in frames:
            part = [p for p in points if kind_of(p) == kind]
            if part:
                frames[kind].append(with_cost(_rows(part, ttft), memory, prices,
                                              disk_gib=disk * (1 << 16) * gpus / (1 << 30))
                                    .with_columns(disk_tier=pl.lit(disk)))
    result = search_setups(setups, Targets(ttft_p90_ms=target))
    for kind, parts in frames.items():
        if not parts:
            continue
        want = cheapest(pl.concat(parts), ttft_p90_ms=target)
        got = (result.answers.filter(pl.col("kind") == kind)
               .sort("usd_per_hour", "instances", "total_tokens", nulls_last=True)
               .group_by("router", maintain_order=True).first())
        for row in want.iter_rows(named=True):
            mine = got.filter(pl.col("router") == row["router"]).row(0, named=True)
            if row["usd_per_hour"] is None:
                assert mine["usd_per_hour"] is None
                continue
            assert mine["usd_per_hour"] == pytest.approx(row["usd_per_hour"])
            assert (mine["instances"], mine["gpu_blocks"], mine["cpu_tokens"]) == \
                (row["instances"], row["gpu_blocks"], row["cpu_tokens"])
    for frame in (result.fleet,) if result.fleet.height else ():
        # a point pays for its tier on the engines that hold it (a P/D fleet's prefill
        # side) and for every engine's GPUs, as the search priced it before it ran
        tiers_gib = (pl.col("cpu_tier") + pl.col("disk_tier") * 0.4) * (1 << 16) * gpus \
            / (1 << 30) * 0.05
        expected = (pl.col("instances") + pl.col("decode_instances")) * 2.0 \
            + pl.col("instances") * tiers_gib
        assert frame.select((pl.col("usd_per_hour") - expected).abs().max()).item() < 1e-9
    for setup in setups:                      # the price the search orders and prunes by
        for p in setup.points:
            tier = (setup.memory.cpu_tokens + 0.4 * setup.disk_tokens) * (1 << 16) * gpus \
                / (1 << 30) * 0.05
            assert point_price(p, prices, setup.memory, setup.disk_tokens) == pytest.approx(
                (p.instances + p.decode_instances) * 2.0 + p.instances * tier)
    assert sum(len(setup.run.calls) for setup in setups) == result.simulated
    assert result.simulated + result.pruned == sum(len(setup.points) for setup in setups)


def test_the_search_prunes_what_costs_more_than_an_answer():
    points = [Point("a", n, 64, 1.0) for n in range(1, 9)]
    run = _fake({p: 10.0 for p in points}, 2)         # every point meets the target
    result = cheapest_search(points, run, Prices("X", 1.0, 0.0), MEMORY, None,
                             Targets(ttft_p90_ms=20.0))
    assert result.simulated == 2 and result.pruned == 6
    assert result.answers["instances"].to_list() == [1]


def test_frontier_keeps_the_points_nothing_beats():
    fleet = pl.DataFrame({"usd_per_hour": [1.0, 2.0, 2.0, 3.0, 4.0],
                          "ttft_p90_ms": [50.0, 60.0, 40.0, 45.0, 10.0]})
    assert frontier(fleet).rows() == [(1.0, 50.0), (2.0, 40.0), (4.0, 10.0)]


# ---------------------------------------------------------------- the command
import json  # noqa: E402
import subprocess  # noqa: E402

PLAN = ("plan", "--fleet", "--pattern", "long-doc-qa", "--num-documents", "3",
        "--document-length", "1000", "--repeat-count", "2", "--model", "llama-3.1-8b",
        "--jobs", "1", "--cost", "--instances", "1,2", "--prefill-instances", "1",
        "--decode-instances", "1", "--kv-transfer", "25GB/s", "--gpu", "300blocks")


def _plan(*extra: str) -> subprocess.CompletedProcess:
    return cli_in_process(*PLAN, *extra)


def test_plan_cost_searches_both_kinds_and_names_the_runner_up(tmp_path):
    done = _plan("--target-hit-ratio", "0.01", "--json", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    answer = document["answers"][0]
    # one aggregated GPU is the cheapest point that meets a tiny target
    assert (answer["kind"], answer["instances"]) == ("aggregated", 1)
    runner = answer["runner_up"]
    assert runner["kind"] == "disaggregated"
    assert runner["usd_per_hour"] == pytest.approx(2 * answer["usd_per_hour"])
    assert "more" in runner["why"]
    search = document["search"]
    assert search["planned"] == 3 and search["simulated"] + search["pruned"] == 3
    assert (tmp_path / "o" / "frontier.html").stat().st_size > 1000


def test_plan_cost_with_no_answer_exits_1_with_the_closest_miss():
    done = _plan("--target-ttft-p90-ms", "0.001")
    assert done.returncode == 1, done.stderr
    assert "no point of the grid meets it" in done.stdout
    assert "closest miss:" in done.stdout and "search: 3 of 3 points simulated" in done.stdout


def test_a_grid_where_nothing_fits_answers_nulls():
    points = [Point("a", 1, 4096, 1.0), Point("a", 1, 4096, 1.0, 1)]
    run = _fake({p: 1.0 for p in points})
    result = cheapest_search(points, run, Prices("X", 1.0, 0.0), MEMORY, 1000,
                             Targets(ttft_p90_ms=20.0))
    assert result.simulated == 0 and result.unfit == 2 and run.calls == []
    assert result.answers["usd_per_hour"].to_list() == [None, None]


def test_plan_cost_takes_a_tpot_target():
    done = _plan("--target-ttft-p90-ms", "100000", "--target-tpot-p90-ms", "0.001", "--json")
    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)["answers"][0]
    assert answer["status"] == "unreachable"
    assert answer["closest"]["tpot_p90_ms"] > 0.001
    loose = _plan("--target-ttft-p90-ms", "100000", "--target-tpot-p90-ms", "100000", "--json")
    assert loose.returncode == 0 and json.loads(loose.stdout)["answers"][0]["status"] == "met"


def test_plan_cost_compares_gpu_types_by_price():
    cut = PLAN.index("--prefill-instances")
    base = [*PLAN[:cut], *PLAN[cut + 6:]]                    # aggregated only
    done = cli_in_process(*base, "--gpu-types",
                           "H100,A100", "--target-hit-ratio", "0.01", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    answer = document["answers"][0]
    assert (answer["gpu_type"], answer["instances"]) == ("A100", 1)   # the cheaper GPU
    assert document["cost"]["gpu_types"] == {"H100": 2.49, "A100": 1.49}
    from pipeline.commands.plan_fleet_output import print_document
    with contextlib.redirect_stdout(io.StringIO()) as text:
        print_document(document)
    ttft = next(line for line in text.getvalue().splitlines() if line.startswith("TTFT: "))
    assert ttft.startswith("TTFT: roofline (H100") and ttft.endswith(   # answered on an A100
        "; --gpu-types H100,A100: each point timed on its own GPU's roofline")
    missing = cli_in_process(*base, "--gpu-types", "H100,L4", "--target-hit-ratio", "0.01")
    assert missing.returncode == 2 and "L4" in missing.stderr
    assert missing.stderr.count("\n") == 1


def test_plan_cost_takes_a_goodput_target():
    done = _plan("--target-hit-ratio", "0.01", "--slo-ttft-ms", "100000",
                 "--target-goodput", "0.99", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["target"]["goodput"] == 0.99
    assert document["answers"][0]["goodput_fraction"] == 1.0       # every request is good
    strict = _plan("--target-hit-ratio", "0.01", "--slo-ttft-ms", "0.001",
                   "--target-goodput", "0.5")
    assert strict.returncode == 1 and "closest miss" in strict.stdout
    alone = _plan("--target-hit-ratio", "0.01", "--target-goodput", "0.5")
    assert alone.returncode == 2 and "--slo-ttft-ms" in alone.stderr


def test_targets_meet_and_measure_the_miss():
    frame = pl.DataFrame({"ttft_p90_ms": [5.0, 20.0], "hit_ratio": [0.5, 0.9],
                          "tpot_p90_ms": [1.0, None], "goodput_fraction": [0.8, 1.0]})
    targets = Targets(ttft_p90_ms=10.0, hit_ratio=0.4, tpot_p90_ms=2.0, goodput=0.9)
    assert frame.select(targets.meets())[:, 0].to_list() == [False, False]
    assert frame.select(Targets(ttft_p90_ms=10.0).meets())[:, 0].to_list() == [True, False]
    assert frame.select(targets.excess())[:, 0].to_list() == pytest.approx([0.9 / 0.8, 2.0])


def test_a_cheaper_tier_prunes_the_dearer_ones():
    points = [Point("a", n, 64, 1.0) for n in (1, 2)]
    setups = [Setup({"cpu_tier": tier}, points, _fake({p: 10.0 for p in points}),
                    Prices("X", 1.0, 0.5), replace(MEMORY, cpu_tokens=tier))
              for tier in (0, 1 << 16)]                   # 4 GiB of CPU: $2/hour more
    result = search_setups(setups, Targets(ttft_p90_ms=20.0))
    assert (result.simulated, result.pruned) == (1, 3)
    assert result.answers.drop_nulls("usd_per_hour")["cpu_tier"].to_list() == [0]


TIERED = ("plan", "--fleet", "--pattern", "long-doc-qa", "--num-documents", "3",
          "--document-length", "1000", "--repeat-count", "2", "--model", "llama-3.1-8b",
          "--jobs", "1", "--target-hit-ratio", "0.5", "--gpu", "70blocks")


def test_plan_cost_searches_cpu_tiers_each_paying_for_its_memory():
    # 70 GPU blocks alone hit 0.04; a 1 GiB CPU tier (8,192 tokens of Llama-3.1-8B) lifts
    # the hit ratio past 0.5 for its memory's price, and the 4 GiB tier is never run
    done = cli_in_process(*TIERED, "--cost",
                           "--instances", "1", "--tier-options", "none,1GiB,4GiB",
                           "--cpu-memory-cost-per-gib-hour", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["grid"]["cpu_tiers"] == [0, 8192, 32768]
    answer = document["answers"][0]
    assert answer["cpu_tokens"] == 8192 and answer["hit_ratio"] >= 0.5
    assert answer["usd_per_hour"] == pytest.approx(2.49 + 0.5)
    assert document["search"] == {**document["search"], "planned": 3, "simulated": 2,
                                  "pruned": 1}
    assert document["cache_models"]["cpu"] == "lmcache"


@pytest.mark.parametrize("extra,says", [
    (("--instances", "1", "--tier-options", "none,1GiB"), "needs --cost"),
    (("--cost", "--instances", "1", "--tier-options", "4XB"), "unknown unit"),
    (("--cost", "--instances", "1", "--cpu", "1000", "--tier-options", "none,1GiB"),
     "not --cpu too"),
    (("--cost", "--instances", "1", "--tier-options", "cpu:1GiB+remote:1GiB:1:1"),
     "remote store"),
    (("--cost", "--instances", "1", "--tier-options", "disk:4GiB:5:0.2"), "comes first"),
    (("--cost", "--instances", "1", "--tier-options", "cpu:1GiB+disk:4GiB"),
     "disk:SIZE:GBPS:LATENCY_MS"),
    (("--cost", "--instances", "1", "--tier-options", "none,native:0"), "> 0"),
    (("--cost", "--instances", "1", "--cpu-shared", "--tier-options",
      "cpu:1GiB+disk:4GiB:5:0.2"), "--cpu-shared"),
    (("--cost", "--instances", "1", "--kv-offloading-size", "1", "--tier-options",
      "none,1GiB"), "not --kv-offloading-size too"),
])
def test_tier_options_bad_input_is_one_line(extra, says):
    done = cli_in_process(*TIERED, *extra)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--tier-options" in done.stderr and says in done.stderr


def test_plan_cost_searches_tier_stacks_paying_for_cpu_and_disk():
    # half a GiB of CPU with 4 GiB of disk behind it meets the target for less than a whole
    # GiB of CPU: the stack is the answer, its disk priced at --disk-cost-per-gib-hour
    done = cli_in_process(*TIERED, "--cost",
                           "--instances", "1", "--tier-options",
                           "none,1GiB,cpu:512MiB+disk:4GiB:5:0.2",
                           "--cpu-memory-cost-per-gib-hour", "0.5",
                           "--disk-cost-per-gib-hour", "0.01", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    answer = document["answers"][0]
    assert answer["tier"] == "cpu:512MiB+disk:4GiB:5:0.2" and answer["hit_ratio"] >= 0.5
    assert answer["cpu_tokens"] == 4096
    assert answer["usd_per_hour"] == pytest.approx(2.49 + 0.5 * 0.5 + 0.01 * 4)
    assert [t["kind"] for t in document["grid"]["tier_options"]] == ["none", "stack", "lmcache"]
    assert document["cost"]["sources"]["disk"] == "given on the command line"


def test_each_kind_of_tier_searched_has_its_models_line_named():
    done = cli_in_process(*TIERED, "--cost", "--instances", "1", "--tier-options",
                          "none,1GiB,native:1GiB,cpu:512MiB+disk:4GiB:5:0.2")
    assert done.returncode == 0, done.stderr
    models = [line for line in done.stdout.splitlines() if line.startswith("models: ")]
    assert sorted(line.rsplit(" (--tier-options ", 1)[-1] for line in models) == [
        "1GiB)", "cpu:512MiB+disk:4GiB:5:0.2)", "native:1GiB)"]     # every line names its own


def test_plan_cost_searches_disaggregated_fleets_with_a_prefill_tier():
    done = cli_in_process(*TIERED, "--cost",
                           "--prefill-instances", "1", "--decode-instances", "1",
                           "--kv-transfer", "25GB/s", "--tier-options", "none,native:1GiB",
                           "--cpu-memory-cost-per-gib-hour", "0.5")
    assert done.returncode == 0, done.stderr
    # 70 blocks alone miss 0.5; the prefill engine's native tier (1 GiB, on P only) meets it
    assert "(1 prefill + 1 decode) x 70 blocks + vLLM native offloading 8,192 tokens per " \
        "instance" in done.stdout
    assert "$5.48/hour" in done.stdout                              # 2 GPUs + 1 GiB of CPU
