"""kvlab/scenario.py: the contract's JSON, the pass semantics and the argument errors."""

import json
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import KVLAB, ModelTwoTier
from kvlab.scenario import run


def scenario(*args, cwd, script=KVLAB / "scenario.py"):
    """Run scenario.py with no site-packages (-S), as graders' plain python3 would."""
    return subprocess.run([sys.executable, "-S", str(script), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=30)


def test_stdout_is_exactly_one_json_document_with_keys_in_order(tmp_path):
    proc = scenario("--passes", "fwd,fwd,rev", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    document = json.loads(proc.stdout)
    assert list(document) == ["passes"]
    for entry in document["passes"]:
        assert list(entry) == ["order", "gpu_hits", "cpu_hits", "misses", "hit_docs"]
    assert [p["order"] for p in document["passes"]] == ["fwd", "fwd", "rev"]
    assert document["passes"][2]["hit_docs"] == [9, 8, 7, 6]


def test_runs_when_the_folder_is_copied_alone(tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(KVLAB, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json*"))
    proc = scenario("--gpu", "50110", "--passes", "fwd,fwd", cwd=tmp_path / "..",
                    script=copy / "scenario.py")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["passes"][1]["gpu_hits"] == 10


def test_defaults_are_the_lab_scenario():
    assert run() == run(gpu=21520, docs=10, tokens=5011, passes=["fwd", "fwd", "rev"], cpu=0)
    passes = run()["passes"]
    assert [p["misses"] for p in passes] == [10, 10, 6]


def test_cyclic_working_set_one_token_too_big_gets_zero_hits():
    assert run(gpu=50109, passes=["fwd", "fwd"])["passes"][1]["gpu_hits"] == 0
    assert run(gpu=50110, passes=["fwd", "fwd"])["passes"][1]["gpu_hits"] == 10


def test_cache_is_kept_across_passes():
    passes = run(gpu=50110, passes=["fwd", "fwd", "rev", "rev"])["passes"]
    assert [p["gpu_hits"] for p in passes] == [0, 10, 10, 10]


def test_offload_reverse_pass_splits_gpu_and_cpu():
    passes = run(gpu=21520, cpu=56000)["passes"]
    assert (passes[1]["cpu_hits"], passes[1]["misses"]) == (10, 0)
    assert (passes[2]["gpu_hits"], passes[2]["cpu_hits"]) == (4, 6)
    assert passes[2]["hit_docs"] == list(range(9, -1, -1))


@given(gpu=st.integers(0, 60000), docs=st.integers(0, 12), tokens=st.integers(0, 9000),
       passes=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4))
def test_cpu_zero_equals_one_tier_and_matches_model(gpu, docs, tokens, passes):
    result = run(gpu=gpu, docs=docs, tokens=tokens, passes=passes, cpu=0)
    model = ModelTwoTier(gpu, 0)
    for entry, order in zip(result["passes"], passes):
        reading = range(docs) if order == "fwd" else range(docs - 1, -1, -1)
        tiers = [model.access(doc, tokens) for doc in reading]
        assert entry["cpu_hits"] == 0
        assert entry["gpu_hits"] == tiers.count("gpu")
        assert entry["misses"] == tiers.count("miss")
        assert entry["hit_docs"] == [d for d, t in zip(reading, tiers) if t != "miss"]


@pytest.mark.parametrize("args", [
    ["--gpu", "-1"], ["--cpu", "-5"], ["--docs", "-2"], ["--tokens", "-1"],
    ["--passes", "fwd,sideways"], ["--passes", ""], ["--passes", "fwd,,rev"], ["--gpu", "lots"],
])
def test_bad_arguments_exit_2_with_one_line(args, tmp_path):
    proc = scenario(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "error" in proc.stderr


@pytest.mark.parametrize("tokens", [0, 1, 16, 5011])
@pytest.mark.parametrize("gpu", [0, 1, 5011, 21520, 50110])
def test_cpu_zero_gives_the_gpu_only_result_for_every_document_size(tokens, gpu):
    one_tier = run(gpu=gpu, tokens=tokens, passes=["fwd", "fwd", "rev"])
    assert run(gpu=gpu, tokens=tokens, passes=["fwd", "fwd", "rev"], cpu=0) == one_tier
    model = ModelTwoTier(gpu, 0)
    for entry, reading in zip(one_tier["passes"], [range(10), range(10), range(9, -1, -1)]):
        tiers = [model.access(doc, tokens) for doc in reading]
        assert (entry["gpu_hits"], entry["cpu_hits"]) == (tiers.count("gpu"), 0)


def test_size_zero_documents_hit_a_capacity_zero_gpu(tmp_path):
    proc = scenario("--gpu", "0", "--tokens", "0", "--passes", "fwd,fwd", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)["passes"][1]
    assert (second["gpu_hits"], second["misses"]) == (10, 0)
