"""The one workload type: readers, patterns and the lab's documents all produce it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.workloads import patterns
from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA, check_blocks
from pipeline.workloads.documents import DocumentWorkload
from pipeline.workloads.mooncake import read_mooncake
from pipeline.workloads.tokens import read_tokens
from pipeline.workloads.workload import Workload


def sources(tmp_path):
    tokens = tmp_path / "t.jsonl"
    tokens.write_text(json.dumps({"timestamp": 0, "tokens": [1, 2, 3]}) + "\n")
    moon = tmp_path / "m.jsonl"
    moon.write_text(json.dumps({"timestamp": 0, "input_length": 3, "output_length": 1,
                                "hash_ids": [7]}) + "\n")
    return {"tokens": read_tokens(tokens, 2), "mooncake": read_mooncake(moon, 4),
            "pattern": patterns.long_doc_qa(2, 40, 1, "tile").workload(16),
            "documents": DocumentWorkload(2, 40, ("fwd", "rev")).workload(16)}


@pytest.mark.parametrize("name", ["tokens", "mooncake", "pattern", "documents"])
def test_every_source_gives_the_one_workload_type(tmp_path, name):
    workload = sources(tmp_path)[name]
    assert type(workload) is Workload and workload.label
    assert workload.blocks.schema == BLOCK_SCHEMA
    assert workload.requests.schema == REQUEST_SCHEMA
    check_blocks(workload.blocks)
    stream = workload.block_stream()
    assert stream.prompt_tokens.tolist() == workload.requests["prompt_tokens"].to_list()
    keys, sizes = workload.items()
    assert keys.view(np.uint64).tolist() == workload.blocks["block_key"].to_list()
    assert sizes.tolist() == workload.blocks["block_tokens"].to_list()
    assert workload.items(unit=True)[1].tolist() == [1] * workload.blocks.height


@given(docs=st.integers(0, 5), tokens=st.integers(1, 70),
       passes=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=3),
       block_size=st.integers(1, 33))
def test_documents_in_blocks_are_each_read_cut_into_numbered_blocks(docs, tokens, passes,
                                                                    block_size):
    workload = DocumentWorkload(docs, tokens, tuple(passes)).workload(block_size)
    reads = [(f"pass{i + 1}-{p}", d) for i, p in enumerate(passes)
             for d in (range(docs) if p == "fwd" else range(docs - 1, -1, -1))]
    n = -(-tokens // block_size)
    assert workload.requests.rows() == [(r, name, d, tokens, None)
                                        for r, (name, d) in enumerate(reads)]
    assert workload.blocks.rows() == [(r, i, d * n + i, min(block_size, tokens - i * block_size))
                                      for r, (_, d) in enumerate(reads) for i in range(n)]


def test_documents_whole_are_one_item_per_read_keyed_by_document():
    workload = DocumentWorkload(3, 50, ("fwd", "rev")).workload(None)
    assert workload.block_size is None
    assert workload.blocks.rows() == [(r, 0, d, 50) for r, d in enumerate([0, 1, 2, 2, 1, 0])]
    accesses = DocumentWorkload(3, 50, ("fwd", "rev")).accesses()
    assert workload.blocks["block_key"].to_list() == accesses["doc"].to_list()
    assert accesses.rows() == [(0, "fwd", 0, 0, 0, 50), (0, "fwd", 1, 1, 1, 50),
                               (0, "fwd", 2, 2, 2, 50), (1, "rev", 0, 3, 2, 50),
                               (1, "rev", 1, 4, 1, 50), (1, "rev", 2, 5, 0, 50)]
    assert DocumentWorkload(0, 50, ("fwd",)).accesses().height == 0


def test_whole_items_have_no_block_stream_and_read_as_one_access_per_request():
    workload = DocumentWorkload(3, 50, ("fwd", "rev")).workload(None)
    keys, sizes = workload.items()
    assert keys.tolist() == [0, 1, 2, 2, 1, 0] and sizes.tolist() == [50] * 6
    with pytest.raises(ValueError, match="no block stream"):
        workload.block_stream()
