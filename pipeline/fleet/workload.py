"""What the fleet serves: a Mooncake trace or a generated pattern, as ``SimRequest`` lists.

Mooncake's ``hash_ids`` name 512-token blocks; each id becomes 512 token ids of its own
(``id * 512 + j``), so equal id prefixes give equal token prefixes and the engine's chained
block hashes (any ``--block-size``) share exactly what the trace shares. Synthetic tokens:
the trace has no text. Patterns (``pipeline.workloads.patterns``) come as token ids with
Poisson arrivals at ``--rate`` unless they carry their own (multi-turn). A point's load
multiplies the arrival rate (arrival times are divided by it).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.arguments import non_negative_float, non_negative_int, positive_float, positive_int
from pipeline.engine.request import SimRequest
from pipeline.errors import CLIError
from pipeline.workloads import patterns
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.mooncake import MOONCAKE_BLOCK_SIZE, read_mooncake

__all__ = ["FLEET_PATTERNS", "Workload", "add_workload_arguments", "load_workload",
           "requests_at_load"]

FLEET_PATTERNS = (*patterns.PATTERNS, *patterns.TOKEN_PATTERNS)


@dataclass(frozen=True)
class Workload:
    """Prompts, outputs and sessions per request, and base arrival times (seconds)."""

    label: str
    prompts: tuple[np.ndarray, ...]
    max_tokens: np.ndarray
    outputs: tuple[np.ndarray | None, ...]
    sessions: tuple[str | None, ...]
    arrivals_s: np.ndarray

    @property
    def size(self) -> int:
        return len(self.prompts)


def requests_at_load(workload: Workload, load: float) -> list[SimRequest]:
    """The workload's requests with arrival times divided by ``load``."""
    return [SimRequest(i, workload.prompts[i], int(workload.max_tokens[i]),
                       arrival_s=float(workload.arrivals_s[i]) / load,
                       session=workload.sessions[i],
                       output_token_ids=None if workload.outputs[i] is None
                       else workload.outputs[i].tolist())
            for i in range(workload.size)]


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """TRACE or --pattern and the pattern's sizes."""
    parser.add_argument("trace", nargs="?", metavar="TRACE",
                        help="Mooncake trace (JSONL: timestamp ms, input_length, "
                             "output_length, hash_ids of 512-token blocks); or --pattern")
    parser.add_argument("--limit", type=positive_int, metavar="N",
                        help="the trace's first N requests only")
    parser.add_argument("--max-output-tokens", type=positive_int, metavar="N",
                        help="cap each trace request's output_length at N")
    group = parser.add_argument_group("pattern (instead of TRACE)")
    group.add_argument("--pattern", choices=FLEET_PATTERNS,
                       help="long-doc-qa (LMCache), multi-tenant (shared system prompt + "
                            "per-user documents), zipf, groups (groups x users: a system "
                            "prompt per group + unique questions), multi-turn (chats with "
                            "session ids)")
    group.add_argument("--num-documents", type=positive_int, default=8,
                       help="long-doc-qa/multi-tenant/zipf documents (default %(default)s)")
    group.add_argument("--document-length", type=non_negative_int, default=2000,
                       help="tokens per document (default %(default)s)")
    group.add_argument("--repeat-count", type=non_negative_int, default=2,
                       help="reads of each document after the first (default %(default)s)")
    group.add_argument("--repeat-mode", choices=patterns.REPEAT_MODES, default="random",
                       help="long-doc-qa's query order (default %(default)s)")
    group.add_argument("--users", type=positive_int, default=4,
                       help="multi-tenant users; groups: users per group (default %(default)s)")
    group.add_argument("--num-requests", type=non_negative_int, default=200,
                       help="zipf requests (default %(default)s)")
    group.add_argument("--zipf-alpha", type=non_negative_float, default=1.0,
                       help="zipf exponent (default %(default)s)")
    group.add_argument("--groups", type=positive_int, default=4,
                       help="groups: system prompts (default %(default)s)")
    group.add_argument("--questions", type=positive_int, default=4,
                       help="groups: questions per user (default %(default)s)")
    group.add_argument("--sessions", type=positive_int, default=8,
                       help="multi-turn: chats (default %(default)s)")
    group.add_argument("--turns", type=positive_int, default=4,
                       help="multi-turn: turns per chat (default %(default)s)")
    group.add_argument("--think-s", type=non_negative_float, default=2.0,
                       help="multi-turn: seconds between turns (default %(default)s)")
    group.add_argument("--system-prompt-length", type=non_negative_int, default=0,
                       help="tokens of the shared (groups: per-group) system prompt "
                            "(default 0)")
    group.add_argument("--question-length", type=non_negative_int, default=64,
                       help="tokens of each request's own question / user message "
                            "(default %(default)s)")
    group.add_argument("--output-tokens", type=positive_int, default=16,
                       help="tokens each pattern request samples (default %(default)s)")
    group.add_argument("--rate", type=positive_float, default=4.0,
                       help="Poisson arrivals per second of patterns (multi-turn: chats "
                            "starting per second) (default %(default)s)")
    group.add_argument("--shuffle-seed", type=non_negative_int, default=0,
                       help="seed of orders, draws and arrivals (default %(default)s)")


def _pattern(args: argparse.Namespace) -> patterns.TokenPattern:
    name, seed = args.pattern, args.shuffle_seed
    if name == "groups":
        return patterns.tenant_groups(args.groups, args.users, args.questions,
                                      args.system_prompt_length, args.question_length, seed)
    if name == "multi-turn":
        return patterns.multi_turn(args.sessions, args.turns, args.system_prompt_length,
                                   args.question_length, args.output_tokens, args.think_s,
                                   args.rate, seed)
    if name == "long-doc-qa":
        block = patterns.long_doc_qa(args.num_documents, args.document_length,
                                     args.repeat_count, args.repeat_mode, seed, True,
                                     args.system_prompt_length, args.question_length)
    elif name == "multi-tenant":
        block = patterns.multi_tenant(args.users, args.num_documents, args.document_length,
                                      args.system_prompt_length, args.repeat_count, seed,
                                      args.question_length)
    else:
        block = patterns.zipf_documents(args.num_documents, args.document_length,
                                        args.num_requests, args.zipf_alpha, seed,
                                        args.system_prompt_length, args.question_length)
    return patterns.pattern_tokens(block)


def _mooncake(args: argparse.Namespace) -> Workload:
    try:
        trace = read_mooncake(args.trace, MOONCAKE_BLOCK_SIZE)
    except TraceError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"{args.trace}: {exc.strerror}") from None
    requests = trace.requests
    limit = args.limit or requests.height
    blocks = trace.blocks.filter(pl.col("request") < limit)
    tokens = (blocks.select("request", first=pl.col("block_key").cast(pl.Int64)
                            * MOONCAKE_BLOCK_SIZE, count=pl.col("block_tokens"))
              .select("request", token=pl.int_ranges(pl.col("first"),
                                                     pl.col("first") + pl.col("count")))
              .explode("token"))
    lengths = requests["prompt_tokens"].to_numpy()[:limit].astype(np.int64)
    flat = tokens["token"].to_numpy()
    prompts = tuple(np.split(flat, np.cumsum(lengths)[:-1])) if limit else ()
    outputs = _output_lengths(args.trace, trace.lines[:limit])
    if args.max_output_tokens:
        outputs = np.minimum(outputs, args.max_output_tokens)
    arrivals = requests["timestamp_ms"].to_numpy()[:limit].astype(np.float64) / 1000.0
    return Workload(f"{args.trace}", prompts, np.maximum(outputs, 1),
                    (None,) * limit, (None,) * limit, arrivals)


def _output_lengths(path, lines: np.ndarray) -> np.ndarray:
    """``output_length`` of the trace's requests (by file line)."""
    frame = pl.read_ndjson(path, schema={"output_length": pl.Int64})
    return frame["output_length"].to_numpy()[lines - 1].astype(np.int64)


def load_workload(args: argparse.Namespace) -> Workload:
    """The trace or pattern the options name; CLIError (one line) on a user error."""
    if (args.trace is None) == (args.pattern is None):
        raise CLIError("give a TRACE or --pattern, not both or neither")
    if args.trace is not None:
        workload = _mooncake(args)
    else:
        try:
            pattern = _pattern(args)
        except ValueError as exc:
            raise CLIError(f"--pattern {args.pattern}: {exc}") from None
        n = len(pattern.prompts)
        arrivals = pattern.arrivals_s
        if arrivals is None:
            gaps = np.random.default_rng(args.shuffle_seed).exponential(1.0 / args.rate, n)
            arrivals = np.cumsum(gaps) - (gaps[0] if n else 0.0)
        max_tokens = np.array([args.output_tokens] * n, dtype=np.int64)
        workload = Workload(pattern.name, pattern.prompts, max_tokens, pattern.outputs,
                            pattern.sessions, arrivals)
    if workload.size == 0:
        raise CLIError("the workload has no requests")
    return workload
