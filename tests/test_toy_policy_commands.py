"""A toy policy registered from this file, as docs/extending.md says (one ``register`` call,
no other edit), is what every command runs, or a command that cannot run it says so: the
benchmark, ``plan``'s modes, ``trace``'s files and the lists of policies."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from pipeline import catalog as registry
from pipeline.cache.tiers import Tier
from pipeline.cli import main


class HighestKeyFirst(Tier):
    """A toy policy: evict the resident key that sorts last."""

    name = "toy"

    def _evict(self, key, size):
        return max(self._sizes)

    def _insert(self, key, size):
        return True


@pytest.fixture
def toy():
    entry = registry.register(registry.policy_entry("toy", HighestKeyFirst, "highest key first"))
    yield entry
    registry.unregister("toy")


def test_bench_times_a_policy_without_a_kernel(toy, capsys):
    from pipeline.bench.policies import run_bench
    from pipeline.bench.curve import distinct_bytes, zipf_trace
    from pipeline.catalog.policy_replay import class_hits, encode

    rows = run_bench(requests=3000, objects=200, points=3, policies=("toy",))
    keys, sizes = zipf_trace(3000, 200, 20261003)
    codes = encode(keys)
    one = int(round(0.10 * distinct_bytes(keys, sizes)))
    assert [row["policy"] for row in rows] == ["toy"]
    assert rows[0]["hits"] == int(class_hits("toy", codes, sizes, one).sum()) > 0
    assert "toy" in capsys.readouterr().out


def test_the_lists_of_policies_come_from_the_registry(toy, capsys):
    import pipeline.policies as policies

    assert main(["policies", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == registry.policy_names() and listed[-1] == "toy"
    assert policies.HighestKeyFirst is HighestKeyFirst and "HighestKeyFirst" in dir(policies)
    with pytest.raises(AttributeError):
        policies.NoSuchPolicy
    with pytest.raises(SystemExit):
        main(["policies", "--help"])
    assert "toy;" in capsys.readouterr().out          # --gpu-policy's choices


LOAD = ["--pattern", "long-doc-qa", "--num-documents", "2", "--document-length", "500",
        "--latency", "roofline", "--model", "llama-3.1-8b", "--rate", "2"]


@pytest.mark.parametrize("option", ["--cpu-model", "--gpu-model"])
def test_plan_under_load_refuses_a_cache_model_it_would_not_run(toy, option, capsys):
    assert main(["plan", "--target-ttft-p90-ms", "100", *LOAD, option, "toy"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"{option} toy: not with --target-ttft-p90-ms" in error[0]


def test_plan_under_load_takes_vllm_by_name(capsys):
    assert main(["plan", "--target-ttft-p90-ms", "100", *LOAD, "--gpu-model", "vllm",
                 "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["cache_models"] == {"gpu": "vllm", "cpu": None}


FLEET = ["plan", "--fleet", "--instances", "1", "--pattern", "long-doc-qa", "--num-documents",
         "2", "--document-length", "500", "--target-hit-ratio", "0.1", "--model",
         "llama-3.1-8b", "--jobs", "1"]     # in this process: the toy is registered here only


def test_plan_fleet_refuses_a_cpu_model_without_a_cpu_tier(toy, capsys):
    assert main([*FLEET, "--cpu-model", "toy"]) == 2
    assert "--cpu-model toy needs --cpu SIZE" in capsys.readouterr().err


def test_plan_fleet_json_names_the_cpu_model_it_ran(toy, capsys):
    main([*FLEET, "--cpu-model", "toy", "--cpu", "2000", "--json"])
    assert json.loads(capsys.readouterr().out)["cache_models"] == {"gpu": "vllm", "cpu": "toy"}


def test_simulate_metrics_name_the_cpu_model_it_ran(toy, tmp_path, capsys):
    out = tmp_path / "sim"
    assert main(["simulate", "--pattern", "long-doc-qa", "--num-documents", "2",
                 "--document-length", "500", "--gpu", "64blocks", "--cpu-model", "toy",
                 "--cpu", "2000",
                 "--latency", "roofline", "--model", "llama-3.1-8b", "--out", str(out)]) == 0
    capsys.readouterr()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["models"] == {"gpu": "vllm", "cpu": "toy"}


def _document_hit_ratio(cpu: int, passes: tuple[int, ...]) -> list[float]:
    """The lab's documents through an LRU GPU (21520 tokens) and a toy CPU tier of ``cpu``
    tokens fed the GPU's misses, access by access: the hit ratio of each pass."""
    from pipeline.policies.simple import LRU
    from pipeline.workloads.documents import documents_workload

    keys, sizes = documents_workload(10, 5011, ["fwd", "fwd", "rev"], None).items()
    gpu, cpu_tier = LRU(21520), HighestKeyFirst(cpu)
    served = np.zeros(len(keys))
    for i, (key, size) in enumerate(zip(keys.tolist(), sizes.tolist())):
        served[i] = size if gpu.access(key, size) or cpu_tier.access(key, size) else 0
    per_pass = served.reshape(3, 10).sum(axis=1) / sizes.reshape(3, 10).sum(axis=1)
    return [float(per_pass[p]) for p in passes]


def test_plan_hit_ratio_runs_a_toy_cpu_policy_on_documents(toy, capsys):
    assert main(["plan", "--target-hit-ratio", "0.6", "--cpu-model", "toy", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cache_models"] == {"gpu": "lru", "cpu": "toy"}
    answer = document["answer"]["cpu"]["tokens"]
    assert min(_document_hit_ratio(answer, (1, 2))) >= 0.6
    assert min(_document_hit_ratio(answer - 1, (1, 2))) < 0.6      # the smallest
    assert [row["hit_ratio"] for row in document["figures"]][1:] == \
        pytest.approx(_document_hit_ratio(answer, (1, 2)))


def test_plan_on_documents_still_refuses_an_engine_model(capsys):
    assert main(["plan", "--target-hit-ratio", "0.6", "--cpu-model", "lmcache"]) == 2
    assert "--cpu-model lmcache: engine models need block mode" in capsys.readouterr().err


def test_trace_files_are_the_toy_models_or_say_whose_they_are(toy, tmp_path, capsys):
    """requests.parquet is the toy's, request by request (a two-tier replay of its class,
    GPU tail-first, CPU head-first past the GPU hit), and so are the report's GPU capacity
    curve and CPU curve; events.parquet's depths, which the toy cannot give (no stack
    depth), say in the file's metadata and on the page that they are the block-lru
    model's."""
    from pipeline.trace import engine
    from test_toy_tier_commands import two_tier_replay
    from pipeline.workloads.mooncake import read_mooncake

    docs = [[d * 100 + b for b in range(3)] for d in range(5)]
    order = [0, 1, 2, 0, 3, 4, 1, 0, 2, 3, 4, 0]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 3 * 512 + 100,
                                         "output_length": 1, "hash_ids": docs[d] + [9000 + i]})
                             + "\n" for i, d in enumerate(order)))
    out = tmp_path / "out"
    assert main(["trace", str(trace), "--gpu", "4blocks", "--cpu", "6blocks", "--gpu-model",
                 "toy", "--cpu-model", "toy", "--report", str(tmp_path / "trace.html"), "--json",
                 "--out", str(out)]) == 0
    capsys.readouterr()

    def replay(gpu: int, cpu: int) -> list[tuple[int, int]]:
        return two_tier_replay(HighestKeyFirst(gpu), HighestKeyFirst(cpu),
                               [docs[d] for d in order])

    expected = replay(4, 6)
    requests = pl.read_parquet(out / "requests.parquet").sort("request")
    assert set(requests["gpu_model"].cast(pl.String)) == {"toy"}
    assert list(zip(requests["gpu_hit_tokens"], requests["cpu_hit_tokens"])) == expected
    assert any(cpu for _, cpu in expected)
    # the GPU capacity curve: the toy alone at each capacity of the page's grid
    stream = read_mooncake(trace).block_stream()
    grid = engine.curve_grid(stream)
    curve = engine.model_gpu_curve(stream, grid, "tail-first", "toy")
    assert curve.tolist() == [sum(g for g, _ in replay(int(c) // 512, 0)) // 512
                              for c in grid]
    assert curve.tolist() != engine.gpu_curve(stream, grid, "tail-first").tolist()
    page = (tmp_path / "trace.html").read_text(encoding="utf-8")
    assert "Hit ratio over GPU capacity (toy tail-first, no CPU tier)" in page
    assert ("the GPU capacity curve and the CPU curve are these models&#x27; (the GPU model "
            "run at each capacity); the tail-first vs head-first curves and the reuse "
            "distances (events.parquet&#x27;s depths) are the block-lru model&#x27;s") in page
    metadata = pl.read_parquet_metadata(out / "events.parquet")
    assert metadata["kvlab.model"] == "block-lru" and metadata["kvlab.gpu_model"] == "toy"
    assert "not --gpu-model toy's" in metadata["kvlab.about"]


def test_trace_events_of_the_block_lru_engine_carry_no_label(tmp_path, capsys):
    """lru runs the block-lru engine: its depths are its own, the file is as before."""
    out = tmp_path / "out"
    assert main(["trace", "--pattern", "long-doc-qa", "--num-documents", "2",
                 "--document-length", "600", "--gpu-model", "lru", "--no-report",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert not any(key.startswith("kvlab.")
                   for key in pl.read_parquet_metadata(out / "events.parquet"))
