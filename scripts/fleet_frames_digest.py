"""A digest of the fleet's frames over a fixed set of configurations, to prove that a
change to the fleet's code (speed, refactoring) leaves every decision and output as it was.

Each configuration is one ``run_point`` (every router x live or stale view x sync or async
scheduling x no CPU tier, per-instance CPU tiers or one shared pool x the compiled
step-time model or a Python one) on three small workloads: the first 240 requests of the
shared Mooncake trace (public data), and the synthetic ``groups`` and ``multi-turn``
patterns. Its digest is the SHA-256 of both frames written as CSV.

    .venv/bin/python scripts/fleet_frames_digest.py --write tests/data/fleet_frames.json
    .venv/bin/python scripts/fleet_frames_digest.py --check tests/data/fleet_frames.json

Write the file with the code before a change and check it after; ``--quick`` runs the
subset the test suite checks (``tests/test_fleet_digest.py``). Rewrite the file only when a change means to alter outputs
(an engine change), saying so in its commit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.engine.config import SchedulerConfig  # noqa: E402
from pipeline.engine.cpu_tier import LMCacheTier  # noqa: E402
from pipeline.engine.request import EngineRequests, SimRequest  # noqa: E402
from pipeline.fleet.routers import ROUTERS  # noqa: E402
from pipeline.fleet.sweep_point import Point, Settings, run_point  # noqa: E402
from pipeline.steptime import Linear  # noqa: E402
from pipeline.workloads.patterns import multi_turn, tenant_groups  # noqa: E402

#: Where the shared Mooncake trace may be (KVLAB_SHARED names the shared folder); without
#: it the Mooncake slice is left out and only the patterns run.
TRACES = tuple(Path(folder) / "traces" / "synthetic_trace.jsonl" for folder in (
    *filter(None, [os.environ.get("KVLAB_SHARED")]), ROOT.parent / "shared",
    ROOT.parents[1] / "shared"))
LINEAR = Linear(dict(fixed_ms=2.0, prefill_token_ms=0.004, context_token_ms=0.0002,
                     decode_seq_ms=0.3, reload_token_ms=0.001),
                label="linear stand-in (digest coefficients)")
#: (name, staleness ms, async scheduling, CPU tier: None / "own" / "shared", Python model)
VARIANTS = (("live", 0.0, False, None, False), ("stale", 25.0, False, None, False),
            ("async", 0.0, True, None, False), ("cpu", 0.0, False, "own", False),
            ("shared", 0.0, False, "shared", False),
            ("stale-async-shared", 25.0, True, "shared", False),
            ("python-stale-cpu", 25.0, False, "own", True))
#: the session router as recorded: the session id, else the prompt's first block
SESSION_FALLBACK = {"session": {"key": "blocks:1"}}
#: what ``--quick`` (the test suite) runs: every variant of the small patterns, two of the
#: Mooncake slice
QUICK = {"mooncake": ("live", "cpu")}


class PythonModel:
    """``LINEAR`` priced from Python (not recognised as a compiled model): the fleet's
    per-batch path; ``decode_run_ms`` prices stretches of pure decode steps."""

    def step_ms(self, record) -> float:
        return LINEAR.step_ms(record)

    def decode_run_ms(self, num_running: int, context_base: int, count: int) -> np.ndarray:
        return LINEAR.decode_run_ms(num_running, context_base, count)


def shared_trace() -> Path | None:
    """The first of ``TRACES`` that exists (None: no shared data here)."""
    return next((path for path in TRACES if path.exists()), None)


def _mooncake(trace: Path) -> tuple[EngineRequests, SchedulerConfig, int]:
    from pipeline.engine.workload import read_workload
    requests = read_workload(trace, "mooncake", 16).requests[:240]
    longest = max(len(r.prompt_token_ids) + r.max_tokens for r in requests)
    blocks = 3 * (-(-longest // 16) + 1) // 2
    return (EngineRequests("mooncake first 240", tuple(requests)),
            SchedulerConfig(num_gpu_blocks=blocks, max_model_len=longest), blocks)


def _pattern(made, output_tokens: int, rate: float) -> EngineRequests:
    arrivals = made.arrivals_s
    if arrivals is None:
        gaps = np.random.default_rng(7).exponential(1.0 / rate, len(made.prompts))
        arrivals = np.cumsum(gaps) - gaps[0]
    requests = [SimRequest(i, prompt, output_tokens, arrival_s=float(arrivals[i]),
                           session=session,
                           output_token_ids=None if output is None else output.tolist())
                for i, (prompt, output, session)
                in enumerate(zip(made.prompts, made.outputs, made.sessions))]
    return EngineRequests(made.name, tuple(requests))


def workloads() -> list[tuple[str, EngineRequests, SchedulerConfig, int, int]]:
    """(name, workload, scheduler config, GPU blocks per instance, instances); the Mooncake
    slice only where the shared trace is."""
    trace = shared_trace()
    moon = [] if trace is None else [("mooncake", *_mooncake(trace), 4)]
    small = SchedulerConfig(num_gpu_blocks=300, max_model_len=4096,
                            max_num_batched_tokens=512, max_num_seqs=16)
    return [*moon,
            ("groups", _pattern(tenant_groups(6, 4, 3, 512, 64, seed=1), 24, 60.0),
             small, 300, 3),
            ("multi-turn", _pattern(multi_turn(8, 3, 256, 48, 40, think_s=0.05, rate=40.0,
                                               seed=2), 40, 0.0), small, 200, 3)]


def digest(frames) -> str:
    h = hashlib.sha256()
    for frame in frames:
        h.update(repr(frame.schema).encode())
        h.update(frame.write_csv().encode())
    return h.hexdigest()


def run_all(quick: bool = False) -> dict[str, str]:
    out = {}
    for wname, workload, config, blocks, n in workloads():
        for vname, staleness, async_, tier, python in VARIANTS:
            if quick and vname not in QUICK.get(wname, (vname,)):
                continue
            cfg = replace(config, async_scheduling=async_)
            factory = None if tier is None else partial(LMCacheTier, 8 * blocks * 16, 16, 256)
            settings = Settings(cfg, PythonModel() if python else LINEAR, seed=3,
                                staleness_ms=staleness, cpu_tier=factory,
                                cpu_shared=tier == "shared",
                                router_options=SESSION_FALLBACK)
            for router in ROUTERS:
                frames = run_point(settings, Point(router, n, blocks, 1.0), workload)
                out[f"{wname}/{vname}/{router}"] = digest(frames)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the digests to this JSON file")
    group.add_argument("--check", type=Path, help="compare with this JSON file")
    parser.add_argument("--quick", action="store_true", help="every variant of the "
                        "patterns, two of the Mooncake slice (the test suite's subset)")
    args = parser.parse_args(argv)
    if args.write and shared_trace() is None:
        parser.error(f"--write needs the shared Mooncake trace (looked in {TRACES[0]} ...)")
    got = run_all(args.quick)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{len(got)} digests -> {args.write}")
        return 0
    expected = json.loads(args.check.read_text())
    differ = sorted(key for key, value in got.items() if expected.get(key) != value)
    for key in differ:
        print(f"differs: {key}")
    print(f"{len(got) - len(differ)} of {len(got)} configurations equal")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
