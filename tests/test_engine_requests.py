"""``EngineRequests``, the engine's one input type: ``engine_requests`` derives it from the
one workload type's frames as the engine's own Mooncake reader reads the same file."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from pipeline.engine.request import EngineRequests, SimRequest
from pipeline.engine.workload import engine_requests, read_workload
from pipeline.workloads.mooncake import read_mooncake
from pipeline.workloads.patterns import long_doc_qa
from pipeline.workloads.workload import Workload


def _mooncake(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [7, 8, 9]},
            {"timestamp": 250, "input_length": 1024, "output_length": 1, "hash_ids": [7, 8]},
            {"timestamp": 900, "input_length": 300, "output_length": 12, "hash_ids": [4]}]
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_engine_requests_of_a_mooncake_workload_equal_the_engines_reader(tmp_path):
    path = _mooncake(tmp_path)
    derived = engine_requests(read_mooncake(path, 512), output_tokens=99)
    own = read_workload(path, "mooncake", 512)
    assert derived.label == own.label == str(path)
    assert derived.arrival_unit == own.arrival_unit == "seconds"
    assert derived.lines.tolist() == own.lines.tolist() == [1, 2, 3]
    assert derived.size == own.size == 3
    for a, b in zip(derived.requests, own.requests):
        assert (a.index, len(a.prompt_token_ids), a.max_tokens, a.arrival_s) == \
            (b.index, len(b.prompt_token_ids), b.max_tokens, b.arrival_s)
        assert a.prompt_keys.tolist() == b.prompt_keys.tolist()
    assert [len(r.prompt_keys) for r in derived.requests] == [2, 2, 0]   # full blocks only
    assert derived.where(1) == f"{path}:2"


def test_engine_requests_of_a_pattern_share_keys_and_take_the_default_output():
    pattern = long_doc_qa(num_documents=2, document_length=40, repeat_count=2)
    derived = engine_requests(pattern.workload(16), output_tokens=5, label="--pattern x")
    assert derived.arrival_unit is None and derived.lines is None
    assert [r.max_tokens for r in derived.requests] == [5] * derived.size
    assert all(r.arrival_s is None for r in derived.requests)
    assert derived.size == 6                     # warm-up round, then two reads of each
    assert [len(r.prompt_keys) for r in derived.requests] == [2] * 6    # 40 tokens: 2 full
    assert len({tuple(r.prompt_keys.tolist()) for r in derived.requests}) == 2
    assert derived.where(0) == "--pattern x (request 0)"


def test_whole_items_have_no_engine_requests():
    pattern = long_doc_qa(num_documents=2, document_length=40, repeat_count=1)
    with pytest.raises(ValueError, match="whole items"):
        engine_requests(Workload(pattern.blocks(16), pattern.requests(), None),
                        output_tokens=1)


def test_engine_requests_pickle_for_the_process_pool():
    made = EngineRequests("two", (SimRequest(0, [1, 2], 1, arrival_s=0.0),
                                  SimRequest(1, [1, 3], 2, arrival_s=0.5)),
                          np.array([1, 2]), "seconds")
    back = pickle.loads(pickle.dumps(made))
    assert back.label == "two" and back.lines.tolist() == [1, 2]
    assert [r.prompt_token_ids for r in back.requests] == [[1, 2], [1, 3]]
