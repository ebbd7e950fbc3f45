"""A larger sweep of tests/test_sglang_loop_unmodified.py: ``--engine sglang`` against SGLang
0.5.23's own scheduler loop run unmodified (scripts/sglang_scheduler_unmodified.py, in a
spawned process), per step and per request, on N drawn workloads per loop (the non-overlap
loop against the compiled engine, the overlap loop against the Python model and the compiled
overlap engine's batches and requests), SGLang's intake on (its ``init_req_max_new_tokens``
clip against the engine's: the drawn outputs unclipped, the requests it aborts dropped);
prints counts of what was compared. Stops, printing the workload, at the first difference.

    .venv/bin/python scripts/sglang_loop_sweep.py 1000
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]

import test_sglang_loop_unmodified as t  # noqa: E402


def sweep(examples: int, seed: int = 0) -> dict:
    """The tests' comparison (tests/test_sglang_loop_unmodified.py) on ``examples`` drawn
    workloads per loop (non-overlap against the compiled engine, overlap against the Python
    model), SGLang in a spawned process; counts of what was compared. Raises, printing the
    workload, at the first difference."""
    counts: collections.Counter = collections.Counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        for overlap in (False, True):
            mine_of = t.overlap_model if overlap else t.ours

            @hypothesis_seed(seed)
            @settings(max_examples=examples, deadline=None, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(t.DRAWN, t.TREES)
            def compare(workload, tree):
                requests, size, options = workload
                queued = t.sglang_intake(workload)          # as SGLang's intake cuts them
                mine = t.outcome(mine_of, *(queued if overlap else workload))
                settings_ = {**options, "overlap": overlap, "tree": tree}
                reference = t.theirs(pool, requests, size, settings_)
                try:
                    t.check(mine, reference)
                    if overlap:                  # the compiled overlap engine too
                        engine = t.outcome(t.compiled, *workload)
                        t.check({**engine, "steps": [s[:2] for s in engine.get("steps", [])]},
                                {**reference,
                                 "steps": [s[:2] for s in reference.get("steps", [])]})
                except AssertionError:
                    print("differs:", workload, tree, file=sys.stderr)
                    raise
                loop = "overlap" if overlap else "normal"
                counts[f"{loop}: compared"] += 1
                if "error" in reference:
                    counts[f"{loop}: both refused ({reference['error']})"] += 1
                    return
                counts[f"{loop}: equal"] += 1
                counts[f"{loop}: with a clipped request"] += queued[0] != requests
                counts[f"{loop}: with retraction"] += any(r[4] for r in reference["requests"])
                counts[f"{loop}: with a prefix hit"] += any(r[3] for r in reference["requests"])
                counts[f"{loop}: policy {options['policy']}"] += 1
                counts[f"{loop}: tree {tree}"] += 1
                counts[f"{loop}: page {options['page']}"] += 1
                counts[f"{loop}: chunked"] += options["chunk"] is not None
            compare()
    return dict(sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=int, help="workloads drawn per loop")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    args = parser.parse_args()
    if args.examples < 1:
        parser.error("examples: must be at least 1")
    for key, value in sweep(args.examples, args.seed).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
