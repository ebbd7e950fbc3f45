"""The commands that size a tier default to the engine-faithful models (vllm + lmcache) and
name them in the first line of every answer and in their JSON; the lab's own commands keep
block-lru; the old name ``ideal`` still works, with one warning line, as block-lru."""

from __future__ import annotations

import json

import pytest

from pipeline import catalog as registry
from pipeline.cli import build_parser, main

ZIPF = ["--pattern", "zipf", "--num-documents", "6", "--document-length", "100",
        "--num-requests", "40", "--question-length", "20", "--system-prompt-length", "40",
        "--block-size", "16"]
TRACE = [*ZIPF, "--gpu", "0,160", "--cpu", "0,480", "--no-report"]
ENGINE_LINE = ("models: GPU vllm (vLLM 0.33.0 block pool), CPU lmcache (LMCache "
               "LocalCPUBackend)")
SIM = ["--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "2",
       "--system-prompt-length", "128", "--question-length", "16", "--output-tokens", "4"]


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_trace_defaults_to_vllm_and_lmcache_named_first(tmp_path, capsys):
    status, out, _ = run(capsys, "trace", *TRACE, "--out", tmp_path / "a")
    assert status == 0 and out.splitlines()[0] == ENGINE_LINE
    status, out, _ = run(capsys, "trace", *TRACE, "--out", tmp_path / "b", "--json")
    summary = json.loads(out)
    assert summary["models"] == {"gpu": "vllm", "cpu": "lmcache"}
    assert (summary["gpu_model"], summary["cpu_model"]) == ("vllm", "lmcache")
    explicit = json.loads(run(capsys, "trace", *TRACE, "--out", tmp_path / "c", "--json",
                              "--gpu-model", "vllm", "--cpu-model", "lmcache")[1])
    assert explicit["points"] == summary["points"]


@pytest.mark.parametrize("old, new", [("ideal", "block-lru"),
                                      ("ideal-replay", "block-lru-replay")])
def test_ideal_is_a_deprecated_name_of_block_lru(tmp_path, capsys, old, new):
    status, out_old, err = run(capsys, "trace", *TRACE, "--out", tmp_path / "old",
                               "--gpu-model", old, "--cpu-model", old)
    assert status == 0
    assert err.splitlines() == [
        f"warning: --gpu-model {old} is deprecated: it is now called {new}",
        f"warning: --cpu-model {old} is deprecated: it is now called {new}"]
    status, out_new, err = run(capsys, "trace", *TRACE, "--out", tmp_path / "new",
                               "--gpu-model", new, "--cpu-model", new)
    assert status == 0 and err == ""
    assert out_old.replace("old", "new") == out_new
    assert out_new.splitlines()[0].startswith(f"models: GPU {new} (")


def test_blocks_keeps_the_lab_model_and_takes_the_old_name(capsys):
    default = run(capsys, "blocks", "--gpu", "48000", "--passes", "fwd,fwd")
    named = run(capsys, "blocks", "--gpu", "48000", "--passes", "fwd,fwd",
                "--gpu-model", "block-lru", "--cpu-model", "block-lru")
    old = run(capsys, "blocks", "--gpu", "48000", "--passes", "fwd,fwd", "--gpu-model", "ideal")
    assert default[1] == named[1] == old[1]
    assert json.loads(default[1])["passes"][1]["gpu_hit_tokens"] == 29280
    assert old[2] == "warning: --gpu-model ideal is deprecated: it is now called block-lru\n"


@pytest.mark.parametrize("command", ["trace", "plan", "blocks", "simulate", "fleet", "run"])
def test_help_shows_only_the_new_names(command):
    parser = build_parser(load=[command])
    sub = parser._subparsers._group_actions[0].choices[command]
    text = sub.format_help()
    assert "ideal" not in text and "block-lru" in text
    defaults = {a.dest: a.default for a in sub._actions}
    if command in ("trace", "plan"):
        assert (defaults["gpu_model"], defaults["cpu_model"]) == ("vllm", "lmcache")
    elif command in ("blocks", "run"):
        assert (defaults["gpu_model"], defaults["cpu_model"]) == ("block-lru", "block-lru")


def test_plan_defaults_to_vllm_and_lmcache_named_first(capsys):
    argv = ["plan", "--target-hit-ratio", "0.5", *ZIPF]
    status, out, _ = run(capsys, *argv)
    assert status == 0 and out.splitlines()[0] == ENGINE_LINE
    assert "(GPU vllm tail-first, CPU lmcache head-first)" in out.splitlines()[1]
    document = json.loads(run(capsys, *argv, "--json")[1])
    assert document["cache_models"] == {"gpu": "vllm", "cpu": "lmcache"}
    assert "cache_models_line" not in document
    old = json.loads(run(capsys, *argv, "--json", "--gpu-model", "ideal", "--cpu-model",
                         "ideal")[1])
    assert old["cache_models"] == {"gpu": "block-lru", "cpu": "block-lru"}


def test_plan_of_whole_documents_names_the_document_model(capsys):
    """The lab's documents without --block-size: kvlab's TwoTierCache, as before (the
    engine defaults do not apply); an engine model given there is refused."""
    status, out, _ = run(capsys, "plan", "--target-ttft-ms", "100")
    assert status == 0 and out.splitlines()[0].startswith("models: kvlab's TwoTierCache")
    document = json.loads(run(capsys, "plan", "--target-ttft-ms", "100", "--json")[1])
    assert document["cache_models"] == {"gpu": "two-tier", "cpu": "two-tier"}
    status, _, err = run(capsys, "plan", "--target-ttft-ms", "100", "--cpu-model", "lmcache")
    assert status == 2 and "--cpu-model lmcache: engine models need block mode" in err


def test_simulate_names_its_models_first_and_in_metrics(tmp_path, capsys):
    SIM = ZIPF[:-2]
    status, out, _ = run(capsys, "simulate", *SIM, "--gpu", "40blocks", "--cpu",
                         "512", "--out", tmp_path / "a")
    assert status == 0 and out.splitlines()[0] == ENGINE_LINE
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["models"] == {"gpu": "vllm", "cpu": "lmcache"}
    status, out, _ = run(capsys, "simulate", *SIM, "--gpu", "40blocks",
                         "--out", tmp_path / "b")
    assert out.splitlines()[0] == "models: GPU vllm (vLLM 0.33.0 block pool), CPU none (no " \
                                  "CPU tier)"
    old = run(capsys, "simulate", *SIM, "--gpu", "40blocks", "--cpu", "512",
              "--cpu-model", "ideal", "--out", tmp_path / "old")
    new = run(capsys, "simulate", *SIM, "--gpu", "40blocks", "--cpu", "512",
              "--cpu-model", "block-lru", "--out", tmp_path / "new")
    assert old[2] == "warning: --cpu-model ideal is deprecated: it is now called block-lru\n"
    assert old[1].replace("old", "new") == new[1]
    assert new[1].startswith("models: GPU vllm (vLLM 0.33.0 block pool), CPU block-lru (")


def test_fleet_names_its_models_first_and_in_json(tmp_path, capsys):
    argv = ["fleet", *SIM, "--latency", "roofline", "--jobs", "1", "--instances", "2",
            "--gpu", "40blocks", "--cpu", "512", "--model", "qwen2.5-1.5b"]
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "a")
    assert status == 0 and out.splitlines()[0] == ENGINE_LINE
    status, out, _ = run(capsys, *argv, "--out", tmp_path / "b", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all(row["models"] == {"gpu": "vllm", "cpu": "lmcache"} for row in rows)


def test_registry_names():
    assert "ideal" not in registry.MODELS and "block-lru" in registry.GPU_MODELS
    assert registry.GPU_MODELS["block-lru"] is registry.GPU_MODELS["lru"]   # one engine
    assert registry.DEPRECATED_NAMES == {"ideal": "block-lru",
                                         "ideal-replay": "block-lru-replay"}


def test_plan_fleet_names_its_models_and_takes_the_cpu_model(capsys):
    argv = ["plan", *SIM, "--jobs", "1", "--fleet", "--router", "round-robin", "--instances",
            "1", "--gpu", "40blocks", "--cpu", "512", "--target-hit-ratio", "0.3",
            "--model", "qwen2.5-1.5b"]
    status, out, _ = run(capsys, *argv)
    assert status == 0 and out.splitlines()[0] == ENGINE_LINE
    document = json.loads(run(capsys, *argv, "--json")[1])
    assert document["cache_models"] == {"gpu": "vllm", "cpu": "lmcache"}
    chosen = json.loads(run(capsys, *argv, "--json", "--cpu-model", "lru")[1])
    assert chosen["cache_models"] == {"gpu": "vllm", "cpu": "lru"}
    status, _, err = run(capsys, *argv, "--gpu-model", "block-lru")
    assert status == 2 and "--gpu-model block-lru: not with --fleet" in err


def test_plan_under_load_names_the_engine_first(capsys):
    argv = ["plan", "--target-ttft-p90-ms", "100000", "--pattern", "long-doc-qa",
            "--num-documents", "4", "--document-length", "300", "--output-tokens", "4",
            "--latency", "roofline", "--model", "qwen2.5-7b", "--gpu-type", "L4",
            "--concurrency", "2"]
    status, out, _ = run(capsys, *argv)
    assert status == 0
    assert out.splitlines()[0] == "models: GPU vllm (vLLM 0.33.0 block pool), CPU none (no " \
                                  "CPU tier)"
    assert json.loads(run(capsys, *argv, "--json")[1])["cache_models"] == {"gpu": "vllm",
                                                                          "cpu": None}


def test_an_order_the_default_model_cannot_follow_says_how(tmp_path, capsys):
    status, _, err = run(capsys, "trace", *TRACE, "--out", tmp_path / "o", "--gpu-order",
                         "head-first")
    assert status == 2 and err.count("\n") == 1
    assert "the vllm model is tail-first (the default --gpu-model; --gpu-model block-lru " \
           "follows either order)" in err
    assert not (tmp_path / "o").exists()
    status, out, _ = run(capsys, "trace", *TRACE, "--out", tmp_path / "p", "--gpu-order",
                         "head-first", "--gpu-model", "block-lru")
    assert status == 0 and out.startswith("models: GPU block-lru (")
