"""A toy CPU tier registered from this file (a policy used as ``--cpu-model``: one
``register`` call, no other edit) is what ``trace``, ``plan``, ``simulate``, ``fleet`` and
``plan --fleet`` run, and what their ``--help`` offers; ``fleet``'s worker processes run it
too."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipeline import catalog as registry
from pipeline.cache.tiers import Tier, TwoTier
from pipeline.cli import main
from pipeline.policies.simple import LRU

BLOCK = 512


class NewestOut(Tier):
    """A toy tier: evict the most recently inserted resident key; counts its insertions
    (in the process that runs it)."""

    name = "newest-out"
    inserted = 0

    def _evict(self, key, size):
        return next(reversed(self._sizes))

    def _insert(self, key, size):
        NewestOut.inserted += 1
        return True


@pytest.fixture
def tier():
    entry = registry.register(registry.policy_entry("newest-out", NewestOut, "newest out"))
    NewestOut.inserted = 0
    yield entry
    registry.unregister("newest-out")


DOCS = [[d * 100 + b for b in range(3)] for d in range(5)]
ORDER = [0, 1, 2, 0, 3, 4, 1, 0, 2, 3, 4, 0]
PROMPT = 3 * BLOCK + 100


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": PROMPT,
                                        "output_length": 1, "hash_ids": DOCS[d] + [9000 + i]})
                            + "\n" for i, d in enumerate(ORDER)))
    return path


def two_tier_replay(gpu: Tier, cpu: Tier, requests: list[list[int]] | None = None,
                    block: int = BLOCK) -> list[tuple[int, int]]:
    """Per request (GPU, CPU) hit tokens of block mode's two tiers: the GPU placed tail
    first, the CPU head first past the GPU hit (``requests``: block keys, default the
    documents in ``ORDER``)."""
    tiers, served = TwoTier(gpu, cpu), []
    for keys in requests if requests is not None else [DOCS[d] for d in ORDER]:
        g, c = tiers.gpu.lookup(keys), tiers.cpu.lookup(keys)
        tiers.gpu.place(keys[::-1])
        tiers.cpu.place(keys[g:])
        served.append((g * block, max(0, c - g) * block))
    return served


def replay(gpu_blocks: int, cpu_blocks: int) -> list[tuple[int, int]]:
    """An LRU GPU and the toy CPU tier."""
    return two_tier_replay(LRU(gpu_blocks), NewestOut(cpu_blocks))


def hit_ratio(gpu_blocks: int, cpu_blocks: int) -> float:
    return sum(g + c for g, c in replay(gpu_blocks, cpu_blocks)) / (len(ORDER) * PROMPT)


@pytest.mark.parametrize("command", ["trace", "plan", "simulate", "fleet"])
def test_help_offers_the_toy_tier(tier, command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "newest-out" in capsys.readouterr().out.split("--cpu-model")[1]


def test_trace_runs_the_toy_tier(tier, trace, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["trace", str(trace), "--gpu", "2048", "--cpu", "3072", "--gpu-model", "lru",
                 "--cpu-model", "newest-out", "--no-report", "--out", str(out)]) == 0
    assert "CPU newest-out (newest out)" in capsys.readouterr().out
    requests = pl.read_parquet(out / "requests.parquet").sort("request")
    assert set(requests["cpu_model"].cast(pl.String)) == {"newest-out"}
    expected = replay(4, 6)
    assert list(zip(requests["gpu_hit_tokens"], requests["cpu_hit_tokens"])) == expected
    assert expected != two_tier_replay(LRU(4), LRU(6))         # the toy is not LRU here


def test_plan_sizes_the_toy_tier(tier, trace, capsys):
    assert main(["plan", str(trace), "--target-hit-ratio", "0.3", "--gpu", "2048",
                 "--gpu-model", "lru", "--cpu-model", "newest-out", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cache_models"] == {"gpu": "lru", "cpu": "newest-out"}
    blocks = document["answer"]["cpu"]["tokens"] // BLOCK
    assert hit_ratio(4, blocks) >= 0.3 > hit_ratio(4, blocks - 1)     # the smallest
    assert document["figures"][0]["hit_ratio"] == pytest.approx(hit_ratio(4, blocks))


WORKLOAD = ["--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "600",
            "--model", "qwen2.5-1.5b"]


def test_simulate_runs_the_toy_tier(tier, tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--cpu-model", "newest-out",
                 "--cpu", "2000", "--latency", "roofline", "--out", str(out)]) == 0
    assert "CPU newest-out (newest out)" in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["models"] == \
        {"gpu": "vllm", "cpu": "newest-out"}
    assert NewestOut.inserted > 0


FLEET = ["fleet", *WORKLOAD, "--gpu", "64blocks", "--cpu-model", "newest-out", "--cpu",
         "2000", "--instances", "1,2", "--json"]


def test_fleet_workers_run_the_toy_tier(tier, tmp_path, capsys):
    """Two worker processes, which import the built-in models only, run the toy tier the
    driver registered, with the answers of this process."""
    answers = {}
    for jobs in (1, 2):
        assert main([*FLEET, "--jobs", str(jobs), "--out", str(tmp_path / str(jobs))]) == 0
        answers[jobs] = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                         if line.startswith("{")]
    assert NewestOut.inserted > 0                     # --jobs 1 ran it here
    assert {row["models"]["cpu"] for row in answers[2]} == {"newest-out"}
    assert answers[1] == answers[2] and any(row["cpu_hit_tokens"] for row in answers[2])


def test_plan_fleet_runs_the_toy_tier_in_workers(tier, capsys):
    plan = ["plan", "--fleet", *WORKLOAD, "--instances", "1,2", "--gpu", "40blocks,64blocks",
            "--cpu-model", "newest-out", "--cpu", "2000", "--target-hit-ratio", "0.1",
            "--json"]
    documents = []
    for jobs in ("1", "2"):
        main([*plan, "--jobs", jobs])
        documents.append(json.loads(capsys.readouterr().out))
    assert documents[1]["cache_models"] == {"gpu": "vllm", "cpu": "newest-out"}
    assert documents[0] == documents[1]


def test_fleet_names_a_tier_its_workers_cannot_get(tmp_path, capsys):
    """A class defined inside a function cannot travel to a worker process: one line
    naming it, before any point runs."""
    class Local(NewestOut):
        pass

    registry.register(registry.policy_entry("local-tier", Local, "defined in a function"))
    try:
        assert main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--cpu-model", "local-tier",
                     "--cpu", "2000", "--jobs", "2", "--out", str(tmp_path / "out")]) == 1
    finally:
        registry.unregister("local-tier")
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "local-tier, registered at run time, cannot be sent" in error[0]
    assert not (tmp_path / "out" / "requests").exists()
