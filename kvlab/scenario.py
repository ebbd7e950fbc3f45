"""Replay documents-as-prefixes through one GPU (+ optional CPU) LRU cache; print JSON.

Keys are document numbers 0..docs-1, all of size ``tokens``. A ``fwd`` pass reads
0..docs-1, a ``rev`` pass docs-1..0; one cache is kept across all passes. Standard output
is exactly one JSON document::

    {"passes": [{"order": "fwd", "gpu_hits": 0, "cpu_hits": 0, "misses": 10,
                 "hit_docs": []}, ...]}

Example: ``python3 kvlab/scenario.py --gpu 21520 --cpu 56000 --passes fwd,fwd,rev``.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import sys

try:
    from .kvsim import TwoTierCache
except ImportError:  # run as a script: python3 kvlab/scenario.py
    from kvsim import TwoTierCache

PASS_ORDERS = ("fwd", "rev")


def pass_keys(order: str, docs: int) -> range:
    """The document numbers one pass reads, in reading order."""
    if order == "fwd":
        return range(docs)
    if order == "rev":
        return range(docs - 1, -1, -1)
    raise ValueError(f"unknown pass order {order!r}: expected one of {', '.join(PASS_ORDERS)}")


def run(gpu: int = 21520, docs: int = 10, tokens: int = 5011,
        passes: list[str] | tuple[str, ...] = ("fwd", "fwd", "rev"), cpu: int = 0) -> dict:
    """Run the scenario and return ``{"passes": [...]}`` as scenario.py prints it."""
    cache = TwoTierCache(gpu, cpu)
    results = []
    for order in passes:
        counts = {"gpu": 0, "cpu": 0, "miss": 0}
        hit_docs = []
        for doc in pass_keys(order, docs):
            tier = cache.access(doc, tokens)
            counts[tier] += 1
            if tier != "miss":
                hit_docs.append(doc)
        results.append({"order": order, "gpu_hits": counts["gpu"], "cpu_hits": counts["cpu"],
                        "misses": counts["miss"], "hit_docs": hit_docs})
    return {"passes": results}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def pass_list(text: str) -> list[str]:
    """argparse type: a comma-separated, non-empty list of fwd/rev."""
    orders = [part.strip() for part in text.split(",")]
    if not text.strip():
        raise argparse.ArgumentTypeError("the pass list is empty: give e.g. fwd,fwd,rev")
    bad = [order for order in orders if order not in PASS_ORDERS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown pass {bad[0]!r} in {text!r}: each pass is fwd or rev")
    return orders


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="scenario.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", type=non_negative_int, default=21520,
                        help="GPU KV capacity in tokens (default 21520)")
    parser.add_argument("--docs", type=non_negative_int, default=10,
                        help="number of documents (default 10)")
    parser.add_argument("--tokens", type=non_negative_int, default=5011,
                        help="tokens per document (default 5011)")
    parser.add_argument("--passes", type=pass_list, default=["fwd", "fwd", "rev"],
                        help="comma-separated reading orders, fwd or rev (default fwd,fwd,rev)")
    parser.add_argument("--cpu", type=non_negative_int, default=0,
                        help="CPU offload capacity in tokens; 0 = GPU tier only (default 0)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(gpu=args.gpu, docs=args.docs, tokens=args.tokens, passes=args.passes,
                 cpu=args.cpu)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
