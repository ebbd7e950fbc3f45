"""Each fleet router's decisions equal a literal reference written from the project's code
(tests/fleet_reference.py) on small random cases, ties included; registry and options."""

import random
from dataclasses import dataclass, field

import pytest

from fleet_reference import (DynamoKv, LlmdEstimate, LlmdPrecise, SGLangCacheAware,
                             round_robin, session_instance, vllm_dp)
from pipeline.fleet.routers import ROUTERS, make_router, parse_router_options
from pipeline.fleet.routers.base import RouteRequest
from pipeline.fleet.routers.prefix_approx import BlockTree, LazyTree


@dataclass
class StaticView:
    """A view over plain lists (tests, references): ``cached`` = per instance the set of
    block hashes it holds; prefix hits are the leading run of ``hashes`` in that set."""

    num_instances: int
    block_size: int = 16
    outstanding: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    usage: list[float] = field(default_factory=list)
    cached: list[set] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = self.num_instances
        self.outstanding = self.outstanding or [0] * n
        self.waiting = self.waiting or [0] * n
        self.running = self.running or [0] * n
        self.usage = self.usage or [0.0] * n
        self.cached = self.cached or [set() for _ in range(n)]
        self.blocks = self.blocks or [0] * n

    def routed_outstanding(self, instance: int) -> int:
        return self.outstanding[instance]

    def num_waiting(self, instance: int) -> int:
        return self.waiting[instance]

    def num_running(self, instance: int) -> int:
        return self.running[instance]

    def kv_usage(self, instance: int) -> float:
        return self.usage[instance]

    def cached_blocks(self, instance: int, hashes) -> int:
        count = 0
        for block in hashes:
            if block not in self.cached[instance]:
                break
            count += 1
        return count

    def cached_block_count(self, instance: int) -> int:
        return len(self.cached[instance])

    def gpu_blocks(self, instance: int) -> int:
        return self.blocks[instance]


def chain(units):
    """A chained block key: equal keys iff equal prefixes."""
    return sum(unit * 7919 ** k for k, unit in enumerate(units)) * 10 + len(units)


def chains(units):
    """``[chain(units[:1]), chain(units[:2]), ...]`` with one running sum (linear, not
    quadratic, in the prompt's length)."""
    keys, total, power = [], 0, 1
    for k, unit in enumerate(units):
        total += unit * power
        power *= 7919
        keys.append(total * 10 + k + 1)
    return keys



def test_chains_are_the_chain_of_each_prefix():
    rng = random.Random(0)
    units = [rng.randrange(10**6) for _ in range(50)]
    assert chains(units) == [chain(units[:j + 1]) for j in range(len(units))]

def prompts(rng, count):
    """Requests over a few documents behind optional shared system blocks: many ties."""
    out = []
    for index in range(count):
        system = [1000 + j for j in range(rng.choice([0, 0, 2]))]
        doc = rng.randrange(4)
        body = [100 * (doc + 1) + j for j in range(rng.randrange(0, 6))]
        units = system + body                      # chained keys, as the engine's:
        hashes = chains(units)
        tokens = len(hashes) * 16 + rng.randrange(0, 16)
        out.append(RouteRequest(index, hashes, max(tokens, 1), float(index * 7),
                                session=rng.choice([None, f"s{rng.randrange(3)}"])))
    return out


def random_view(rng, n, cached_pool):
    view = StaticView(n, 16)
    view.outstanding = [rng.randrange(0, 4) for _ in range(n)]
    view.waiting = [rng.randrange(0, 3) for _ in range(n)]
    view.running = [rng.randrange(0, 3) for _ in range(n)]
    view.usage = [rng.choice([0.0, 0.25, 0.5]) for _ in range(n)]
    view.cached = [set(rng.sample(cached_pool, rng.randrange(len(cached_pool) + 1)))
                   for _ in range(n)]
    return view


CACHED = ([chain([100 * d + j for j in range(k)]) for d in range(1, 5) for k in range(1, 6)]
          + [chain([1000, 1001][:k] + [100 * d + j for j in range(m)])
             for d in range(1, 5) for k in (1, 2) for m in range(0, 6 if k == 2 else 1)])


@pytest.mark.parametrize("seed", range(40))
def test_prefix_approx_equals_sglang_radix_tree(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    thresholds = dict(cache_threshold=rng.choice([0.0, 0.3, 0.5]),
                      balance_abs_threshold=rng.choice([0, 1, 64]),
                      balance_rel_threshold=rng.choice([1.0, 1.5]))
    fast = make_router("prefix-approx", n, 16, eviction_interval_secs=0.0, **thresholds)
    slow = SGLangCacheAware(n, **thresholds)
    outstanding = [0] * n
    for request in prompts(rng, 30):
        view = StaticView(n, 16, outstanding=list(outstanding))
        choice, _ = fast.route(request, view)
        assert choice == slow.route(request, view)
        outstanding[choice] += 1
        if rng.random() < 0.4:                          # a random request finishes
            busy = [i for i in range(n) if outstanding[i]]
            outstanding[rng.choice(busy)] -= 1
    assert fast.tree.size == [slow.tree.tenant_char_count[i] for i in range(n)]


def test_prefix_approx_follows_the_longest_match_and_balances():
    router = make_router("prefix-approx", 2, 16, cache_threshold=0.5)
    doc = RouteRequest(0, [1, 2, 3, 4], 64, 0.0)
    first, decision = router.route(doc, StaticView(2))
    assert decision == "smallest-tree"
    other = RouteRequest(1, [9, 8], 32, 1.0)
    assert router.route(other, StaticView(2))[0] == 1 - first     # the emptier tree
    again = RouteRequest(2, [1, 2, 3, 5], 64, 2.0)                # 3/4 matched > 0.5
    assert router.route(again, StaticView(2)) == (first, "cache-hit")
    loads = [100, 0] if first == 0 else [0, 100]
    assert router.route(again, StaticView(2, outstanding=loads)) == (1 - first, "balance")


def test_block_tree_eviction_keeps_each_tenant_under_the_limit():
    tree = BlockTree(2)
    tree.insert([1, 2, 3, 4], 0, now=1.0)
    tree.insert([1, 2, 7], 0, now=2.0)
    tree.insert([5, 6], 1, now=3.0)
    tree.evict(3)
    assert tree.size == [3, 2]
    assert tree.prefix_match([1, 2, 7], now=4.0) == (3, 0)    # the newer branch stayed
    assert tree.prefix_match([1, 2, 3, 4], now=4.0)[0] == 2


@pytest.mark.parametrize("seed", range(40))
def test_lazy_tree_answers_as_the_block_tree_through_evictions(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 4)
    lazy, exact = LazyTree(n), BlockTree(n)
    for step, request in enumerate(prompts(rng, 40)):
        now = float(step)
        if rng.random() < 0.5:
            assert lazy.prefix_match(request.hashes, now) == \
                exact.prefix_match(request.hashes, now)
        tenant = rng.randrange(n)
        lazy.insert(request.hashes, tenant, now)
        exact.insert(request.hashes, tenant, now)
        if rng.random() < 0.15:
            limit = rng.choice([2, 5, 10, 1000])
            lazy.evict(limit)
            exact.evict(limit)
        assert lazy.size == exact.size
        assert lazy.smallest_tenant() == exact.smallest_tenant()


@pytest.mark.parametrize("seed", range(30))
def test_prefix_precise_equals_llmd_scorers_and_picker(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    weights = dict(prefix_weight=rng.choice([2.0, 0.0]), queue_weight=rng.choice([1.0, 3.0]))
    fast = make_router("prefix-precise", n, 16, seed=seed, **weights)
    slow = LlmdPrecise(n, seed, **weights)
    for request in prompts(rng, 20):
        view = random_view(rng, n, CACHED)
        assert fast.route(request, view)[0] == slow.route(request, view)


@pytest.mark.parametrize("seed", range(30))
def test_prefix_estimate_equals_llmd_approximate_indexer_and_scorers(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    options = dict(auto_tune=rng.random() < 0.5, lru_capacity=rng.choice([3, 8, 31250]),
                   queue_threshold=rng.choice([2.0, 128.0]))
    fast = make_router("prefix-estimate", n, 16, seed=seed, **options)
    slow = LlmdEstimate(n, seed, **options)
    decisions = set()
    for request in prompts(rng, 30):
        view = random_view(rng, n, CACHED)
        view.blocks = [rng.choice([4, 6, 50]) for _ in range(n)]
        choice, decision = fast.route(request, view)
        assert choice == slow.route(request, view)
        decisions.add(decision)
    assert {i: list(lru) for i, lru in enumerate(fast.index.lru) if lru is not None} == {
        pod: entry[1] for pod, entry in slow.pod_to_lru.items()}           # order too
    assert fast.index.holders == slow.hash_to_pods


@pytest.mark.parametrize("seed", range(20))
def test_routed_index_match_equals_the_literal_walk_on_long_prompts(seed):
    from pipeline.fleet.routers.prefix_estimate import RoutedIndex
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    index = RoutedIndex(n)
    docs = [[rng.randrange(10**6) for _ in range(400)] for _ in range(3)]
    for _ in range(25):
        doc = rng.choice(docs)
        units = doc[:rng.randrange(1, 400)] + [rng.randrange(10**6)] * rng.randrange(3)
        hashes = chains(units)
        holders, expected = index.holders, {}
        for block in hashes:                       # llm-d's matchLongestPrefix, literally
            if not holders.get(block):
                break
            for instance in holders[block]:
                expected[instance] = expected.get(instance, 0) + 1
        assert index.match(hashes) == expected
        index.add(hashes, rng.randrange(n), rng.choice([50, 300, 1000]))


@pytest.mark.parametrize("seed", range(30))
def test_kv_cost_equals_dynamo_selector(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 5)
    options = dict(overlap_weight=rng.choice([1.0, 0.0, 2.5]),
                   temperature=rng.choice([0.0, 0.0, 0.5]))
    fast = make_router("kv-cost", n, 16, seed=seed, **options)
    slow = DynamoKv(n, 16, seed, **options)
    live = []
    for request in prompts(rng, 25):
        view = random_view(rng, n, CACHED)
        choice, _ = fast.route(request, view)
        assert choice == slow.route(request, view)
        live.append((choice, request))
        if live and rng.random() < 0.5:                  # first token, then finish
            instance, done = live[rng.randrange(len(live))]
            fast.on_first_token(instance, done)
            slow.mark_prefill_completed(instance, done.index)
            if rng.random() < 0.5:
                live.remove((instance, done))
                fast.on_finish(instance, done)
                slow.free(instance, done.index)
        assert [a.active_tokens for a in fast.active] == slow.active_tokens
        assert [a.unique for a in fast.active] == slow.unique_blocks


def test_kv_cost_prefers_the_cached_instance_and_then_the_idle_one():
    router = make_router("kv-cost", 2, 16)
    view = StaticView(2, 16, cached=[set(), {1, 2, 3}])
    request = RouteRequest(0, [1, 2, 3], 48, 0.0)
    assert router.route(request, view) == (1, "cache-hit")
    # instance 1 now has 48 - 48 = 0 prefill tokens but 3 active blocks; a new prompt
    # with no overlap costs 3 + 3 on instance 0 and 3 + 6 on instance 1
    assert router.route(RouteRequest(1, [7, 8, 9], 48, 1.0), view)[0] == 0


@pytest.mark.parametrize("seed", range(10))
def test_simple_routers_equal_their_references(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 6)
    rr = make_router("round-robin", n, 16)
    dp = make_router("least-loaded", n, 16, metric="vllm-dp")
    ll = make_router("least-loaded", n, 16)
    session = make_router("session", n, 16, key="blocks:1")   # session id, else first block
    for k, request in enumerate(prompts(rng, 20)):
        view = random_view(rng, n, CACHED)
        assert rr.route(request, view)[0] == round_robin(k, n)
        assert dp.route(request, view)[0] == vllm_dp(view.waiting, view.running)
        assert ll.route(request, view)[0] == view.outstanding.index(min(view.outstanding))
        key = (f"session:{request.session}" if request.session is not None else
               f"block:{request.hashes[0]!r}" if request.hashes else f"request:{k}")
        assert session.route(request, view)[0] == session_instance(key, n)


def test_random_router_is_seeded_and_uniform():
    draws = [make_router("random", 4, 16, seed=3).route(RouteRequest(0, [], 1, 0.0),
                                                         StaticView(4))[0] for _ in range(3)]
    assert len(set(draws)) == 1
    router = make_router("random", 4, 16, seed=3)
    counts = [0] * 4
    for k in range(4000):
        counts[router.route(RouteRequest(k, [], 1, 0.0), StaticView(4))[0]] += 1
    assert min(counts) > 900


def test_registry_and_options():
    assert set(ROUTERS) == {"round-robin", "random", "least-loaded", "session",
                            "prefix-approx", "prefix-estimate", "prefix-precise", "kv-cost"}
    assert make_router("prefix-approx", 2, 16).options["cache_threshold"] == 0.3
    assert parse_router_options(["kv-cost.temperature=0.5"], ["kv-cost", "random"]) == {
        "kv-cost": {"temperature": 0.5}, "random": {}}
    with pytest.raises(ValueError, match="not among --router round-robin"):
        parse_router_options(["kv-cost.temperature=0.5"], ["round-robin"])
    with pytest.raises(ValueError, match="has no option 'nope'"):
        parse_router_options(["kv-cost.nope=1"], ["kv-cost"])
    with pytest.raises(ValueError, match="unknown router 'bogus'"):
        parse_router_options(["bogus.x=1"], ["kv-cost"])
    with pytest.raises(ValueError, match="bad value"):
        parse_router_options(["kv-cost.temperature=hot"], ["kv-cost"])
    with pytest.raises(ValueError, match="at least 1 instance"):
        make_router("random", 0, 16)


def test_prefix_approx_oracle_reads_actual_contents():
    router = make_router("prefix-approx", 3, 16, oracle=True)
    view = StaticView(3, 16, cached=[{1}, {1, 2, 3}, set()])
    assert router.route(RouteRequest(0, [1, 2, 3, 4], 64, 0.0), view) == (1, "cache-hit")
    # rate 1/4 <= 0.3: the instance holding the fewest blocks
    assert router.route(RouteRequest(1, [1, 9, 8, 7], 64, 1.0), view) == (2, "smallest-tree")


def test_vllm_dp_counts_its_own_picks_between_stale_refreshes():
    router = make_router("least-loaded", 3, 16, metric="vllm-dp")
    view = StaticView(3, 16)
    view.stale, view.epoch = True, 1                  # the same snapshot for every pick
    picks = [router.route(RouteRequest(k, [], 1, 0.0), view)[0] for k in range(4)]
    assert picks == [0, 1, 2, 0]
    view.epoch = 2                                    # fresh counts: increments dropped
    assert router.route(RouteRequest(4, [], 1, 0.0), view)[0] == 0
