"""The llama.cpp prompt-cache model: examples, a literal reference, and the engine's own class."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.components.llamacpp_cache import LlamaCppPromptCache, StateSize, common_prefix
from pipeline.measure.llamacpp.compare import predict
from pipeline.measure.workload import lab_requests, prompt_token_ids

SIZE = StateSize(fixed=100, per_token=10)


class LiteralLlama:
    """llama-cpp-python 0.3.36's rules written out with lists, for clarity not speed."""

    def __init__(self, capacity, size):
        self.capacity, self.size = capacity, size
        self.live, self.restored = [], False
        self.ram = []                                   # [key, tokens, bytes], oldest first

    def request(self, prompt, completion):
        prompt, completion = list(prompt), list(completion)
        loaded = False
        if self.capacity is not None:
            best, best_len = None, 0
            for entry in self.ram:                      # first of the longest: the oldest
                if common_prefix(entry[0], prompt) > best_len:
                    best, best_len = entry, common_prefix(entry[0], prompt)
            if best is not None:
                self.ram.remove(best)
                self.ram.append(best)
                if common_prefix(best[1], prompt) > common_prefix(self.live, prompt):
                    self.live, self.restored, loaded = list(best[1]), True, True
        match = common_prefix(self.live, prompt)
        if match == len(prompt) == len(self.live) and not self.restored:
            reused = match
        elif match == len(prompt):
            reused = match - 1
        else:
            reused = match
        self.live, self.restored = prompt + completion[:-1], False
        if self.capacity is not None:
            key = prompt + completion
            self.ram = [e for e in self.ram if e[0] != key]
            self.ram.append([key, list(self.live), self.size(len(self.live))])
            while self.ram and sum(e[2] for e in self.ram) > self.capacity:
                self.ram.pop(0)
        tier = "miss" if 2 * reused < len(prompt) else ("cpu" if loaded else "gpu")
        return tier, reused


# Prompts over a tiny alphabet share prefixes often; token 0 plays the beginning of sequence.
PROMPTS = st.lists(st.integers(1, 3), min_size=0, max_size=6).map(lambda t: (0, *t))
REQUESTS = st.lists(st.tuples(PROMPTS, st.integers(1, 3)), min_size=1, max_size=25)
CAPACITY = st.none() | st.integers(0, 600)


@given(REQUESTS, CAPACITY)
def test_model_equals_the_literal_rules(requests, capacity):
    model, literal = LlamaCppPromptCache(capacity, SIZE), LiteralLlama(capacity, SIZE)
    for prompt, n in requests:
        completion = (9,) * n
        outcome = model.request(prompt, completion)
        assert (outcome.tier, outcome.reused) == literal.request(prompt, completion)
        assert outcome.evaluated == len(prompt) - outcome.reused
        assert [list(k) for k in model.ram] == [e[0] for e in literal.ram]
        assert outcome.ram_bytes == sum(e[2] for e in literal.ram)
        assert capacity is None or outcome.ram_bytes <= capacity


class _State:
    def __init__(self, size):
        self.llama_state_size = size


@settings(max_examples=80)
@given(REQUESTS, st.integers(0, 600))
def test_ram_tier_equals_the_engines_own_LlamaRAMCache(requests, capacity):
    """Same lookups and saves into llama_cpp's real class: same keys, same order."""
    llama_cache = pytest.importorskip("llama_cpp.llama_cache",
                                      reason="llama_cpp is not importable: "
                                             "run scripts/ensure_llamacpp.sh")
    real = llama_cache.LlamaRAMCache(capacity_bytes=capacity)
    model = LlamaCppPromptCache(capacity, SIZE)
    for prompt, n in requests:
        completion = (9,) * n
        try:
            real[prompt]
        except KeyError:
            pass
        model.request(prompt, completion)
        real[prompt + completion] = _State(SIZE(len(prompt) + n - 1))
        assert list(real.cache_state) == list(model.ram)
        assert real.cache_size == model.ram_bytes


def test_lab_cycle_at_four_and_a_half_documents_hits_docs_0_1_and_8():
    """Every miss refreshes the oldest entry (a 1-token match), so pass 2 is not all misses."""
    requests = lab_requests("c", 10, 50, ["fwd", "fwd", "rev"])
    state = StateSize(1000, 2060)
    one = state(len(prompt_token_ids(requests[0].prompt)) + 16 - 1)
    frame = predict(requests, {"c": int(4.5 * one)}, state, 16)
    hits = frame.filter(frame["predicted_tier"] != "miss")
    assert hits.select("pass", "doc", "predicted_tier").rows() == [
        ("pass2-replay", 0, "cpu"), ("pass2-replay", 1, "cpu"), ("pass2-replay", 8, "cpu"),
        ("pass3-reverse", 9, "gpu"), ("pass3-reverse", 8, "cpu"), ("pass3-reverse", 7, "cpu"),
        ("pass3-reverse", 6, "cpu")]
    # plain LRU: the cyclic second pass misses entirely
    lru = frame.filter(frame["lru_tier"] != "miss")
    assert lru.select("pass", "doc").rows() == [
        ("pass3-reverse", 9), ("pass3-reverse", 8), ("pass3-reverse", 7), ("pass3-reverse", 6)]


def test_no_ram_cache_leaves_only_the_live_context():
    requests = lab_requests("b", 4, 20, ["fwd", "rev"])
    frame = predict(requests, {"b": None}, SIZE, 4)
    assert frame["predicted_tier"].to_list() == ["miss"] * 4 + ["gpu"] + ["miss"] * 3


def test_corner_cases():
    model = LlamaCppPromptCache(0, SIZE)                # an entry larger than RAM evicts itself
    assert model.request((0, 1, 2), (9,)).tier == "miss" and model.ram_bytes == 0
    assert model.request((0, 1, 2), (9,)).reused == 3   # exact live prompt, decoded live
    model = LlamaCppPromptCache(10_000, SIZE)
    model.request((0, 1), (9, 9))
    model.request((0, 2), (9, 9))
    outcome = model.request((0, 3, 4), (9, 9))          # 1-token tie: the oldest is refreshed
    assert outcome.refreshed == 0 and outcome.tier == "miss"
    assert [k[1] for k in model.ram] == [2, 1, 3]
    with pytest.raises(ValueError):
        model.request((), (9,))
    with pytest.raises(ValueError):
        LlamaCppPromptCache(-1, SIZE)
