"""Workload patterns: LMCache long_doc_qa orders, multi-tenant and Zipf, in both modes."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import ModelLRU
from hypothesis import given
from hypothesis import strategies as st

from pipeline.onepass.lru_depths import block_lru_gpu
from pipeline.workloads.stream import HEAD_FIRST, TAIL_FIRST, block_stream
from pipeline.onepass.stack_distance import lru_hit_counts
from pipeline.workloads.blocks import REQUEST_SCHEMA, check_blocks
from pipeline.workloads.patterns import (Pattern, long_doc_qa, multi_tenant, repeat_order,
                                         zipf_documents)


def lmcache_repeat_prompts(prompts, repeat_count, mode, seed):
    """LMCache benchmarks/long_doc_qa/long_doc_qa.py repeat_prompts, as its main seeds it."""
    random.seed(seed)
    if mode == "random":
        repeated = prompts * repeat_count
        random.shuffle(repeated)
        return repeated
    if mode == "tile":
        return prompts * repeat_count
    return [p for p in prompts for _ in range(repeat_count)]


@given(n=st.integers(1, 9), repeat=st.integers(0, 4),
       mode=st.sampled_from(["random", "tile", "interleave"]), seed=st.integers(0, 5))
def test_repeat_order_is_lmcache_long_doc_qa(n, repeat, mode, seed):
    prompts = [f"{i} hi hi" for i in range(n)]
    expected = lmcache_repeat_prompts(prompts, repeat, mode, seed)
    assert [prompts[i] for i in repeat_order(n, repeat, mode, seed)] == expected


def test_long_doc_qa_sends_a_warmup_round_then_the_query_round():
    pattern = long_doc_qa(3, 100, 2, "interleave")
    assert pattern.docs.tolist() == [0, 1, 2, 0, 0, 1, 1, 2, 2]
    requests = pattern.requests()
    assert requests.schema == REQUEST_SCHEMA
    assert requests["pass_name"].to_list() == ["warmup"] * 3 + ["query"] * 6
    with pytest.raises(ValueError, match="unknown repeat mode"):
        repeat_order(3, 2, "shuffle")


def document_hits(pattern, capacity):
    keys, sizes = pattern.documents()
    return int(lru_hit_counts(keys, sizes, [capacity])[0])


@pytest.mark.parametrize("n", [2, 5, 10])
def test_tile_with_room_for_one_document_less_is_the_cyclic_cliff(n):
    pattern = long_doc_qa(n, 5011, repeat_count=3, repeat_mode="tile")
    assert document_hits(pattern, (n - 1) * 5011) == 0
    assert document_hits(pattern, n * 5011 - 1) == 0
    assert document_hits(pattern, n * 5011) == 3 * n     # every query read hits
    # block mode, LMCache's head-first: the cliff survives; vLLM's tail-first keeps heads
    stream = block_stream(pattern.blocks(16), 16)
    room = (n - 1) * (5011 // 16 + 1) * 16
    assert block_lru_gpu(stream, [room], HEAD_FIRST).sum() == 0
    assert block_lru_gpu(stream, [room], TAIL_FIRST).sum() > 0


def test_interleave_hits_every_repeat_with_room_for_one_document():
    pattern = long_doc_qa(4, 1000, repeat_count=3, repeat_mode="interleave")
    assert document_hits(pattern, 1000) == 4 * 2


@given(n=st.integers(1, 6), repeat=st.integers(1, 3), capacity_docs=st.integers(0, 7),
       seed=st.integers(0, 3))
def test_document_mode_equals_a_literal_lru(n, repeat, capacity_docs, seed):
    pattern = long_doc_qa(n, 7, repeat, "random", seed)
    cache = ModelLRU(capacity_docs * 7)
    expected = sum(cache.access(doc, 7) for doc in pattern.docs.tolist())
    assert document_hits(pattern, capacity_docs * 7) == expected


def literal_prefixes(pattern: Pattern, block_size: int):
    """Each block's prefix, spelled out token by token, and its token count."""
    out = []
    for request, doc in enumerate(pattern.docs.tolist()):
        prompt = ([("system", j) for j in range(pattern.system_prompt_length)]
                  + [("doc", doc, j) for j in range(pattern.document_length)]
                  + [("question", request, j) for j in range(pattern.question_length)])
        for start in range(0, len(prompt), block_size):
            end = min(start + block_size, len(prompt))
            out.append((tuple(prompt[:end]), end - start))
    return out


@given(system=st.integers(0, 9), document=st.integers(0, 9), question=st.integers(0, 5),
       block_size=st.integers(1, 6), docs=st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_block_keys_are_equal_exactly_when_prefixes_are(system, document, question,
                                                        block_size, docs):
    if system + document + question == 0:
        document = 1
    pattern = Pattern("p", np.array(docs), (None,) * len(docs), document, system, question)
    blocks = check_blocks(pattern.blocks(block_size))
    literal = literal_prefixes(pattern, block_size)
    assert blocks["block_tokens"].to_list() == [tokens for _, tokens in literal]
    keys = blocks["block_key"].to_list()
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert (keys[a] == keys[b]) == (literal[a][0] == literal[b][0])


def test_multi_tenant_users_read_their_own_documents_in_order_after_a_shared_prompt():
    pattern = multi_tenant(num_users=3, documents_per_user=2, document_length=64,
                           system_prompt_length=40, repeat_count=2, seed=1)
    docs = pattern.docs
    assert sorted(docs.tolist()) == sorted(list(range(6)) * 2)
    for user in range(3):
        own = docs[(docs // 2) == user].tolist()
        assert own == [2 * user, 2 * user + 1] * 2
    blocks = pattern.blocks(16)
    first = blocks.filter(block_index=0)["block_key"]
    assert first.n_unique() == 1                   # 40-token system prompt: 2 shared blocks
    assert blocks.filter(block_index=2)["block_key"].n_unique() == 6   # ends in a document
    assert pattern.documents()[1].tolist() == [104] * 12


def test_zipf_is_seeded_and_popular_documents_come_first():
    a = zipf_documents(50, 32, 5000, alpha=1.2, seed=7)
    b = zipf_documents(50, 32, 5000, alpha=1.2, seed=7)
    assert np.array_equal(a.docs, b.docs)
    counts = np.bincount(a.docs, minlength=50)
    assert counts[0] > counts[1] > counts[10] and a.docs.max() < 50
    with_questions = zipf_documents(5, 32, 10, question_length=20)
    blocks = with_questions.blocks(16)
    assert blocks.filter(block_index=3)["block_key"].n_unique() == 10   # unique question
