"""Write a large synthetic token-id JSONL trace (``{"timestamp": ..., "tokens": [...]}``).

Synthetic, seeded: each request is one of a few shared system prompts, then the start of a
Zipf-popular document (so requests share prefixes of varying length), then unique question
tokens. The defaults give 100,000 requests and about 50M prompt tokens (~400 MB), the size
``scripts/bench_trace_reader.py`` measures ``python -m pipeline trace`` on.

    .venv/bin/python scripts/make_token_trace.py --out /tmp/kvlab-big-tokens.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def requests(n_requests: int, mean_tokens: int, vocab: int, seed: int):
    """Yield (timestamp_ms, token array) per request."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, vocab, 256) for _ in range(8)]
    documents = [rng.integers(0, vocab, int(n)) for n in rng.integers(200, 2 * mean_tokens, 2000)]
    popularity = 1.0 / np.arange(1, len(documents) + 1)
    popularity /= popularity.sum()
    time = 0.0
    for _ in range(n_requests):
        system = systems[int(rng.integers(len(systems)))]
        document = documents[int(rng.choice(len(documents), p=popularity))]
        shared = document[:int(rng.integers(len(document) // 2, len(document) + 1))]
        question = rng.integers(0, vocab, int(rng.integers(1, 64)))
        prompt = np.concatenate((system, shared, question))
        time += float(rng.exponential(20.0))
        yield round(time, 3), prompt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/kvlab-big-tokens.jsonl"))
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--mean-tokens", type=int, default=180,
                        help="about half the mean document length (default %(default)s)")
    parser.add_argument("--vocab", type=int, default=1_000_000,
                        help="token ids are below this (6-digit ids: the file is ~400 MB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tokens = 0
    with open(args.out, "w") as out:
        for timestamp, prompt in requests(args.requests, args.mean_tokens, args.vocab,
                                          args.seed):
            tokens += prompt.size
            out.write(json.dumps({"timestamp": timestamp, "tokens": prompt.tolist()}) + "\n")
    print(f"{args.out}: {args.requests} requests, {tokens} prompt tokens, "
          f"{args.out.stat().st_size / 1e6:.0f} MB (synthetic, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
