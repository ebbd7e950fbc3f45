"""The session router's key: session ids read from a trace (``session_id``, or ``chat_id``
chains), a workload without them refused in one line naming the option, ``session.key``."""

from __future__ import annotations

import json

import pytest

from pipeline.cli import main
from pipeline.engine.workload import read_workload
from pipeline.fleet.routers import make_router
from pipeline.fleet.routers.base import RouteRequest
from pipeline.fleet.routers.session import instance_for


def _trace(tmp_path, extra: list[dict]):
    """Mooncake lines that all open with the same block (as a shared system prompt)."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 50 * i, "input_length": 600,
                                        "output_length": 2, "hash_ids": [0, 100 + i], **e})
                            + "\n" for i, e in enumerate(extra)))
    return path


def test_session_ids_come_from_session_id_or_the_first_chat_of_a_chain(tmp_path):
    path = _trace(tmp_path, [{"session_id": "a"}, {"session_id": 7},
                             {"chat_id": 10, "parent_chat_id": -1},
                             {"chat_id": 11, "parent_chat_id": 10},
                             {"chat_id": 12, "parent_chat_id": 11}, {}])
    sessions = [r.session for r in read_workload(path, "mooncake", 16).requests]
    assert sessions == ["a", "7", "chat 10", "chat 10", "chat 10", None]


def test_token_traces_carry_session_ids_too(tmp_path):
    path = tmp_path / "tokens.jsonl"
    path.write_text("".join(json.dumps({"prompt_token_ids": [1, 2, 3], "max_tokens": 2,
                                        "session_id": s}) + "\n" for s in ("x", "y")))
    assert [r.session for r in read_workload(path, "tokens", 16).requests] == ["x", "y"]


FLEET = ["--router", "session", "--instances", "3", "--gpu", "200blocks",
         "--model", "qwen2.5-1.5b", "--latency", "roofline", "--jobs", "1", "--json"]


def test_a_trace_without_session_ids_is_refused_naming_the_key_option(tmp_path, capsys):
    path = _trace(tmp_path, [{}] * 6)
    out = tmp_path / "out"
    assert main(["fleet", str(path), *FLEET, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "6 of 6 requests have no session id" in err
    assert "--router-option session.key=blocks:N" in err and not out.exists()
    assert main(["plan", str(path), "--fleet", *FLEET, "--target-hit-ratio", "0.1"]) == 1
    assert "--router-option session.key=blocks:N" in capsys.readouterr().err


def test_session_key_blocks_routes_a_trace_without_session_ids(tmp_path, capsys):
    path = _trace(tmp_path, [{}] * 6)
    assert main(["fleet", str(path), *FLEET, "--router-option", "session.key=blocks:2",
                 "--out", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["router"] == "session"


def test_a_bad_session_key_is_a_usage_error(tmp_path, capsys):
    path = _trace(tmp_path, [{"session_id": "a"}])
    assert main(["fleet", str(path), *FLEET, "--router-option", "session.key=first"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "session.key=first" in err and "blocks:N" in err


def test_the_key_is_the_session_id_else_the_first_n_blocks():
    view = None                                          # the session router reads no view
    by_session = make_router("session", 5, 16)
    assert by_session.route(RouteRequest(0, [1, 2], 32, 0.0, "s"), view) == \
        (instance_for("session:s", 5), "session")
    with pytest.raises(ValueError, match="no session id"):
        by_session.route(RouteRequest(1, [1, 2], 32, 0.0), view)
    by_blocks = make_router("session", 5, 16, key="blocks:2")
    assert by_blocks.route(RouteRequest(1, [1, 2, 3], 48, 0.0), view) == \
        (instance_for("block:2", 5), "block")
    assert by_blocks.route(RouteRequest(2, [1], 16, 0.0), view)[0] == instance_for("block:1", 5)
    assert by_blocks.route(RouteRequest(3, [], 8, 0.0), view)[0] == instance_for("request:3", 5)
