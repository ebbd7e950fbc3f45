"""The measure harness against a small local streaming server: timing, reports, errors, resume."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.cli import main as cli_main
from pipeline.measure.client import RequestFailed, parse_event
from pipeline.measure.runner import RunSettings, done_keys, run_requests
from pipeline.measure.workload import (FORCED_WORD, QUESTION_WORDS, WORD_INDEX, WORDS,
                                       document_text, lab_requests, pass_names,
                                       prompt_token_ids, question_text)
from sse_server import SSEServer

LAB_FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")


def lines(path: Path) -> list[dict]:
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


def measure(url: str, out: Path, *extra: str) -> int:
    return cli_main(["measure", "--base-url", url, "--output", str(out), "--docs", "3",
                     "--tokens", "12", "--passes", "fwd,rev", "--quiet", *extra])


def test_the_served_models_name_is_served_model_not_the_kv_preset_option(tmp_path, capsys):
    out = tmp_path / "ttft.jsonl"
    with SSEServer() as server:
        assert measure(server.base_url, out, "--served-model", "meta-llama/Llama-3.1-8B") == 0
        assert {body["model"] for body in server.bodies} == {"meta-llama/Llama-3.1-8B"}
        with pytest.raises(SystemExit) as usage:       # --model is kvlab's KV-size preset
            measure(server.base_url, tmp_path / "b.jsonl", "--model", "llama-3.1-8b")
    assert usage.value.code == 2 and "--model" in capsys.readouterr().err
    assert not (tmp_path / "b.jsonl").exists()


# --- workload ----------------------------------------------------------------------------

def test_lab_workload_orders_names_and_sizes():
    requests = lab_requests("baseline", 4, 30, ["fwd", "fwd", "rev"])
    assert [r.doc for r in requests] == [0, 1, 2, 3, 0, 1, 2, 3, 3, 2, 1, 0]
    assert pass_names(["fwd", "fwd", "rev"]) == ["pass1-cold", "pass2-replay", "pass3-reverse"]
    assert [r.pass_name for r in requests[::4]] == ["pass1-cold", "pass2-replay", "pass3-reverse"]
    tokens = {r.doc: prompt_token_ids(r.prompt) for r in requests}
    assert all(len(t) == 1 + 30 + QUESTION_WORDS for t in tokens.values())
    # documents share only the beginning-of-sequence token; the same doc is the same prompt
    assert {t[:2] for t in tokens.values()} == {(-1, d) for d in range(4)}
    assert len({r.key for r in requests}) == len(requests)


@settings(max_examples=40)
@given(st.integers(0, len(WORDS) - 2), st.integers(1, 300))
def test_documents_have_the_asked_length_and_known_words(doc, tokens):
    words = document_text(doc, tokens).split(" ")
    assert len(words) == tokens and words[0] == WORDS[doc] and FORCED_WORD not in words
    assert all(word in WORD_INDEX for word in words + question_text().split(" "))


# --- stream parsing ----------------------------------------------------------------------

JSON_VALUES = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON_OBJECTS = st.dictionaries(st.text(max_size=5), JSON_VALUES | st.lists(JSON_VALUES, max_size=3),
                               max_size=4)


@settings(max_examples=60)
@given(JSON_OBJECTS)
def test_parse_event_round_trips_any_json_object(event):
    assert parse_event("data: " + json.dumps(event)) == event
    assert parse_event("data:" + json.dumps(event)) == event


def test_parse_event_skips_non_data_lines_and_rejects_bad_data():
    assert [parse_event(x) for x in ("", ": ping", "event: x", "id: 3")] == [None] * 4
    assert parse_event("data: [DONE]") == "[DONE]"
    for bad in ("data: {oops", "data: [1, 2]", "data: 3"):
        with pytest.raises(RequestFailed, match="malformed stream"):
            parse_event(bad)


# --- measuring ---------------------------------------------------------------------------

def test_lines_have_the_lab_schema_timing_and_server_reports(tmp_path):
    out = tmp_path / "ttft.jsonl"
    with SSEServer(modes={1: "slow"}, delay_s=0.08) as server:
        assert measure(server.base_url, out, "--logit-bias", "4626=100",
                       "--max-tokens", "2", "--include-usage") == 0
    rows = lines(out)
    assert [(r["pass"], r["doc"]) for r in rows] == [
        ("pass1-cold", 0), ("pass1-cold", 1), ("pass1-cold", 2),
        ("pass2-reverse", 2), ("pass2-reverse", 1), ("pass2-reverse", 0)]
    for row in rows:
        assert all(field in row for field in LAB_FIELDS)
        assert row["config"] == "baseline" and row["doc_tokens"] == 12
        assert 0 < row["ttft_ms"] <= row["total_ms"]
        assert row["prompt_tokens"] == 7 and row["cached_tokens"] == 5
        assert row["server_timings"] == {"prompt_n": 2, "prompt_ms": 1.5}
    # headers and a ping come at once, the first text after 80 ms: TTFT waits for the text
    assert min(r["ttft_ms"] for r in rows if r["doc"] == 1) >= 80.0
    body = server.bodies[0]
    assert body["stream"] is True and body["max_tokens"] == 2 and body["temperature"] == 0
    assert body["logit_bias"] == {"4626": 100.0}
    assert body["stream_options"] == {"include_usage": True}
    # kvlab's own reader accepts the file
    from kvlab.summarize import read_records
    assert len(read_records(str(out))) == 6


@pytest.mark.parametrize("mode, message", [
    ("http500", "HTTP 500 from .*: internal boom"),
    ("not_json", "malformed stream: data is not JSON"),
    ("no_done", "ended without 'data: \\[DONE\\]'"),
    ("no_text", "no generated text before \\[DONE\\]"),
    ("error_event", "error event in the stream .*context overflow"),
])
def test_each_failure_is_a_line_in_the_output_and_on_stderr_and_resume_retries_it(
        tmp_path, capsys, mode, message):
    import re
    out = tmp_path / "ttft.jsonl"
    with SSEServer(modes={2: mode}) as server:
        assert measure(server.base_url, out) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert "Traceback" not in "\n".join(err)
        failed = [line for line in err if line.startswith("measure: failed: ")]
        assert len(failed) == 2 and len(err) == 3           # doc 2 in both passes, a summary
        assert all(line.startswith("measure: failed: baseline pass") for line in failed)
        assert all(re.search(message, line) for line in failed), failed
        assert err[-1].startswith("error: 2 requests of 6 failed") and "--resume" in err[-1]
        rows = lines(out)
        assert [r["doc"] for r in rows if "error" not in r] == [0, 1, 1, 0]  # the rest went on
        errors = [r for r in rows if "error" in r]
        assert [r["doc"] for r in errors] == [2, 2] and all(re.search(message, r["error"])
                                                            for r in errors)
        assert {r["error_kind"] for r in errors} <= {"http", "malformed", "error-event"}
        # without --resume the file is not touched
        assert measure(server.base_url, out) == 1
        assert "already has lines" in capsys.readouterr().err
        server.modes.clear()
        sent = len(server.bodies)
        assert measure(server.base_url, out, "--resume") == 0
        assert len(server.bodies) == sent + 2          # only the 2 failed requests
    answered = [r for r in lines(out) if "error" not in r]
    assert len({(r["config"], r["repeat"], r["pass"], r["step"]) for r in answered}) == 6


def test_refused_connection_and_timeout_are_one_line(tmp_path, capsys):
    with socket.socket() as sock:          # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "a.jsonl"
    assert measure(f"http://127.0.0.1:{port}", out) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "cannot connect to http://127.0.0.1:" in err[0]
    assert "0 answered, 5 not sent" in err[1]             # a refused connection stops
    assert [r["error_kind"] for r in lines(out)] == ["refused"]   # the failure is a line
    with SSEServer(modes={0: "hang"}, delay_s=1.0) as server:
        assert measure(server.base_url, tmp_path / "b.jsonl", "--timeout", "0.2") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("within 0.2 s (timeout)" in line for line in err)
    assert [r.get("error_kind") for r in lines(tmp_path / "b.jsonl")].count("timeout") == 2


def test_resume_with_nothing_left_sends_nothing(tmp_path, capsys):
    out = tmp_path / "ttft.jsonl"
    with SSEServer() as server:
        assert measure(server.base_url, out) == 0
        assert measure(server.base_url, out, "--resume", "--config", "other") == 0
        assert measure(server.base_url, out, "--resume") == 0
        assert "nothing to do" in capsys.readouterr().err
        assert len(server.bodies) == 12
    assert sorted({r["config"] for r in lines(out)}) == ["baseline", "other"]


def test_concurrency_and_repeats_write_every_request_once(tmp_path):
    requests = lab_requests("c", 4, 10, ["fwd", "rev"], repeats=2)
    out = tmp_path / "ttft.jsonl"
    with SSEServer(modes={1: "slow"}, delay_s=0.05) as server:
        written = run_requests(requests, RunSettings(server.base_url, concurrency=3), out,
                               progress=None)
    assert written == 16
    assert done_keys(out) == {r.key for r in requests}


def test_bad_arguments_and_unreadable_resume_file(tmp_path, capsys):
    assert measure("ftp://x", tmp_path / "a.jsonl") == 1
    assert "--base-url must start with http" in capsys.readouterr().err
    assert measure("http://127.0.0.1:9", tmp_path / "missing" / "a.jsonl") == 1
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"config": "x", "pass": "p", "step": 0}\nnot json\n')
    assert measure("http://127.0.0.1:9", bad, "--resume") == 1
    assert f"{bad}:2: not a measure line" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["measure", "--output", "x"])       # neither --base-url nor --local-engine


@pytest.mark.parametrize("where, resume, reason", [
    ("folder", False, "is a folder: give a file"),
    ("folder", True, "is a folder: give a file"),
    ("/proc/kvlab-no-such.jsonl", False, "cannot write it (No such file or directory)"),
    ("/proc/self/status", True, "cannot write it"),
])
def test_output_paths_that_cannot_take_lines_are_one_line(tmp_path, capsys, where, resume,
                                                          reason):
    out = tmp_path if where == "folder" else Path(where)
    before = sorted(tmp_path.iterdir())
    assert measure("http://127.0.0.1:9", out, *(["--resume"] if resume else [])) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: --output {out}") and reason in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(tmp_path.iterdir()) == before             # nothing written


def test_local_engine_resume_replays_the_cut_group_unrecorded(tmp_path, monkeypatch, capsys):
    """--local-engine's flow with the engine replaced by the test server: a failure mid-group,
    then --resume replays the group's finished requests (not written) and writes the rest."""
    from pipeline.measure.llamacpp import local
    from pipeline.components.llamacpp_cache import StateSize

    server = SSEServer(modes={1: "http500"})

    class FakeEngine:
        def __init__(self, model, log, cache_bytes, n_ctx, threads):
            log.write_text("")
            self.base_url = server.base_url

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(local, "LlamaServer", FakeEngine)
    monkeypatch.setattr(local, "ensure_installed", lambda: "0.3.36")
    monkeypatch.setattr(local, "measure_state_size", lambda *a: StateSize(100, 10))
    monkeypatch.setattr(local, "write_model", lambda path, shape: (path.write_bytes(b"x"), path)[1])
    out = tmp_path / "m.jsonl"
    argv = ["measure", "--local-engine", "--output", str(out), "--docs", "2", "--tokens", "5",
            "--passes", "fwd,rev", "--ram-cache", "a=0,b=1.5", "--quiet",
            "--work-dir", str(tmp_path / "work")]
    with server:
        assert cli_main(argv) == 1                      # config a, doc 1: HTTP 500, then stop
        assert "rerun with --resume" in capsys.readouterr().err
        assert [(r["config"], r["doc"], "error" in r) for r in lines(out)] == [
            ("a", 0, False), ("a", 1, True)]
        server.modes.clear()
        sent = len(server.bodies)
        assert cli_main(argv + ["--resume"]) == 0
        # group a: 1 replayed + 3 new; group b: 4 new
        assert len(server.bodies) == sent + 1 + 3 + 4
    rows = [r for r in lines(out) if "error" not in r]
    assert [(r["config"], r["pass"], r["doc"]) for r in rows] == [
        ("a", "pass1-cold", 0), ("a", "pass1-cold", 1), ("a", "pass2-reverse", 1),
        ("a", "pass2-reverse", 0), ("b", "pass1-cold", 0), ("b", "pass1-cold", 1),
        ("b", "pass2-reverse", 1), ("b", "pass2-reverse", 0)]
    provenance = json.loads((tmp_path / "m.provenance.json").read_text())
    assert provenance["configs"]["b"]["cache_bytes"] == int(1.5 * (100 + 10 * (1 + 5 + 8 + 15)))
    assert "model_vs_server" in capsys.readouterr().out


def test_ram_cache_configs_and_server_context():
    import argparse

    from pipeline.commands.measure import parse_ram_caches
    from pipeline.measure.llamacpp.local import cache_bytes_for, server_context

    configs = parse_ram_caches("baseline=0, small=2.5,all=10")
    assert configs == [("baseline", 0.0), ("small", 2.5), ("all", 10.0)]
    assert cache_bytes_for(configs, 1000) == {"baseline": None, "small": 2500, "all": 10000}
    for bad in ("", "a", "a=-1", "a=x", "=3", "a=1,a=2", "a=inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_ram_caches(bad)
    assert server_context(5009, 16) == 5120 and server_context(20, 4) == 256
    assert server_context(8000, 16) == 8192


@pytest.mark.parametrize("mode", ["tile", "interleave", "random"])
def test_long_doc_qa_pattern_sends_lmcache_s_order(tmp_path, mode):
    from pipeline.workloads.patterns import repeat_order

    out = tmp_path / "q.jsonl"
    with SSEServer() as server:
        assert measure(server.base_url, out, "--pattern", "long-doc-qa", "--repeat-count", "2",
                       "--repeat-mode", mode, "--shuffle-seed", "7") == 0
    rows = lines(out)
    assert [r["doc"] for r in rows] == [0, 1, 2] + repeat_order(3, 2, mode, 7)
    assert [(r["pass"], r["step"]) for r in rows] == (
        [("warmup", s) for s in range(3)] + [("query", s) for s in range(6)])


def test_long_doc_qa_interleave_is_served_by_the_live_context():
    from pipeline.components.llamacpp_cache import StateSize
    from pipeline.measure.llamacpp.compare import predict
    from pipeline.measure.workload import spec_requests

    spec = {"pattern": "long-doc-qa", "docs": 3, "doc_tokens": 20, "repeats": 1,
            "seed": 20261003, "repeat_count": 2, "repeat_mode": "interleave", "shuffle_seed": 0}
    frame = predict(spec_requests("x", spec), {"x": None}, StateSize(100, 10), 4)
    assert frame["predicted_tier"].to_list() == ["miss"] * 3 + ["miss", "gpu"] * 3
