"""The engine's command-line options (vLLM's names and defaults), shared by ``simulate``
and ``fleet``."""

from __future__ import annotations

import argparse

from pipeline.base.arguments import non_negative_int, positive_int

__all__ = ["add_engine_arguments"]


def add_engine_arguments(parser: argparse.ArgumentParser, title: str
                         ) -> argparse._ArgumentGroup:
    """Block size, scheduler limits and the LMCache CPU tier, in a group named ``title``
    (returned, so a command adds its own capacity options beside them)."""
    engine = parser.add_argument_group(title)
    engine.add_argument("--block-size", type=positive_int, default=16,
                        help="tokens per KV block (default %(default)s)")
    engine.add_argument("--max-num-seqs", type=positive_int, default=256,
                        help="running requests at most (default %(default)s)")
    engine.add_argument("--max-num-batched-tokens", type=positive_int, default=8192,
                        help="tokens per step at most (default %(default)s)")
    engine.add_argument("--max-model-len", type=positive_int, default=None,
                        help="longest sequence (default: the longest prompt + max_tokens)")
    engine.add_argument("--no-chunked-prefill", action="store_true",
                        help="schedule a prompt only whole (vLLM's --no-enable-chunked-prefill)")
    engine.add_argument("--long-prefill-token-threshold", type=non_negative_int, default=0,
                        help="cap on a prefill chunk when other requests wait (default 0)")
    engine.add_argument("--async-scheduling", action="store_true",
                        help="two batches in flight (vLLM 0.33's default on CUDA)")
    engine.add_argument("--cpu-tokens", type=non_negative_int, default=0,
                        help="LMCache CPU tier capacity in tokens of KV (default 0: none)")
    engine.add_argument("--cpu-chunk-size", type=positive_int, default=256,
                        help="LMCache chunk size, a multiple of --block-size "
                             "(default %(default)s)")
    return engine
