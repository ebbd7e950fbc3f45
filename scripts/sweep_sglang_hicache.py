"""Sweep: the compiled HiCache engine against the plain-Python HiCache model
(tests/test_sglang_khisched.py's check) on many more hypothesis workloads than the test
suite runs, in the non-overlap and the overlap loop. Needs no SGLang sources.

    .venv/bin/python scripts/sweep_sglang_hicache.py --examples 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from oracles.sglang_hiradix import WRITE_POLICIES  # noqa: E402
from test_engine_sglang_equal import workloads  # noqa: E402
from test_sglang_hisched import returning_stems  # noqa: E402
from test_sglang_khisched import check  # noqa: E402
from test_sglang_overlap import tight  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="workloads per loop")
    args = parser.parse_args(argv)
    for overlap in (False, True):
        runs = [0]

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(workload=st.one_of(workloads(), returning_stems(), tight()),
               write_policy=st.sampled_from(WRITE_POLICIES),
               host=st.sampled_from([8, 40, 200, 1000]))
        def sweep(workload, write_policy, host):
            runs[0] += 1
            check(workload, write_policy, host, overlap)
        start = time.time()
        sweep()
        print(f"{'overlap' if overlap else 'non-overlap'} loop: {runs[0]} workloads equal "
              f"({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
