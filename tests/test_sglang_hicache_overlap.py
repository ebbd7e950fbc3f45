"""SGLang's overlap loop over HiCache: the plain-Python model
(``oracles.sglang_hisched.HiScheduler(..., overlap=True)``, which
tests/test_sglang_khisched.py holds the compiled engine equal to) against SGLang 0.5.23's
own pieces over its HiCache in the transcribed overlap loop
(scripts/sglang_hicache_overlap_reference.py: ``check_hicache_events`` at the top of each
turn; transfers finish at once, so an ack is taken by the next turn's poll), per step (the
batch launched, who its result gave a first token, who it finished, host tokens loaded and
written) and per request (with the host tokens its first admission loaded), on the HiCache
scheduler test's workloads and tight pools, each write policy. In a process of its own;
skips without the SGLang sources or msgspec."""

from __future__ import annotations

import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, needs_sglang_sources
from oracles.sglang_hiradix import WRITE_POLICIES
from test_sglang_hisched import returning_stems
from test_sglang_khisched import Recording
from test_sglang_ksched import outcome
from test_sglang_overlap import overlap_model, tight

sys.path.insert(0, str(ROOT / "scripts"))
import sglang_hicache_overlap_reference as reference  # noqa: E402

pytestmark = needs_sglang_sources()


def model(requests, pool, options, write_policy, host) -> dict:
    made = []

    def make(settings, overlap):
        made.append(Recording(settings, write_policy=write_policy, host_tokens=host,
                              overlap=overlap))
        return made[0]
    result = overlap_model(requests, pool, options, make)
    result["host"] = made[0].moved
    return result


def theirs(pool_, requests, pool, options, write_policy, host) -> dict:
    return pool_.submit(reference.run_overlap, [(p + o, len(p), len(o), a)
                                                for p, o, a in requests], pool,
                        hicache=(write_policy, host), **options).result()


def check(sglang, workload, write_policy, host) -> dict:   # noqa: F811
    requests, pool, options = workload
    mine = outcome(model, requests, pool, options, write_policy, host)
    ref_ = outcome(theirs, sglang, requests, pool, options, write_policy, host)
    if "error" in mine or "error" in ref_:
        assert mine.get("error") == ref_.get("error")
        return mine
    assert mine["steps"] == [tuple(s) for s in ref_["steps"]]
    assert mine["requests"] == [tuple(r) for r in ref_["requests"]]
    assert mine["host_loaded"] == ref_["host_loaded"]
    assert mine["host"] == [tuple(h) for h in ref_["host"]]
    return mine


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(workload=st.one_of(returning_stems(), returning_stems(), tight()),
       write_policy=st.sampled_from(WRITE_POLICIES), host=st.sampled_from([8, 40, 200]))
def test_hicache_overlap_equal_to_sglang(sglang, workload, write_policy, host):  # noqa: F811
    check(sglang, workload, write_policy, host)


def test_a_stem_returns_from_the_host_in_the_overlap_loop(sglang):  # noqa: F811
    """A 40-token stem pushed off a 60-token pool comes back: loaded from the host in the
    overlap loop too (write_through, write_back), recomputed under write_through_selective."""
    a, b = list(range(100, 140)), list(range(200, 240))
    requests = [(a + [1, 2, 3], [9, 9, 9], 0), (b + [4, 5, 6], [9, 9, 9], 10),
                (a + [7, 8, 9], [9, 9, 9], 20)]
    options = dict(policy="fcfs", max_running=4, chunk=None, max_prefill=16384,
                   conservativeness=1.0, seed=0, page=1)
    for write_policy in WRITE_POLICIES:
        mine = check(sglang, (requests, 60, options), write_policy, 200)
        assert mine["host_loaded"] == [0, 0, 0 if write_policy == "write_through_selective"
                                       else 40]
