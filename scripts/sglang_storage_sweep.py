"""Sweep: HiCache's L3 store (``pipeline.components.sglang_histore`` and the engine over it)
against SGLang 0.5.23's own storage path on many hypothesis-drawn cases, the suite's two
equality tests (tests/test_sglang_histore.py per tree operation,
tests/test_engine_sglang_histore.py per step and request) with far more examples, and how
many cases moved pages through storage. Needs the SGLang sources and msgspec.

    python scripts/sglang_storage_sweep.py [--tree N] [--engine N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]

from hypothesis import HealthCheck, given, settings, target  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def tree_sweep(pool, examples: int) -> dict:
    import test_sglang_histore as T
    seen = {"cases": 0, "fetched": 0}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(write=st.sampled_from(T.WRITE_POLICIES), prefetch=st.sampled_from(
               T.PREFETCH_POLICIES), threshold=st.sampled_from([1, 4, 8]),
           page=st.sampled_from([1, 1, 2, 4]), device=st.integers(16, 40),
           host=st.integers(10, 40), policy=st.sampled_from(("lru", "lru", "lfu", "fifo")),
           operations=st.lists(T.STORAGE_OPERATIONS, max_size=12))
    def run(write, prefetch, threshold, page, device, host, policy, operations):
        tree, ours, theirs = T.run_both(pool, write, prefetch, threshold, page, device, host,
                                        policy, operations)
        seen["cases"] += 1
        seen["fetched"] += tree.fetched > 0
        target(float(tree.fetched), label="tokens fetched")
        T.compare(ours, theirs)

    run()
    return seen


def engine_sweep(pool, examples: int) -> dict:
    import test_engine_sglang_histore as E
    seen = {"cases": 0, "errors": 0, "from_storage": 0}

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(workload=E.WORKLOADS, write=st.sampled_from(E.WRITE_POLICIES),
           host=st.sampled_from([24, 40, 80]),
           prefetch=st.sampled_from(E.PREFETCH_POLICIES),
           threshold=st.sampled_from([4, 8, 16]))
    def run(workload, write, host, prefetch, threshold):
        mine = E.check(pool, workload, write, host, prefetch, threshold)
        seen["cases"] += 1
        if "error" in mine:
            seen["errors"] += 1
        elif mine["frames"].requests["storage_hit_tokens"].sum() > 0:
            seen["from_storage"] += 1

    run()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=int, default=2000, help="tree-operation cases")
    parser.add_argument("--engine", type=int, default=300, help="engine run cases")
    args = parser.parse_args()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        if args.tree:
            print("tree operations equal:", tree_sweep(pool, args.tree), flush=True)
        if args.engine:
            print("engine runs equal:", engine_sweep(pool, args.engine), flush=True)


if __name__ == "__main__":
    main()
