"""A per-run speed probe: the same fixed prompts timed on the server before and after a run.

The machine a measurement runs on may be slower in one run than in another (other jobs, a
noisy neighbour, frequency scaling). The probe sends ``PROBE_PROMPTS`` fixed prompts of
``PROBE_TOKENS`` words (one token each under the project's tiny model; each starts with one
of the last words of the lab's list, so a prompt shares at most the beginning-of-sequence
token with them unless a trace block happens to start with that word), one at a time,
``PROBE_MAX_TOKENS``
generated, before the run's requests and again after them, and records each one's TTFT in the
sidecar session (``speed_probe``). Identical work in every run, so the ratio of two runs'
probes is the ratio of the machine's speed during them; ``fit --speed-probe`` scales each
run's step times by it (nothing fitted, nothing chosen by looking at any run's TTFTs).
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Callable
from pathlib import Path

import httpx

from pipeline.base.errors import CLIError
from pipeline.measure.client import RequestFailed, stream_completion
from pipeline.measure.sidecar import add_to_session
from pipeline.measure.workload import BODY_WORDS, SEED

__all__ = ["PROBE_PROMPTS", "PROBE_TOKENS", "probe_prompts", "probe_scale", "probed",
           "run_probe"]

PROBE_TOKENS = 2048
PROBE_PROMPTS = 3
PROBE_MAX_TOKENS = 1


def probe_prompts(count: int = PROBE_PROMPTS, tokens: int = PROBE_TOKENS) -> list[str]:
    """``count`` fixed prompts of ``tokens`` words, each starting with a different word."""
    prompts = []
    for index in range(count):
        rng = random.Random(f"{SEED}:probe:{index}")
        words = [BODY_WORDS[-1 - index]] + rng.choices(BODY_WORDS, k=tokens - 1)
        prompts.append(" ".join(words))
    return prompts


async def _probe(url: str, payload: dict, timeout_s: float) -> list[float]:
    times = []
    async with httpx.AsyncClient(trust_env=False) as client:
        for prompt in probe_prompts():
            result = await stream_completion(client, url, {**payload, "prompt": prompt},
                                             timeout_s)
            times.append(round(result.ttft_ms, 3))
    return times


def run_probe(base_url: str, logit_bias: dict | None = None, timeout_s: float = 300.0,
              model: str | None = None) -> list[float]:
    """The probe prompts' TTFTs in ms, sent one at a time to ``base_url``; CLIError when the
    server does not answer one."""
    payload: dict = {"max_tokens": PROBE_MAX_TOKENS, "temperature": 0.0}
    if logit_bias:
        payload["logit_bias"] = dict(logit_bias)
    if model:
        payload["model"] = model
    try:
        return asyncio.run(_probe(base_url.rstrip("/") + "/v1/completions", payload,
                                  timeout_s))
    except RequestFailed as exc:
        raise CLIError(f"--speed-probe: {exc}") from None


def probed(output: Path, base_url: str, before: list[float], send: Callable[[], int], *,
           logit_bias: dict | None = None, timeout_s: float = 300.0,
           model: str | None = None) -> int:
    """``send()`` (a run's requests; returns the lines written) after the probe ``before``
    (``run_probe``, taken before anything was written) and before a second one, both added
    to OUTPUT's last sidecar session as ``speed_probe``."""
    written = send()
    add_to_session(output, {"speed_probe": {
        "prompts": PROBE_PROMPTS, "tokens": PROBE_TOKENS, "max_tokens": PROBE_MAX_TOKENS,
        "before_ms": before, "after_ms": run_probe(base_url, logit_bias, timeout_s, model)}})
    return written


def probe_scale(probe: dict | None) -> float | None:
    """The median probe TTFT of one session (before and after together); None without one."""
    if not isinstance(probe, dict):
        return None
    times = [t for key in ("before_ms", "after_ms") for t in probe.get(key) or []
             if isinstance(t, (int, float)) and t > 0]
    return statistics.median(times) if times else None
