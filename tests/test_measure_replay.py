"""measure --trace: prompts per hash id, open/closed-loop timing, failures, sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

from pipeline.cli import main as cli_main
from pipeline.measure.traffic import Timing, block_words, send_times, trace_requests
from sse_server import SSEServer


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(t) for t in path.read_text().splitlines() if t.strip()]


chains = st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True),
                  min_size=2, max_size=6)


@given(chains=chains, cut=st.integers(1, 8))
def test_requests_sharing_hash_ids_share_exactly_those_blocks(tmp_path_factory, chains, cut):
    block = 8
    rows = [{"timestamp": i, "input_length": len(ids) * block - (cut - 1 if i % 2 else 0),
             "output_length": 2, "hash_ids": ids} for i, ids in enumerate(chains)]
    path = write_trace(tmp_path_factory.mktemp("t") / "t.jsonl", rows)
    requests = trace_requests(path, "mooncake", Timing("concurrency"), "c", block_size=block)
    for a, b in zip(requests, requests[1:]):
        words_a, words_b = a.prompt.split(" "), b.prompt.split(" ")
        assert len(words_a) == a.doc_tokens
        shared = 0
        for x, y in zip(a.prefix_ids, b.prefix_ids):
            if x != y:
                break
            shared += 1
        tokens = min(shared * block, len(words_a), len(words_b))
        assert words_a[:tokens] == words_b[:tokens]
        rest_a, rest_b = words_a[tokens:tokens + block], words_b[tokens:tokens + block]
        if shared < min(len(a.prefix_ids), len(b.prefix_ids)) and len(rest_a) == len(rest_b) == block:
            assert rest_a != rest_b                  # the next blocks differ
    assert all(r.max_tokens == 2 and r.send_at_s is None for r in requests)


def test_block_content_is_deterministic_per_id_and_a_partial_block_is_its_prefix():
    assert block_words(7, 512) == block_words(7, 512)
    assert block_words(7, 100) == block_words(7, 512)[:100]
    assert block_words(7, 512) != block_words(8, 512)


def test_poisson_and_trace_send_times():
    stamps = np.array([5000.0, 6000.0, 9000.0])
    assert send_times(Timing("trace", speed=2.0), stamps).tolist() == [0.0, 0.5, 2.0]
    assert send_times(Timing("concurrency"), stamps) is None
    a = send_times(Timing("rate", rate=4.0, seed=3), np.zeros(4000))
    b = send_times(Timing("rate", rate=4.0, seed=3), np.zeros(4000))
    assert np.array_equal(a, b) and a[0] == 0 and np.all(np.diff(a) > 0)
    assert abs(np.diff(a).mean() - 0.25) < 0.02
    c = send_times(Timing("rate", rate=4.0, seed=4), np.zeros(4000))
    assert not np.array_equal(a, c)


def test_open_loop_sends_on_schedule_while_answers_are_slow(tmp_path):
    rows = [{"timestamp": i * 100, "input_length": 6, "output_length": 2, "hash_ids": [i]}
            for i in range(5)]
    trace = write_trace(tmp_path / "t.jsonl", rows)
    out = tmp_path / "m.jsonl"
    # every answer takes 0.5 s, longer than the 0.4 s over which the five are due
    with SSEServer(modes={d: "slow" for d in range(1000)}, delay_s=0.5) as server:
        assert cli_main(["measure", "--base-url", server.base_url, "--output", str(out),
                         "--trace", str(trace), "--quiet", "--engine", "test"]) == 0
    got = lines(out)
    assert [r["pass"] for r in got] == ["trace-x1"] * 5
    for r in got:                  # sent at its time although earlier answers take 0.5 s
        assert abs(r["send_s"] - r["scheduled_s"]) < 0.3, r
        assert r["ttft_ms"] >= 500 and r["end_s"] >= r["send_s"] + 0.5
        assert r["prefix_block"] == 512 and r["max_tokens"] == 2 and r["session"] == 0
    assert sorted(r["step"] for r in got) == list(range(5))
    sidecar = json.loads((tmp_path / "m.provenance.json").read_text())
    assert sidecar["kind"] == "measure-replay" and sidecar["engine"]["name"] == "test"
    assert sidecar["workload"]["format"] == "mooncake" and sidecar["workload"]["requests"] == 5
    assert sidecar["timing"] == {"kind": "trace", "speed": 1.0}
    assert "cpu" in sidecar["hardware"]["client_machine"]


def test_token_id_trace_is_sent_as_given_and_resume_checks_the_sidecar(tmp_path, capsys):
    rows = [{"timestamp": 0, "tokens": list(range(1, 40))},
            {"timestamp": 1, "tokens": list(range(1, 20)) + [7, 7]}]
    trace = write_trace(tmp_path / "t.jsonl", rows)
    out = tmp_path / "m.jsonl"
    with SSEServer() as server:
        assert cli_main(["measure", "--base-url", server.base_url, "--output", str(out),
                         "--trace", str(trace), "--concurrency", "1", "--quiet"]) == 0
        assert server.bodies[0]["prompt"] == list(range(1, 40))
    got = lines(out)
    assert [r["doc_tokens"] for r in got] == [39, 21] and got[0]["prefix_block"] == 16
    assert got[0]["prefix_ids"][0] == got[1]["prefix_ids"][0]      # the first 16 tokens agree
    assert got[0]["prefix_ids"][1] != got[1]["prefix_ids"][1]
    assert cli_main(["measure", "--base-url", "http://127.0.0.1:9", "--output", str(out),
                     "--trace", str(trace), "--rate", "3", "--resume"]) == 1
    assert "describes another timing" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--speed", "2"], "--speed replays a trace's timestamps: it needs --trace"),
    (["--trace", "T", "--rate", "1", "--concurrency", "2"], "--rate and --concurrency exclude"),
])
def test_timing_options_that_contradict(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / "t.jsonl") if a == "T" else a for a in argv]
    write_trace(tmp_path / "t.jsonl", [{"timestamp": 0, "tokens": [1, 2]}])
    assert cli_main(["measure", "--base-url", "http://127.0.0.1:9", "--output",
                     str(tmp_path / "m.jsonl"), *argv]) == 1
    assert message in capsys.readouterr().err


def test_a_bad_trace_line_is_one_line(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", [
        {"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1, "input_length": 900, "output_length": 1, "hash_ids": [1]}])
    assert cli_main(["measure", "--base-url", "http://127.0.0.1:9", "--output",
                     str(tmp_path / "m.jsonl"), "--trace", str(trace)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{trace}:2: input_length 900" in err
    assert not (tmp_path / "m.jsonl").exists() or not (tmp_path / "m.jsonl").read_text()


def _fake_local_engine(monkeypatch) -> tuple[SSEServer, list]:
    """``--local-engine`` with llama.cpp replaced by the test server: (the server, the
    (cache bytes, n_ctx, nice) of every engine started)."""
    from pipeline.measure.llamacpp import local, replay

    server = SSEServer()
    started = []

    class FakeEngine:
        def __init__(self, model, log, cache_bytes, n_ctx, threads, nice=None):
            log.write_text("")
            self.base_url, self.port = server.base_url, 1
            started.append((cache_bytes, n_ctx, nice))

        def command(self):
            return ["python", "-m", "llama_cpp.server"]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(replay, "LlamaServer", FakeEngine)
    monkeypatch.setattr(local, "ensure_installed", lambda: "0.3.36")
    monkeypatch.setattr(local, "write_model",
                        lambda path, shape: (path.write_bytes(b"x"), path)[1])
    return server, started


def test_local_engine_replay_writes_the_engine_model_and_a_session_per_server(
        tmp_path, monkeypatch, capsys):
    """--local-engine --trace with the engine replaced by the test server: the sidecar
    describes llama.cpp's engine model; --resume starts a new server (a new session)."""
    server, started = _fake_local_engine(monkeypatch)
    rows = [{"timestamp": i, "input_length": 600, "output_length": 3, "hash_ids": [i, 9 + i]}
            for i in range(4)]
    trace = write_trace(tmp_path / "t.jsonl", rows)
    out = tmp_path / "m.jsonl"
    argv = ["measure", "--local-engine", "--trace", str(trace), "--rate", "20", "--nice", "5",
            "--output", str(out), "--quiet", "--work-dir", str(tmp_path / "work")]
    with server:
        assert cli_main([*argv, "--limit", "2"]) == 0
        assert cli_main([*argv, "--resume"]) == 0
    assert started == [(None, 768, 5), (None, 768, 5)]      # no RAM cache; 601 + 3 -> 768
    got = lines(out)
    # lines land as requests finish: at --rate 20 on a busy machine, 3 may finish before 2
    assert sorted((r["step"], r["session"]) for r in got) == [(0, 0), (1, 0), (2, 1), (3, 1)]
    sidecar = json.loads((tmp_path / "m.provenance.json").read_text())
    assert sidecar["engine"]["name"] == "llama.cpp" and sidecar["kv_bytes_per_token"] == 2048
    model = sidecar["engine_model"]
    assert (model["max_num_seqs"], model["max_num_batched_tokens"], model["block_size"]) == (
        1, 512, 1)
    assert sidecar["options"]["nice"] == 5 and len(sidecar["sessions"]) == 2
    assert sidecar["timing"]["kind"] == "rate" and sidecar["workload"]["requests"] == 4
    assert "speed_probe" not in sidecar["sessions"][0]               # off by default


def test_speed_probe_times_fixed_prompts_around_the_run_into_the_session(
        tmp_path, monkeypatch):
    from pipeline.fit.inputs import load_runs
    from pipeline.measure.probe import PROBE_PROMPTS, PROBE_TOKENS
    server, started = _fake_local_engine(monkeypatch)
    trace = write_trace(tmp_path / "t.jsonl", [
        {"timestamp": i, "input_length": 600, "output_length": 3, "hash_ids": [i, 9 + i]}
        for i in range(2)])
    out = tmp_path / "m.jsonl"
    with server:
        assert cli_main(["measure", "--local-engine", "--trace", str(trace), "--output",
                         str(out), "--quiet", "--speed-probe",
                         "--work-dir", str(tmp_path / "work")]) == 0
    assert started[0][1] > PROBE_TOKENS              # the context holds a probe prompt
    probe = json.loads((tmp_path / "m.provenance.json").read_text())["sessions"][0][
        "speed_probe"]
    assert probe["tokens"] == PROBE_TOKENS and probe["max_tokens"] == 1
    assert len(probe["before_ms"]) == len(probe["after_ms"]) == PROBE_PROMPTS
    assert all(t > 0 for t in probe["before_ms"] + probe["after_ms"])
    assert len(lines(out)) == 2                       # the probe writes no request line
    (run,) = load_runs([out])
    assert run.speed_probe_ms == pytest.approx(
        float(np.median(probe["before_ms"] + probe["after_ms"])))


def test_a_timed_pattern_records_its_whole_prompt_for_fit(tmp_path):
    from pipeline.fit.inputs import load_runs
    out = tmp_path / "m.jsonl"
    with SSEServer() as server:
        assert cli_main(["measure", "--base-url", server.base_url, "--output", str(out),
                         "--docs", "2", "--tokens", "12", "--passes", "fwd,fwd", "--rate", "50",
                         "--quiet"]) == 0
    got = sorted(lines(out), key=lambda r: r["step"])     # written as answers come
    assert [r["doc"] for r in got] == [0, 1, 0, 1] and {r["pass"] for r in got} == {"rate-50"}
    assert all(r["input_tokens"] == 12 + 8 for r in got)       # document + question
    (run,) = load_runs([out])
    # the server's usage says 7 prompt tokens (the test server's fixed reply): fit takes it
    assert run.prompt_tokens.tolist() == [7, 7, 7, 7]
    assert len({tuple(p.tolist()) for p in run.prompts}) == 2    # two documents, twice each


def test_speed_probe_with_base_url_and_its_refusals(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", [
        {"timestamp": i, "input_length": 40, "output_length": 2, "hash_ids": [i]}
        for i in range(2)])
    out = tmp_path / "m.jsonl"
    with SSEServer() as server:
        assert cli_main(["measure", "--base-url", server.base_url, "--trace", str(trace),
                         "--output", str(out), "--quiet", "--speed-probe"]) == 0
    probe = json.loads((tmp_path / "m.provenance.json").read_text())["sessions"][0][
        "speed_probe"]
    assert len(probe["before_ms"]) == len(probe["after_ms"]) == 3
    assert len(lines(out)) == 2
    capsys.readouterr()
    assert cli_main(["measure", "--base-url", "http://127.0.0.1:9", "--speed-probe",
                     "--output", str(tmp_path / "lab.jsonl")]) == 2     # not a replay
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--speed-probe: only with a replay" in err[0]
    assert cli_main(["measure", "--base-url", "http://127.0.0.1:9", "--trace", str(trace),
                     "--speed-probe", "--output", str(tmp_path / "gone.jsonl")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--speed-probe: cannot connect" in err[0]
    assert not (tmp_path / "gone.jsonl").exists()
    assert not (tmp_path / "gone.provenance.json").exists()       # nothing written
