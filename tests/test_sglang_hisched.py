"""The HiCache scheduler oracle (``oracles.sglang_hisched.HiScheduler``) against SGLang
0.5.23's scheduling pieces over its own HiCache (scripts/sglang_scheduler_reference.py,
``tree="unified"`` with ``hicache``: ``PrefillAdder``'s load back, ``match_kv_cache``'s host
hits, the unified tree and its HiCache run as shipped; the transfer controller a counter whose
transfers finish at once; in a process of its own). Hypothesis draws the timed workloads of
tests/test_engine_sglang_equal.py (shared stems, bursts, pools small enough to evict and
retract, every policy, page sizes 1, 2, 4) and long stems that come back after others pushed
them out of a small pool, with a write policy and a host pool; every step's
batch, every request's outcome and the tokens each loaded from the host must be equal. Skips
without the SGLang sources or msgspec.
"""

from __future__ import annotations

import sys
from functools import partial

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import ROOT, needs_sglang_sources
from oracles.sglang_hiradix import WRITE_POLICIES
from oracles.sglang_hisched import HiScheduler
from test_engine_sglang_equal import sglang_intake, workloads
from test_sglang_ksched import oracle, outcome

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_scheduler_reference as scheduler  # noqa: E402

pytestmark = needs_sglang_sources()


def theirs(sglang, requests, pool, options, hicache) -> dict:
    return sglang.submit(scheduler.run_unified, [(p + o, len(p), len(o), a)
                                                 for p, o, a in requests], pool,
                         hicache=hicache, **options).result()


@st.composite
def returning_stems(draw):
    """Long stems that come back after others pushed them out of a small pool: what a host
    tier is for (the engine test's workloads rarely reload 10 tokens)."""
    stems = [list(range(100 * k, 100 * k + draw(st.integers(10, 30)))) for k in (1, 2, 3)]
    requests, step = [], 0
    for _ in range(draw(st.integers(2, 10))):
        prompt = stems[draw(st.integers(0, 2))] + draw(st.lists(st.integers(0, 9),
                                                                max_size=6))
        outputs = draw(st.lists(st.integers(0, 60), min_size=1, max_size=6))
        step += draw(st.sampled_from([0, 1, 5, 12]))
        requests.append((prompt, outputs, step))
    longest = max(len(p) + len(o) for p, o, _ in requests)
    options = dict(policy=draw(st.sampled_from(["fcfs", "lpm", "lof"])),
                   max_running=draw(st.integers(1, 4)),
                   chunk=draw(st.sampled_from([None, 16, 64])), max_prefill=16384,
                   conservativeness=draw(st.sampled_from([0.3, 1.0])), seed=0,
                   page=draw(st.sampled_from([1, 1, 2, 4])))
    workload = sglang_intake((requests, longest + 2 + draw(st.sampled_from([0, 8, 30])),
                              options))                  # as SGLang's intake queues them
    assume(workload[0])
    return workload


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(workloads(), returning_stems(), returning_stems()),
       write_policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_hicache_scheduler_equal_to_sglang(sglang, workload, write_policy, host):
    requests, pool, options = workload
    make = partial(HiScheduler, write_policy=write_policy, host_tokens=host)
    mine = outcome(oracle, requests, pool, options, make)
    reference = outcome(theirs, sglang, requests, pool, options, (write_policy, host))
    if "error" in mine or "error" in reference:
        assert mine.get("error") == reference.get("error")
        return
    assert mine["steps"] == reference["steps"]
    assert mine["requests"] == reference["requests"]
    assert mine["host_loaded"] == reference["host_loaded"]
