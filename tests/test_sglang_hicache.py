"""SGLang 0.5.23's HiCache decisions, run by its own ``UnifiedRadixCache`` and tree core on
CPU (scripts/sglang_hicache_reference.py: the transfer controller and the host pool are
counters whose transfers finish at once, acks seen at the next ``check_hicache_events``; in a
process of its own, as test_sglang_unified.py). Each expectation is read off SGLang's code
(cited in docs/sglang.md). The same expectations run on the oracle ``oracles.sglang_hiradix``
(no SGLang needed); SGLang's side skips without its sources or msgspec.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_reference as ref  # noqa: E402



CASES = [(policy, host) for policy in ("write_through", "write_through_selective",
                                       "write_back") for host in (100, 10)]


@pytest.fixture(scope="module", params=["sglang", "oracle"])
def scenarios(request):
    """The scenarios on SGLang's own code (skipped without its sources) and on the oracle
    (``oracles.sglang_hiradix``, no SGLang needed): the same expectations hold for both."""
    import sglang_hicache_reference as hi
    if request.param == "oracle":
        from oracles.sglang_hiradix import HiRadixTree
        return {case: hi.scenario(*case, tree_class=HiRadixTree) for case in CASES}
    if not ref.sources_present() or importlib.util.find_spec("msgspec") is None:
        pytest.skip("SGLang sources or msgspec absent")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return {case: pool.submit(hi.scenario, *case).result() for case in CASES}


# a node's state: (on device, on host, lock_ref, hit_count)

def test_write_through_copies_at_insert_and_locks_until_the_ack(scenarios):
    seen = scenarios["write_through", 100]
    assert seen["insert"] == ((True, True, 1, 1), 20)       # written, locked in flight
    assert seen["ack"] == (True, True, 0, 1)                 # the ack unlocks it
    assert seen["second insert"] == ((True, True, 0, 2), 20)  # not written twice


def test_selective_copies_on_the_second_hit(scenarios):
    seen = scenarios["write_through_selective", 100]
    assert seen["insert"] == ((True, False, 0, 1), 0)
    assert seen["second insert"] == ((True, True, 0, 2), 20)


def test_write_back_copies_on_eviction_only(scenarios):
    seen = scenarios["write_back", 100]
    assert seen["second insert"] == ((True, False, 0, 0), 0)   # no hits counted either
    assert seen["evict"] == (20, (False, True, 0, 0), 20)


@pytest.mark.parametrize("policy", ["write_through", "write_through_selective", "write_back"])
def test_eviction_keeps_the_host_copy_and_a_match_loads_it_back(scenarios, policy):
    seen = scenarios[policy, 100]
    assert seen["evict"][:2] == (20, (False, True, 0, seen["evict"][1][3]))
    assert seen["match"] == (0, 20)                           # device 0, host 20
    assert seen["load back"] == (20, 20)
    assert seen["loaded"][:3] == (True, True, 0)              # host copy kept, unlocked
    # a host hit under load_back_threshold (10) is not loaded: recomputed
    assert seen["short"][:2] == ((0, 5), 0)


def test_a_full_host_pool_means_no_copy_and_eviction_deletes(scenarios):
    seen = scenarios["write_through", 10]
    assert seen["insert"] == ((True, False, 0, 1), 0)         # 20 tokens > 10 free
    assert seen["evict"] == (20, None, 0)                     # gone from the tree
    assert seen["match"] == (0, 0)


@pytest.mark.parametrize("write_policy, loaded", [
    (None, 0), ("write_through", 40), ("write_through_selective", 0), ("write_back", 40)])
def test_the_scheduler_loads_back_at_admission(write_policy, loaded):
    """SGLang's scheduling pieces over its HiCache (scripts/sglang_scheduler_reference.py,
    ``PrefillAdder.add_one_req``'s load back run as shipped): A, then B evicting A from a
    60-token pool, then A's 40-token stem again. Copied at insert (write_through) or at
    eviction (write_back), it comes back from the host: a hit of 40, all loaded; copied
    never (selective: one hit) or without HiCache, it is recomputed."""
    if not ref.sources_present() or importlib.util.find_spec("msgspec") is None:
        pytest.skip("SGLang sources or msgspec absent")
    import sglang_scheduler_reference as scheduler
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        out = pool.submit(scheduler.hicache_demo, write_policy).result()
    assert out["host_loaded"] == [0, 0, loaded]
    assert [r[3] for r in out["requests"]] == [0, 0, loaded]        # the hit includes it
