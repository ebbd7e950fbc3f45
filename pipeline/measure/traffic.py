"""Real traffic for ``measure``: a trace's prompts and a timing (open or closed loop).

Prompts:

* **Mooncake JSONL** (``timestamp, input_length, output_length, hash_ids``): each hash id is
  one ``block_size``-token block (512 by default) whose content is deterministic per id
  (``block_words``: words of the lab's vocabulary, seeded by the id), so requests that share
  hash ids share exactly those prompt blocks and nothing more. With the project's tiny model
  a word is one token, so a prompt has ``input_length`` tokens plus the beginning-of-sequence
  token; with ``token_ids`` the blocks are sent as token ids instead (``block_token_ids``),
  exact for any engine that takes token-id prompts (vLLM, SGLang).
* **token-id JSONL** (``timestamp, tokens``): the token ids as given.

Timing (``Timing``): ``trace`` sends at the trace's timestamps (milliseconds, first request
at 0) divided by ``speed``; ``rate`` sends at Poisson arrivals of ``rate`` per second
(exponential gaps from ``numpy.random.default_rng(seed)``, first request at 0); both are open
loop. ``concurrency`` is a closed loop: ``N`` requests in flight, the next sent when one ends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.measure.workload import BODY_WORDS, SEED, Request
from pipeline.workloads.jsonl import apply_checks, read_lines, refuse_backwards
from pipeline.workloads.mooncake import FIELDS as MOONCAKE_FIELDS
from pipeline.workloads.mooncake import MOONCAKE_BLOCK_SIZE
from pipeline.workloads.mooncake import line_checks as mooncake_checks
from pipeline.workloads.tokens import FIELDS as TOKEN_FIELDS
from pipeline.workloads.tokens import line_checks as token_checks
from pipeline.workloads.tokens import token_blocks

__all__ = ["TOKEN_BLOCK", "Timing", "block_token_ids", "block_words", "trace_requests",
           "send_times"]

#: prefix_ids granularity recorded for token-id traces (vLLM's default block size)
TOKEN_BLOCK = 16
#: token ids a Mooncake block uses with ``token_ids`` (clear of most special tokens)
ID_RANGE = (1000, 30000)


@dataclass(frozen=True)
class Timing:
    """When requests are sent: ``kind`` is ``trace``, ``rate`` or ``concurrency``."""

    kind: str
    speed: float = 1.0
    rate: float = 0.0
    concurrency: int = 1
    seed: int = 0

    @property
    def label(self) -> str:
        """A short name for the run (the ``pass`` of its lines)."""
        if self.kind == "trace":
            return f"trace-x{self.speed:g}"
        if self.kind == "rate":
            return f"rate-{self.rate:g}"
        return f"closed-c{self.concurrency}"

    @property
    def open_loop(self) -> bool:
        return self.kind != "concurrency"

    def describe(self) -> dict:
        if self.kind == "trace":
            return {"kind": "trace", "speed": self.speed}
        if self.kind == "rate":
            return {"kind": "rate", "rate_per_s": self.rate, "seed": self.seed,
                    "arrivals": "Poisson (numpy default_rng(seed).exponential)"}
        return {"kind": "concurrency", "concurrency": self.concurrency}


def send_times(timing: Timing, timestamps_ms: np.ndarray) -> np.ndarray | None:
    """Seconds after the start at which each request is sent (None for a closed loop)."""
    n = len(timestamps_ms)
    if timing.kind == "concurrency":
        return None
    if timing.kind == "trace":
        t = np.asarray(timestamps_ms, dtype=np.float64)
        return (t - (t.min() if n else 0.0)) / 1000.0 / timing.speed
    gaps = np.random.default_rng(timing.seed).exponential(1.0 / timing.rate, size=n)
    times = np.cumsum(gaps)
    return times - times[0] if n else times


def block_words(block_id: int, tokens: int, seed: int = SEED) -> list[str]:
    """The first ``tokens`` words of hash id ``block_id``'s block (deterministic per id)."""
    rng = random.Random(f"{seed}:{block_id}")
    return rng.choices(BODY_WORDS, k=tokens)


def block_token_ids(block_id: int, tokens: int, seed: int = SEED) -> list[int]:
    """The first ``tokens`` token ids of hash id ``block_id``'s block (deterministic)."""
    rng = random.Random(f"{seed}:{block_id}")
    return [rng.randrange(*ID_RANGE) for _ in range(tokens)]


def _mooncake(path: Path, block_size: int, seed: int, token_ids: bool) -> list[dict]:
    good, _ = apply_checks(read_lines(path, MOONCAKE_FIELDS), mooncake_checks(block_size), False)
    refuse_backwards(good, "timestamp", path)
    rows = []
    for stamp, length, output, ids, line in good.select(
            "timestamp", "input_length", "output_length", "hash_ids", "line").iter_rows():
        sizes = [block_size] * (len(ids) - 1) + [length - (len(ids) - 1) * block_size]
        if token_ids:
            prompt: str | tuple[int, ...] = tuple(
                t for key, size in zip(ids, sizes) for t in block_token_ids(key, size, seed))
        else:
            prompt = " ".join(w for key, size in zip(ids, sizes)
                              for w in block_words(key, size, seed))
        rows.append({"timestamp": stamp, "prompt": prompt, "tokens": length,
                     "output": output, "ids": tuple(ids), "block": block_size, "line": line})
    return rows


def _tokens(path: Path) -> list[dict]:
    good, _ = apply_checks(read_lines(path, TOKEN_FIELDS), token_checks(), False)
    refuse_backwards(good, "timestamp", path)
    lengths = good["tokens"].list.len().to_numpy()
    keys = token_blocks(good["tokens"].explode().to_numpy(), lengths, TOKEN_BLOCK)
    per_request = keys.group_by("request", maintain_order=True).agg("block_key")
    rows = []
    for (stamp, tokens, line), ids in zip(good.select("timestamp", "tokens", "line").iter_rows(),
                                          per_request["block_key"].to_list()):
        rows.append({"timestamp": stamp, "prompt": tuple(tokens), "tokens": len(tokens),
                     "output": None, "ids": tuple(int(k) for k in ids), "block": TOKEN_BLOCK,
                     "line": line})
    return rows


def trace_requests(path: str | Path, fmt: str, timing: Timing, config: str, *,
                   block_size: int = MOONCAKE_BLOCK_SIZE, seed: int = SEED,
                   token_ids: bool = False, limit: int | None = None,
                   repeat: int = 0) -> list[Request]:
    """Every request of trace ``path`` (``fmt`` mooncake or tokens) in trace order.

    ``TraceError`` (``file:line: reason``) on a bad line. A request's ``pass_name`` is the
    timing's label, its ``step`` and ``doc`` its 0-based index in the trace, ``doc_tokens``
    its prompt tokens (without BOS), ``max_tokens`` the trace's output length if it gives one.
    """
    path = Path(path)
    rows = _mooncake(path, block_size, seed, token_ids) if fmt == "mooncake" else _tokens(path)
    rows = rows[:limit] if limit else rows
    times = send_times(timing, np.array([r["timestamp"] for r in rows], dtype=np.float64))
    return [Request(config, repeat, timing.label, index, index, row["tokens"], row["prompt"],
                    send_at_s=None if times is None else float(times[index]),
                    prefix_ids=row["ids"], prefix_block=row["block"],
                    max_tokens=row["output"] if row["output"] else None)
            for index, row in enumerate(rows)]
