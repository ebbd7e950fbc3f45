"""Literal, slow references of the fleet's routers, transliterated from the projects' code
(see each router module's docstring for file and commit), to test the fast routers against.

Each reference takes the same (request, view) and draws from the same generator in the same
order, so decisions must be equal one for one, ties included.
"""

from __future__ import annotations

import hashlib
import math

from pipeline.fleet.routers.base import rng_for


# ---------------------------------------------------------------- SGLang tree.rs, literally
class _RNode:
    def __init__(self, text, parent):
        self.children = {}                 # first unit -> node
        self.text = tuple(text)
        self.tenant_last_access_time = {}
        self.parent = parent


def _shared_prefix_count(a, b):
    i = 0
    for x, y in zip(a, b):
        if x != y:
            break
        i += 1
    return i


class SGLangTree:
    """sgl-router/src/policies/tree.rs ``Tree`` (insert, prefix_match, get_smallest_tenant)
    with node splitting, on sequences of units instead of characters."""

    def __init__(self):
        self.root = _RNode((), None)
        self.tenant_char_count = {}

    def insert(self, text, tenant, now):
        text = tuple(text)
        curr = self.root
        curr_idx = 0
        curr.tenant_last_access_time[tenant] = now
        self.tenant_char_count.setdefault(tenant, 0)
        prev = self.root
        while curr_idx < len(text):
            first = text[curr_idx]
            curr = prev
            if first not in curr.children:
                new_node = _RNode(text[curr_idx:], curr)
                self.tenant_char_count[tenant] += len(new_node.text)
                new_node.tenant_last_access_time[tenant] = now
                curr.children[first] = new_node
                prev = new_node
                curr_idx = len(text)
            else:
                matched = curr.children[first]
                rest = text[curr_idx:]
                shared = _shared_prefix_count(matched.text, rest)
                if shared < len(matched.text):
                    new_node = _RNode(matched.text[:shared], curr)
                    new_node.tenant_last_access_time = dict(matched.tenant_last_access_time)
                    contracted = matched.text[shared:]
                    new_node.children[contracted[0]] = matched
                    curr.children[first] = new_node
                    matched.text = contracted
                    matched.parent = new_node
                    prev = new_node
                    if tenant not in prev.tenant_last_access_time:
                        self.tenant_char_count[tenant] += shared
                    prev.tenant_last_access_time[tenant] = now
                    curr_idx += shared
                else:
                    prev = matched
                    if tenant not in prev.tenant_last_access_time:
                        self.tenant_char_count[tenant] += len(matched.text)
                    prev.tenant_last_access_time[tenant] = now
                    curr_idx += shared

    def prefix_match(self, text, now):
        """(matched length, "first" tenant of the node reached: here the lowest, or None)."""
        text = tuple(text)
        curr_idx = 0
        prev = self.root
        while curr_idx < len(text):
            first = text[curr_idx]
            curr = prev
            if first in curr.children:
                matched = curr.children[first]
                shared = _shared_prefix_count(matched.text, text[curr_idx:])
                curr_idx += shared
                prev = matched
                if shared != len(matched.text):
                    break
            else:
                break
        curr = prev
        tenant = min(curr.tenant_last_access_time) if curr.tenant_last_access_time else None
        if tenant is not None:
            node = curr
            while node is not None:
                if tenant in node.tenant_last_access_time:
                    node.tenant_last_access_time[tenant] = now
                node = node.parent
        return curr_idx, tenant

    def get_smallest_tenant(self):
        best, best_count = None, None
        for tenant in sorted(self.tenant_char_count):
            if best_count is None or self.tenant_char_count[tenant] < best_count:
                best, best_count = tenant, self.tenant_char_count[tenant]
        return best


class SGLangCacheAware:
    """cache_aware.rs ``select_worker``; ``init_workers`` inserts "" for every worker."""

    def __init__(self, n, cache_threshold=0.3, balance_abs_threshold=64,
                 balance_rel_threshold=1.5):
        self.n = n
        self.cache_threshold = cache_threshold
        self.abs = balance_abs_threshold
        self.rel = balance_rel_threshold
        self.tree = SGLangTree()
        for worker in range(n):
            self.tree.insert((), worker, 0.0)

    def route(self, request, view):
        loads = [view.routed_outstanding(i) for i in range(self.n)]
        max_load, min_load = max(loads), min(loads)
        if max(max_load - min_load, 0) > self.abs and max_load > min_load * self.rel:
            idx = min(range(self.n), key=lambda i: loads[i])
            self.tree.insert(request.hashes, idx, request.arrival_ms)
            return idx
        text = tuple(request.hashes)
        matched, worker = self.tree.prefix_match(text, request.arrival_ms)
        rate = 0.0 if not text else matched / len(text)
        selected = worker if rate > self.cache_threshold else self.tree.get_smallest_tenant()
        if selected is None:
            return 0
        self.tree.insert(text, selected, request.arrival_ms)
        return selected


# ---------------------------------------------------------------- llm-d scorers + picker
class LlmdPrecise:
    """precise prefix-cache + kv-cache-utilization + queue scorers, max-score picker."""

    def __init__(self, n, seed, prefix_weight=2.0, kv_utilization_weight=1.0,
                 queue_weight=1.0):
        self.n = n
        self.weights = (prefix_weight, kv_utilization_weight, queue_weight)
        self.rng = rng_for(seed, "prefix-precise")

    def route(self, request, view):
        endpoints = list(range(self.n))
        total_blocks = len(request.hashes)
        prefix = {}
        for e in endpoints:                              # absoluteScoredPods
            raw = view.cached_blocks(e, request.hashes)
            prefix[e] = 0.0 if total_blocks <= 0 or raw <= 0 else min(raw / total_blocks, 1.0)
        kv = {e: 1 - view.kv_usage(e) for e in endpoints}
        min_q, max_q = math.inf, -math.inf
        for e in endpoints:
            q = view.num_waiting(e)
            min_q, max_q = min(min_q, q), max(max_q, q)
        queue = {e: 1.0 if max_q == min_q else (max_q - view.num_waiting(e)) / (max_q - min_q)
                 for e in endpoints}
        weighted = {e: 0.0 for e in endpoints}
        for weight, scores in zip(self.weights, (prefix, kv, queue)):
            for e in endpoints:
                weighted[e] += scores[e] * weight
        scored = [(e, weighted[e]) for e in endpoints]
        scored = [scored[i] for i in self.rng.permutation(self.n)]        # shuffle
        scored.sort(key=lambda item: -item[1])                              # stable
        return scored[0][0]


class LlmdEstimate:
    """approximateprefix indexer (hashicorp LRU per pod) + prefix and load-aware scorers,
    max-score picker."""

    def __init__(self, n, seed, prefix_weight=1.0, load_weight=1.0, queue_threshold=128.0,
                 auto_tune=True, lru_capacity=31250):
        self.n = n
        self.weights = (prefix_weight, load_weight)
        self.threshold = queue_threshold
        self.auto_tune, self.default_size = auto_tune, lru_capacity
        self.pod_to_lru = {}                    # pod -> [size, list of hashes, oldest first]
        self.hash_to_pods = {}
        self.rng = rng_for(seed, "prefix-estimate")

    def add(self, hashes, pod, num_gpu_blocks):
        if pod not in self.pod_to_lru:
            size = num_gpu_blocks if num_gpu_blocks > 0 else self.default_size
            self.pod_to_lru[pod] = [size, []]
        size, lru = self.pod_to_lru[pod]
        for h in hashes:
            if h in lru:
                lru.remove(h)
                lru.append(h)
                continue
            lru.append(h)
            if len(lru) > size:
                oldest = lru.pop(0)
                pods = self.hash_to_pods.get(oldest)
                if pods is not None:
                    pods.discard(pod)
                    if len(pods) == 0:
                        del self.hash_to_pods[oldest]
        for h in hashes:
            self.hash_to_pods.setdefault(h, set()).add(pod)

    def route(self, request, view):
        res = {}
        for h in request.hashes:                         # matchLongestPrefix
            cached = self.hash_to_pods.get(h)
            if not cached:
                break
            for server in cached:
                res[server] = res.get(server, 0) + 1
        total = len(request.hashes)
        prefix = {e: (res.get(e, 0) / total if total != 0 else 0.0) for e in range(self.n)}
        load = {}
        for e in range(self.n):
            waiting = float(view.num_waiting(e))
            if waiting == 0:
                load[e] = 0.5
            else:
                load[e] = 0.5 * (1.0 - min(waiting, self.threshold) / self.threshold)
        weighted = {e: prefix[e] * self.weights[0] + load[e] * self.weights[1]
                    for e in range(self.n)}
        scored = [(e, weighted[e]) for e in range(self.n)]
        scored = [scored[i] for i in self.rng.permutation(self.n)]
        scored.sort(key=lambda item: -item[1])
        chosen = scored[0][0]
        blocks = view.gpu_blocks(chosen) if self.auto_tune else 0
        self.add(request.hashes, chosen, blocks)
        return chosen


# ---------------------------------------------------------------- Dynamo selector + sequences
class DynamoKv:
    """DefaultWorkerSelector over ActiveSequences (per worker: active_seqs, unique_blocks,
    prefill_tokens, active_tokens)."""

    def __init__(self, n, block_size, seed, overlap_weight=1.0, temperature=0.0):
        self.n, self.block_size = n, block_size
        self.overlap_weight, self.temperature = overlap_weight, temperature
        self.active_seqs = [dict() for _ in range(n)]
        self.unique_blocks = [dict() for _ in range(n)]
        self.prefill_tokens = [dict() for _ in range(n)]
        self.active_tokens = [0] * n
        self.rng = rng_for(seed, "kv-cost")

    def route(self, request, view):
        isl, bs = request.prompt_tokens, self.block_size
        logits = {}
        news = {}
        for w in range(self.n):
            overlap = view.cached_blocks(w, request.hashes)
            new_tokens = max(isl - overlap * bs, 0)
            potential_tokens = new_tokens + self.active_tokens[w]
            new_blocks = len([b for b in request.hashes if b not in self.unique_blocks[w]])
            potential_blocks = new_blocks + len(self.unique_blocks[w])
            logits[w] = self.overlap_weight * (potential_tokens / bs) + potential_blocks
            news[w] = new_tokens
        if self.temperature == 0.0:
            min_logit = min(logits.values())
            candidates = [w for w, v in logits.items() if v == min_logit]
            if len(candidates) > 1:
                sizes = [(view.cached_block_count(w), w) for w in candidates]
                if all(s == sizes[0][0] for s, _ in sizes):
                    best = candidates[int(self.rng.integers(len(candidates)))]
                else:
                    best = min(sizes, key=lambda item: item[0])[1]
            else:
                best = candidates[0]
        else:
            keys, values = list(logits), list(logits.values())
            lo, hi = min(values), max(values)
            if lo == hi:
                probabilities = [1.0 / len(keys)] * len(keys)
            else:
                scaled = [-(v / (hi - lo)) / self.temperature for v in values]
                top = max(scaled)
                probs = [math.exp(v - top) for v in scaled]
                probabilities = [p / sum(probs) for p in probs]
            sample = float(self.rng.random())
            best, cumsum = keys[-1], 0.0
            for i, p in enumerate(probabilities):
                cumsum += p
                if sample <= cumsum:
                    best = keys[i]
                    break
        self.active_seqs[best][request.index] = list(request.hashes)
        for b in request.hashes:
            self.unique_blocks[best][b] = self.unique_blocks[best].get(b, 0) + 1
        self.prefill_tokens[best][request.index] = news[best]
        self.active_tokens[best] += news[best]
        return best

    def mark_prefill_completed(self, w, index):
        self.active_tokens[w] -= self.prefill_tokens[w].pop(index, 0)

    def free(self, w, index):
        self.mark_prefill_completed(w, index)
        for b in self.active_seqs[w].pop(index):
            self.unique_blocks[w][b] -= 1
            if self.unique_blocks[w][b] == 0:
                del self.unique_blocks[w][b]


# ---------------------------------------------------------------- simple ones
def round_robin(k, n):
    return k % n


def vllm_dp(waiting, running):
    """core_client.py get_core_engine_for_request with eng_start_index 0."""
    min_score, eng_index = float("inf"), 0
    for i in range(len(waiting)):
        score = waiting[i] * 4 + running[i]
        if score < min_score:
            min_score, eng_index = score, i
    return eng_index


def session_instance(key, n):
    return int(hashlib.blake2b(key.encode(), digest_size=8).hexdigest(), 16) % n
