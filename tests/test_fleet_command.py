"""``python -m pipeline fleet``: outputs, --json, --resume, failed and killed points, bad
input (one line, exit 2/1, nothing written)."""

import json
import os

import polars as pl
import pyarrow.dataset as ds
import pytest

from conftest import folder_snapshot
from pipeline.cli import main
from pipeline.fleet import sweep
from pipeline.fleet.sweep_point import Point, Settings, point_path

BASE = ["--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "2",
        "--system-prompt-length", "128", "--question-length", "16", "--output-tokens", "4",
        "--latency", "roofline", "--model", "qwen2.5-1.5b", "--jobs", "1"]


def run(capsys, *argv):
    status = main(["fleet", *BASE, *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_sweep_writes_a_dataset_by_point_and_json_rows(tmp_path, capsys):
    out = tmp_path / "out"
    status, stdout, _ = run(capsys, "--router", "round-robin,kv-cost", "--instances", "1,3",
                            "--gpu", "40blocks,80blocks", "--out", str(out), "--json")
    assert status == 0
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert len(rows) == 8 and {r["router"] for r in rows} == {"round-robin", "kv-cost"}
    assert set(rows[0]) == {"router", "instances", "gpu_blocks", "load", "prompt_tokens",
                            "gpu_hit_tokens", "cpu_hit_tokens", "ttft_p50_ms", "ttft_p90_ms",
                            "imbalance", "requests", "overloaded", "offered_rate",
                            "served_rate", "queue_at_last_arrival", "peak_queue", "models",
                            "step_time_model"}
    assert rows[0]["models"] == {"gpu": "vllm", "cpu": None}       # no CPU tier
    assert rows[0]["step_time_model"].startswith("roofline (")     # the TTFT's source
    table = ds.dataset(out / "requests", format="parquet", partitioning="hive").to_table()
    requests = pl.from_arrow(table)
    assert requests["point"].n_unique() == 8 and requests.height == 8 * 12
    assert {"instance", "decision", "gpu_hit_tokens", "cpu_hit_tokens", "ttft_ms",
            "queue_ms"} <= set(requests.columns)
    one = [r for r in rows if r["instances"] == 1]          # one instance: routers agree
    by_blocks = {}
    for r in one:
        by_blocks.setdefault(r["gpu_blocks"], []).append(
            (r["gpu_hit_tokens"], r["ttft_p90_ms"]))
    assert all(len(set(v)) == 1 for v in by_blocks.values())
    fleet = pl.read_parquet(out / "fleet.parquet")
    assert fleet.height == 8 and (fleet["imbalance"] >= 1).all()
    assert pl.read_parquet(out / "instances.parquet").height == 2 * 2 * (1 + 3)
    report = (out / "report.html").read_text()
    assert "round robin's TTFT p90" in report and "kv-cost" in report
    assert '<section class="summary">' in report and "TPOT p90" in report
    assert "max_num_seqs 256" in report and "roofline at measured efficiency" in report


def test_resume_skips_finished_points_and_reruns_failed_ones(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    real = sweep.run_point

    def failing(settings, point, workload):
        if point.gpu_blocks == 80:
            raise RuntimeError("boom")
        return real(settings, point, workload)

    monkeypatch.setattr(sweep, "run_point", failing)
    status, _, stderr = run(capsys, "--gpu", "40blocks,80blocks", "--out", str(out))
    assert status == 1
    assert stderr.strip() == "error: point round-robin_n2_b80_l1: RuntimeError: boom"
    assert point_path(out, "requests", Point("round-robin", 2, 40, 1.0)).exists()
    assert not point_path(out, "requests", Point("round-robin", 2, 80, 1.0)).exists()
    kept = point_path(out, "requests", Point("round-robin", 2, 40, 1.0)).read_bytes()
    calls = []
    monkeypatch.setattr(sweep, "run_point", lambda s, p, w: calls.append(p) or real(s, p, w))
    status, _, _ = run(capsys, "--gpu", "40blocks,80blocks", "--out", str(out), "--resume")
    assert status == 0 and [p.gpu_blocks for p in calls] == [80]
    assert point_path(out, "requests", Point("round-robin", 2, 40, 1.0)) \
        .read_bytes() == kept
    assert pl.read_parquet(out / "fleet.parquet").height == 2
    status, _, stderr = run(capsys, "--gpu", "40blocks,80blocks", "--out", str(out), "--resume",
                            "--seed", "5")
    assert status == 1 and "written with other settings" in stderr
    status, _, stderr = run(capsys, "--gpu", "40blocks", "--out", str(out))
    assert status == 1 and "--resume continues it" in stderr


class KillOnce:
    """A step-time model whose first call anywhere kills its process (a marker file)."""

    label = "roofline wrapper that kills its worker once (test)"

    def __init__(self, model, marker):
        self.model, self.marker = model, marker

    def step_ms(self, record):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.model.step_ms(record)


def killed_worker_inputs(tmp_path):
    """Settings whose first step anywhere kills its worker, two points, a small workload."""
    from argparse import Namespace

    from pipeline.engine.config import SchedulerConfig
    from pipeline.fleet.workload import load_workload
    from pipeline.steptime.options import latency_from_args

    parser_args = Namespace(trace=None, pattern="groups", groups=2, users=2, questions=1,
                            system_prompt_length=64, question_length=16, output_tokens=2,
                            rate=4.0, shuffle_seed=0)
    workload = load_workload(parser_args)
    model = latency_from_args(Namespace(latency="roofline", gpu_type="H100", gpu_tflops=None,
                                        gpu_fp8_tflops=None, gpu_hbm_gbps=None,
                                        host_link_gbps=None, weights="bf16",
                                        step_overhead_ms=1.0, model_shape=None,
                                        model="qwen2.5-1.5b"))
    settings = Settings(SchedulerConfig(num_gpu_blocks=64, max_model_len=256),
                        KillOnce(model, str(tmp_path / "killed")))
    points = [Point("round-robin", 2, 64, 1.0), Point("kv-cost", 2, 64, 1.0)]
    return settings, points, workload


def test_a_killed_worker_is_retried_in_a_fresh_pool(tmp_path):
    """One point on a pool of two: its worker dies, the pool breaks, a fresh pool runs it
    (one spawned worker per pool, each importing the pipeline; a second point only spawned
    two more, its failure being the same broken pool's)."""
    settings, points, workload = killed_worker_inputs(tmp_path)
    points = points[:1]
    failed = sweep.run_sweep(settings, points, workload, tmp_path, jobs=2, retries=1)
    assert failed == {} and (tmp_path / "killed").exists()
    assert all(point_path(tmp_path, "requests", p).exists() for p in points)


@pytest.mark.parametrize("argv, status, message", [
    (["--router", "bogus"], 2, "unknown router 'bogus'"),
    (["--instances", "0"], 2, "instance counts must be >= 1"),
    (["--router", "round-robin", "--router-option", "kv-cost.temperature=1"], 2,
     "router kv-cost is not among --router round-robin"),
    (["--router", "kv-cost", "--router-option", "kv-cost.heat=1"], 2, "has no option 'heat'"),
    (["--router", "least-loaded", "--router-option", "least-loaded.metric=x"], 2,
     "bad value 'x'"),
    (["--executor", "ray", "--ray-address", "127.0.0.1:9"], 1, "no Ray cluster answers"),
    (["--gpu", "3blocks"], 1, "--gpu 3blocks: the longest request needs"),
    (["--max-model-len", "10"], 1, "--max-model-len 10"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, status, message):
    out = tmp_path / "out"
    (tmp_path / "keep").write_text("x")
    before = folder_snapshot(tmp_path)
    try:                                  # argparse's errors exit, the others return
        code = main(["fleet", *BASE, "--out", str(out), *argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == status and message in err and len(err.strip().splitlines()) == 1
    assert folder_snapshot(tmp_path) == before


def test_a_dead_ray_address_keeps_local_results(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(capsys, "--out", str(out))[0] == 0
    before = folder_snapshot(out)
    status, _, stderr = run(capsys, "--out", str(out), "--resume", "--executor", "ray",
                            "--ray-address", "127.0.0.1:9")
    assert status == 1 and "no Ray cluster answers" in stderr
    assert folder_snapshot(out) == before


def test_an_address_that_accepts_but_is_no_ray_cluster_is_one_line(tmp_path, capsys,
                                                                   monkeypatch):
    """Something listening that never speaks Ray: ray.init would retry for minutes, log
    and end in a traceback; the probe gives up after RAY_PROBE_S in one line."""
    import socket

    from pipeline.commands import fleet as command

    monkeypatch.setattr(command, "RAY_PROBE_S", 2.0)
    silent = socket.create_server(("0.0.0.0", 0))
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        before = folder_snapshot(tmp_path)
        status, _, stderr = run(capsys, "--out", str(tmp_path / "out"), "--executor", "ray",
                                "--ray-address", address)
    finally:
        silent.close()
    assert status == 1, stderr
    assert stderr.strip().count("\n") == 0 and "Traceback" not in stderr
    assert f"--ray-address {address}: no Ray cluster answers" in stderr
    assert folder_snapshot(tmp_path) == before


def test_a_token_trace_in_steps_is_refused_not_given_poisson_arrivals(tmp_path, capsys):
    """The fleet runs on milliseconds: arrival_step lines are named, not silently replaced
    by --rate arrivals."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_step": 0, "prompt_token_ids": [1, 2, 3], "max_tokens": 1}\n'
                     '{"arrival_step": 4, "prompt_token_ids": [1, 2], "max_tokens": 1}\n')
    before = folder_snapshot(tmp_path)
    status = main(["fleet", str(trace), "--format", "tokens", "--gpu", "8blocks", "--model",
                   "qwen2.5-1.5b", "--jobs", "1", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1
    assert f"{trace}: arrivals are in steps (arrival_step)" in err
    assert folder_snapshot(tmp_path) == before


def test_a_pool_beyond_the_block_limit_is_a_usage_error(tmp_path, capsys):
    """Not one MemoryError per point (and a sweep.json) after the workers tried."""
    from pipeline.sizes.limits import MAX_BLOCKS

    code = main(["fleet", *BASE, "--gpu", f"64blocks,{MAX_BLOCKS + 1}blocks", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--gpu: {MAX_BLOCKS + 1:,} blocks of 16: at most {MAX_BLOCKS:,}" in err
    assert folder_snapshot(tmp_path) == {}


@pytest.mark.parametrize("argv, message, status", [
    (["--pattern", "groups", "--system-prompt-length", "16", "--limit", "3"],
     "--limit takes a TRACE's first N requests; --pattern groups sets its size", 2),
    (["--pattern", "groups"], "--pattern groups: give --system-prompt-length or "
     "--question-length", 2),
    (["--pattern", "multi-turn"], "--pattern multi-turn: give --system-prompt-length or "
     "--question-length", 2),
    ([*BASE, "--ray-address", "127.0.0.1:9"],
     "--ray-address 127.0.0.1:9 joins a Ray cluster: give it with --executor ray", 2),
    ([*BASE, "--max-model-len", "144"],                      # prompts of 128 + 16 tokens
     "--max-model-len 144: the longest prompt has 144 tokens (vLLM needs room for 1 output", 1),
])
@pytest.mark.parametrize("command", [["fleet"], ["plan", "--fleet"]])
def test_options_that_would_be_ignored_are_refused(tmp_path, capsys, command, argv, message,
                                                   status):
    """Not run as if absent: --limit on a pattern, --ray-address without Ray, a pattern
    whose prompts would be empty (usage errors, exit 2, in fleet and plan --fleet); and a
    prompt vLLM would refuse (max_model_len tokens: the data, exit 1)."""
    if command != ["fleet"] and status == 1:
        pytest.skip("plan --fleet reads the workload after its own checks")
    before = folder_snapshot(tmp_path)
    extra = (["--gpu", "64blocks", "--jobs", "1", "--out", str(tmp_path / "out")]
             if command == ["fleet"] else
             ["--instances", "2", "--gpu", "64blocks", "--target-hit-ratio", "0.5"])
    try:
        got = main([*command, *argv, *extra])
    except SystemExit as exit_:
        got = exit_.code
    err = capsys.readouterr().err
    assert got == status and err.count("\n") == 1 and message in err, err
    assert folder_snapshot(tmp_path) == before


def test_list_routers_names_every_router_and_default(capsys):
    assert main(["fleet", "--list-routers"]) == 0
    text = capsys.readouterr().out
    assert "prefix-approx.cache_threshold=0.3" in text and "kv-cost.temperature=0.0" in text


def test_capacity_saved_compares_the_fewest_blocks_for_each_target():
    from pipeline.charts.fleet import capacity_saved

    fleet = pl.DataFrame({"router": ["round-robin"] * 3 + ["kv-cost"] * 3,
                          "instances": [2] * 6, "load": [1.0] * 6,
                          "gpu_blocks": [100, 200, 400] * 2,
                          "ttft_p90_ms": [9.0, 6.0, 4.0, 6.0, 4.0, 3.0]})
    saved = capacity_saved(fleet).filter(pl.col("router") == "kv-cost")
    assert saved.select("target_ms", "blocks_needed", "baseline_blocks").rows() == [
        (4.0, 200, 400), (6.0, 100, 200), (9.0, 100, 100)]
    assert saved["saved"].to_list() == [0.5, 0.5, 0.0]


def test_smallest_memory_meeting_the_targets():
    from pipeline.fleet.plan import smallest_memory

    fleet = pl.DataFrame({"router": ["a", "a", "a", "b"], "load": [1.0] * 4,
                          "instances": [2, 4, 1, 2], "gpu_blocks": [200, 100, 300, 50],
                          "ttft_p90_ms": [5.0, 4.0, 3.0, 9.0],
                          "hit_ratio": [0.5, 0.6, 0.7, 0.1]})
    plan = smallest_memory(fleet, ttft_p90_ms=5.0)
    assert plan.select("router", "total_blocks", "instances").rows() == [
        ("a", 300, 1), ("b", None, None)]
    assert smallest_memory(fleet, hit_ratio=0.55).row(0, named=True)["instances"] == 1
    both = smallest_memory(fleet, ttft_p90_ms=4.5, hit_ratio=0.55)
    assert both.filter(pl.col("router") == "a")["total_blocks"].to_list() == [300]


def test_smallest_memory_counts_replicas_gpu_kv_and_cpu_tier():
    from pipeline.fleet.plan import Memory, smallest_memory

    fleet = pl.DataFrame({"router": ["a", "a"], "load": [1.0, 1.0], "instances": [4, 1],
                          "gpu_blocks": [50, 300], "ttft_p90_ms": [1.0, 1.0],
                          "hit_ratio": [0.5, 0.5]})
    kv = (1 << 30) // 1600                       # 1600 tokens: 1 GiB
    def best(**memory):
        row = smallest_memory(fleet, ttft_p90_ms=2.0, memory=Memory(kv, 16, **memory)).row(
            0, named=True)
        return row["instances"], round(row["total_gib"], 3)
    assert best() == (4, 2.0)                    # 4 x 50 blocks < 1 x 300 blocks
    assert best(cpu_tokens=3200) == (1, 5.0)     # 4 x (0.5 + 2) GiB > 3 + 2 GiB
    assert best(cpu_tokens=3200, cpu_shared=True) == (4, 4.0)   # one pool: 2 + 2 GiB
    assert smallest_memory(fleet, ttft_p90_ms=2.0)["gpu_gib"].to_list() == [None]


def test_any_cpu_model_per_instance_or_shared(tmp_path, capsys):
    """``--cpu-model lru`` under each instance and as one ``--cpu-shared`` pool; the sweep's
    settings record the model only when given (a default sweep's are as before)."""
    served = {}
    for name, extra in (("default", []), ("lru", ["--cpu-model", "lru"]),
                        ("shared", ["--cpu-model", "lru", "--cpu-shared"])):
        out = tmp_path / name
        status, stdout, err = run(capsys, "--router", "round-robin", "--instances", "2",
                                  "--gpu", "14blocks", "--cpu", "4096", *extra,
                                  "--out", str(out), "--json")
        assert status == 0, err
        served[name] = json.loads(stdout)["cpu_hit_tokens"]
        settings = json.loads((out / "sweep.json").read_text())["settings"]
        assert settings["cpu_chunk_size"] == (256 if name == "default" else None)
        assert settings.get("cpu_tier_model") == (None if name == "default" else "lru")
    assert served["lru"] > 0 and served["shared"] > served["lru"]
