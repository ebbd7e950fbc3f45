"""Generate data/ttft.jsonl: a SYNTHETIC stand-in for the lab's measured TTFT file.

The real measurement (one GPU, a 1.5B model, concurrency 1, vLLM with and without
LMCache's CPU offload, 2026-10-03) is not available to us. This generator writes a file of
the same schema whose latencies are drawn, with a fixed seed, around the published figures:

* a prefix that must be recomputed (a miss): p50 576 ms (baseline pass 2);
* a prefix reloaded from the CPU tier: p50 48.6 ms (lmcache pass 2), ~48 ms in pass 3;
* a prefix still on the GPU: ~30 ms (lmcache pass 3);
* lmcache's cold pass stores every prefix to the CPU, so its misses cost a little more
  (about +4 %) and its pass-1 ratio is below 1.

Which tier serves each request comes from kvlab's simulator, not from this file: baseline is
GPU 21520 tokens only, lmcache is GPU 21520 + CPU 56000, 5011 tokens per document (the lab's
units), passes fwd, fwd, rev. ``total_ms`` adds a decode time for a short answer (32 tokens
at ~6.5 ms per token, with noise). Standard library only.

Regenerate: ``python -m pipeline synth-ttft``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from kvlab.scenario import pass_keys
from kvlab.summarize import atomic_output
from pipeline.ttft.attribution import tier_models
from pipeline.base.config import (BASELINE, BUNDLED_MEASURED, CONFIGS, LAB_CPU, LAB_DOCS, LAB_GPU,
                                  LAB_TOKENS, OFFLOADED)
from pipeline.base.errors import CLIError

SEED = 20261003
DOCS = LAB_DOCS
DOC_TOKENS = 4864            # tokens per document in the measurement
SIM_TOKENS = LAB_TOKENS      # the lab's simulator units per document
GPU_CAPACITY = LAB_GPU
CPU_CAPACITY = LAB_CPU
PASSES = (("pass1-cold", "fwd"), ("pass2-replay", "fwd"), ("pass3-reverse", "rev"))

#: (centre ms, relative standard deviation) per (config, tier).
TTFT_MODEL = {
    (BASELINE, "miss"): (576.0, 0.012),
    (OFFLOADED, "miss"): (600.0, 0.012),   # recompute + store to CPU
    (BASELINE, "gpu"): (30.0, 0.04),
    (OFFLOADED, "gpu"): (30.0, 0.04),
    (OFFLOADED, "cpu"): (48.2, 0.02),
}
#: Published medians that the generated file reproduces exactly (after a shift of the group).
EXACT_P50 = {(BASELINE, "pass2-replay"): 576.0, (OFFLOADED, "pass2-replay"): 48.6}
DECODE_TOKENS, DECODE_MS_PER_TOKEN = 32, 6.5


def simulated_tiers(config: str) -> list[tuple[str, int, str]]:
    """(pass name, doc, tier) for every request of one config, in reading order."""
    cache = tier_models(GPU_CAPACITY, CPU_CAPACITY)[config]
    return [(name, doc, cache.access(doc, SIM_TOKENS))
            for name, order in PASSES for doc in pass_keys(order, DOCS)]


def generate(seed: int = SEED) -> list[dict]:
    """All 60 records: configs x passes x docs, in reading order."""
    rng = random.Random(seed)
    records = []
    for config in CONFIGS:
        for name, doc, tier in simulated_tiers(config):
            centre, rel_sd = TTFT_MODEL[(config, tier)]
            ttft = round(rng.gauss(centre, centre * rel_sd), 2)
            records.append({"config": config, "pass": name, "doc": doc,
                            "doc_tokens": DOC_TOKENS, "ttft_ms": ttft})
    for (config, name), target in EXACT_P50.items():
        group = [r for r in records if r["config"] == config and r["pass"] == name]
        shift = round(target - statistics.median(r["ttft_ms"] for r in group), 2)
        for record in group:
            record["ttft_ms"] = round(record["ttft_ms"] + shift, 2)
    for record in records:
        decode = DECODE_TOKENS * DECODE_MS_PER_TOKEN * rng.gauss(1.0, 0.03)
        record["total_ms"] = round(record["ttft_ms"] + decode, 2)
    return records


def write_jsonl(path: str, records: list[dict]) -> None:
    """Write records one JSON object per line, atomically."""
    with atomic_output(path) as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``synth-ttft``."""
    parser.add_argument("--output", default=str(BUNDLED_MEASURED),
                        help="file to write (default: the bundled data/ttft.jsonl)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")


def main(args: argparse.Namespace) -> int:
    """Write the synthetic file; CLIError (one line, nothing written) if it cannot."""
    try:
        write_jsonl(args.output, generate(args.seed))
    except OSError as exc:
        raise CLIError(f"--output {args.output}: cannot write there "
                       f"({exc.strerror or exc})") from None
    print(f"wrote {args.output} (synthetic, seed {args.seed})")
    return 0


if __name__ == "__main__":
    from pipeline.cli import run_command

    raise SystemExit(run_command("synth-ttft"))
