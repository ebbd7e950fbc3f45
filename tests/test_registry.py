"""The one registry of cache models: its views follow the entries, and a policy registered
from outside (here: a toy defined in this file, one ``register`` call, no other edit) works
in ``trace``, ``policies``, ``blocks``, ``plan`` and the report."""

from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import run_outputs
from kvlab.scenario import pass_keys
from pipeline import catalog as registry
from pipeline.workloads.stream import block_stream
from pipeline.cli import main
from pipeline.cache.tiers import Tier, TwoTier
from pipeline.workloads.blocks import document_blocks
from pipeline.workloads.documents import documents_workload


class LowestKeyFirst(Tier):
    """A toy policy: evict the resident key that sorts first."""

    name = "toy"

    def _evict(self, key, size):
        return min(self._sizes)

    def _insert(self, key, size):
        return True


@pytest.fixture
def toy():
    entry = registry.register(registry.policy_entry("toy", LowestKeyFirst, "lowest key first"))
    yield entry
    registry.unregister("toy")


def _replay_blocks(docs: int, tokens: int, passes: list[str], block_size: int, gpu: int,
                   cpu: int) -> list[dict]:
    """The block scenario with toy tiers, request by request through ``TwoTier`` (GPU
    tail-first, CPU head-first): per pass, GPU and CPU tokens."""
    stream = block_stream(document_blocks([d for p in passes for d in pass_keys(p, docs)],
                                          tokens, block_size), block_size)
    tiers = TwoTier(LowestKeyFirst(gpu // block_size), LowestKeyFirst(cpu // block_size))
    codes = stream.codes.tolist()
    out = [{"gpu_hit_tokens": 0, "cpu_hit_tokens": 0} for _ in passes]
    for r in range(stream.requests):
        keys = codes[stream.starts[r]:stream.starts[r] + stream.cacheable[r]]
        g, c = tiers.gpu.lookup(keys), tiers.cpu.lookup(keys)
        tiers.gpu.place(keys[::-1])                    # tail-first: the head ends newest
        tiers.cpu.place(keys[g:])                      # head-first
        out[r // docs]["gpu_hit_tokens"] += g * block_size
        out[r // docs]["cpu_hit_tokens"] += max(0, c - g) * block_size
    return out


def test_views_follow_the_entries(toy):
    for view in (registry.GPU_MODELS, registry.CPU_MODELS, registry.POLICIES):
        assert list(view)[-1] == "toy"
    assert registry.make_policy("toy", 3).capacity == 3
    assert "toy" not in registry.MODEL_OPTIONS and "toy" not in registry.MODEL_ORDERS
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.policy_entry("toy", LowestKeyFirst, "again"))


def test_views_drop_an_unregistered_entry():
    registry.register(registry.policy_entry("toy", LowestKeyFirst, "lowest key first"))
    registry.unregister("toy")
    assert "toy" not in registry.GPU_MODELS and "toy" not in registry.POLICIES


def test_builtin_names_and_options():
    assert list(registry.GPU_MODELS)[:4] == ["block-lru", "block-lru-replay", "vllm", "vllm-replay"]
    assert list(registry.CPU_MODELS)[:4] == ["block-lru", "block-lru-replay", "lmcache", "lru"]
    assert registry.MODEL_OPTIONS["vllm"] == ("output_tokens", "vllm_version")
    assert registry.MODEL_ORDERS == {"vllm": "tail-first", "vllm-replay": "tail-first",
                                     "lmcache": "head-first", "lmcache-replay": "head-first"}
    assert registry.names(measured=True) == ["llamacpp", "two-tier"]
    assert registry.option_owner("chunk_size") == "lmcache"


def test_tier_lookup_changes_nothing_and_place_pins_the_request():
    tier = LowestKeyFirst(3)
    tier.place([5, 6, 7])
    assert tier.lookup([5, 6, 9, 7]) == 2 and sorted(tier.keys()) == [5, 6, 7]
    tier.place([1, 2])                        # evicts 5 and 6, never 1 or 2
    assert sorted(tier.keys()) == [1, 2, 7] and tier.evictions == 2
    tier.place([1, 2, 3, 4])                  # larger than the tier: nothing changes
    assert sorted(tier.keys()) == [1, 2, 7]


def test_engine_tiers_as_objects():
    lmcache = registry.entry("lmcache").tier(512, chunk_size=256)
    lmcache.place(["a", "b"], 256)
    assert lmcache.lookup(["a", "b", "c"]) == 2 and lmcache.used == 512
    lmcache.place(["c"], 256)                 # the least recent chunk goes
    assert lmcache.lookup(["a"]) == 0 and lmcache.lookup(["b", "c"]) == 2
    vllm = registry.entry("vllm").tier(16 * 4, block_size=16)   # 3 usable blocks
    vllm.place(["x", "y"])
    assert vllm.lookup(["x", "y", "z"]) == 2


def test_toy_policy_in_policies(toy, tmp_path, capsys):
    assert main(["policies", "--gpu-policy", "toy", "--json", "--out", str(tmp_path)]) == 0
    curves = json.loads(capsys.readouterr().out)["curves"]
    keys, sizes = documents_workload(10, 5011, ["fwd", "fwd", "rev"], None).items()
    for row in curves:
        tier = LowestKeyFirst(row["capacity"])
        assert row["gpu_hits"] == sum(map(tier.access, keys.tolist(), sizes.tolist()))
    assert {row["policy"] for row in curves} == {"toy"}
    assert any(row["gpu_hits"] for row in curves)


def test_toy_policy_in_blocks(toy, capsys):
    # 4 documents of 1000 tokens (partial last blocks) with tiers that hold part of them:
    # the toy's answer differs from lru's and fifo's here, as on the default workload.
    assert main(["blocks", "--docs", "4", "--tokens", "1000", "--gpu", "2000", "--cpu",
                 "4000", "--gpu-model", "toy", "--cpu-model", "toy"]) == 0
    passes = json.loads(capsys.readouterr().out)["passes"]
    expected = _replay_blocks(4, 1000, ["fwd", "fwd", "rev"], 16, 2000, 4000)
    assert [{k: p[k] for k in ("gpu_hit_tokens", "cpu_hit_tokens")} for p in passes] == expected
    assert any(p["cpu_hit_tokens"] for p in passes)


def test_toy_policy_in_trace(toy, tmp_path, capsys):
    assert main(["trace", "--pattern", "long-doc-qa", "--num-documents", "4",
                 "--document-length", "2000", "--gpu", "0,4000", "--cpu", "0,6000",
                 "--gpu-model", "toy", "--cpu-model", "toy", "--json", "--no-report",
                 "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    points = pl.read_parquet(tmp_path / "points.parquet")
    assert set(points["gpu_model"].cast(pl.String)) == {"toy"}
    assert points.filter(pl.col("gpu_capacity") == 4000)["gpu_tokens"].min() > 0


def test_toy_policy_in_plan(toy, capsys):
    # A small workload that the GPU alone cannot serve: the answer is a toy CPU tier.
    assert main(["plan", "--target-hit-ratio", "0.6", "--block-size", "256", "--cpu-model",
                 "toy", "--docs", "4", "--tokens", "2000", "--gpu", "2048", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert "CPU toy head-first" in document["workload"]
    assert document["answer"]["status"] == "met"
    hit = [row["hit_ratio"] for row in document["figures"]][1:]
    assert min(hit) >= 0.6


def test_toy_policy_as_the_engines_cpu_tier(toy, tmp_path, capsys):
    """``simulate --cpu-model toy`` at concurrency 1 equals the block composition (vllm GPU
    + toy CPU); under load the toy is still what the engine's CPU tier runs."""
    from test_engine_cpu_tier import composition

    docs = [[d * 1000 + t for t in range(12)] for d in range(4)]
    prompts = [docs[d] + [9000 + i] for i, d in enumerate([0, 1, 2, 0, 3, 1, 2, 0, 3, 1])]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"prompt_token_ids": p, "max_tokens": 2}) + "\n"
                             for p in prompts))
    runs = {}
    for model, load in (("toy", "1"), ("lru", "1"), ("toy", "4")):
        out = tmp_path / f"{model}-{load}"
        assert main(["simulate", str(trace), "--block-size", "4", "--gpu", "6blocks",
                     "--cpu", "24", "--cpu-model", model, "--concurrency", load,
                     "--out", str(out)]) == 0
        runs[model, load] = pl.read_parquet(out / "requests.parquet")["cpu_hit_tokens"]
    capsys.readouterr()
    expected = composition(prompts, [2] * len(prompts), 6, "toy", 24, 4, {}, "head-first")
    assert runs["toy", "1"].to_list() == expected.tolist() and expected.sum() > 0
    assert runs["toy", "1"].to_list() != runs["lru", "1"].to_list()     # the toy decides
    assert runs["toy", "4"].sum() > 0


def test_toy_policy_in_the_report(toy, tmp_path):
    # The report's policy section lists every registered policy whatever the grids: coarse
    # grids (8 cliff points, a 3x3 heatmap) are enough to show the toy is there.
    assert main(["run", "--quiet", "--points", "8", "--grid-steps", "3",
                 *run_outputs(tmp_path)]) == 0
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert '"policy": "toy"' in page or '"policy":"toy"' in page


def test_the_cache_models_page_runs_as_shown():
    import doctest

    from conftest import ROOT
    page = (ROOT / "docs" / "cache-models.md").read_text(encoding="utf-8")
    sessions = [block.split("\n", 1)[1] for block in page.split("```")[1::2]
                if block.startswith("python\n")]
    runner = doctest.DocTestRunner()
    for number, text in enumerate(sessions):
        runner.run(doctest.DocTestParser().get_doctest(text, {}, f"block {number}",
                                                       "docs/cache-models.md", 0))
    assert sessions and runner.summarize(verbose=False).failed == 0


def test_two_tier_with_one_key_per_request_is_kvlabs_two_tier_cache():
    from hypothesis import given
    from hypothesis import strategies as st

    from kvlab.kvsim import TwoTierCache
    from pipeline.cache.tiers import TIERS

    @given(gpu=st.integers(0, 6), cpu=st.integers(0, 6),
           accesses=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), max_size=40))
    def check(gpu, cpu, accesses):
        ours = TwoTier(registry.make_tier("lru", gpu), registry.make_tier("lru", cpu))
        theirs = TwoTierCache(gpu, cpu)
        for key, size in accesses:
            g, c = ours.request([key], [size])
            assert TIERS[0 if g else 1 if c else 2] == theirs.access(key, size)
    check()


def _tier_for(name: str, blocks: int, future: list):
    """A registered model's tier holding ``blocks`` keys, and the size of one key."""
    if name.startswith("vllm"):
        return registry.make_tier(name, (blocks + 1) * 16, block_size=16), 16   # + null block
    if name.startswith("lmcache"):
        return registry.make_tier(name, blocks * 256, chunk_size=256), 256
    model = registry.entry(name)
    options = {"future": future} if getattr(model.tier, "needs_future", False) else {}
    return registry.make_tier(name, blocks, **options), 1


KEYED = [name for name, model in registry.MODELS.items() if model.unit in ("block", "chunk")]


def test_every_keyed_model_is_in_the_contract():
    engines = {"block-lru", "block-lru-replay", "vllm", "vllm-replay", "lmcache", "lmcache-replay"}
    assert engines | set(registry.POLICIES) <= set(KEYED)    # a new policy joins by itself


@pytest.mark.parametrize("name", KEYED)
def test_every_registered_tier_keeps_the_contract(name):
    """lookup counts the leading keys held and changes nothing; a request that fits is held
    after ``place`` (unless the policy may decline a key), never more than the tier holds."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=min(40, settings.default.max_examples))
    @given(blocks=st.integers(0, 6),
           requests=st.lists(st.lists(st.integers(0, 9), max_size=5, unique=True),
                             max_size=10))
    def check(blocks, requests):
        future = [k for keys in requests if len(keys) <= blocks for k in keys]
        tier, size = _tier_for(name, blocks, future)
        declines = getattr(registry.entry(name).tier, "may_decline", False)
        for keys in requests:
            before = sorted(tier.keys())
            held = set(before)
            expected = next((i for i, k in enumerate(keys) if k not in held), len(keys))
            assert tier.lookup(keys) == expected == tier.lookup(keys)
            assert sorted(tier.keys()) == before
            tier.place(keys, size)
            assert len(tier.keys()) <= blocks
            if len(keys) <= blocks and not declines:
                assert set(keys) <= set(tier.keys())
    check()


def test_the_fast_paths_an_entry_declares_are_the_ones_run():
    """A policy's per-access and block kernels come from its entry, nowhere else: an entry
    declaring spies around LRU's kernels runs them (and gets LRU's hits)."""
    import numpy as np

    import pipeline.policies.kernels as kernels
    from pipeline.policies.kernels import blocks as block_kernels
    from pipeline.catalog.policy_replay import hit_matrix
    from pipeline.policies.simple import LRU

    calls: list[tuple[str, int]] = []

    def replay(codes, sizes, capacity, bypass=True):
        calls.append(("replay", capacity))
        return kernels.replay_lru(codes, sizes, capacity, bypass)

    def block(touches, t_off, lookup, l_off, capacity, k):
        calls.append(("block", capacity))
        return block_kernels.place(touches, t_off, lookup, l_off, capacity, k, block_kernels.LRU,
                                   np.zeros(1, np.int64))

    spied = registry.register(registry.policy_entry("spied", LRU, "LRU through spies",
                                                    replay_kernel=replay, block_kernel=block))
    try:
        codes, sizes = np.array([0, 1, 0, 2, 1, 0]), np.ones(6, np.int64)
        np.testing.assert_array_equal(hit_matrix("spied", codes, sizes, [1, 2], "replay"),
                                      hit_matrix("lru", codes, sizes, [1, 2], "classes"))
        stream = block_stream(document_blocks([0, 1, 0], 48, 16), 16)
        np.testing.assert_array_equal(spied.gpu(stream, [32], "tail-first"),
                                      registry.GPU_MODELS["block-lru"](stream, [32], "tail-first"))
        assert sorted(calls) == [("block", 2), ("replay", 1), ("replay", 2)]
    finally:
        registry.unregister("spied")
