"""What ``trace`` replays: a trace file (Mooncake or token ids) or a generated pattern."""

from __future__ import annotations

import argparse
import functools

import numpy as np

from pipeline.base.arguments import non_negative_float, non_negative_int, positive_int
from pipeline.base.errors import CLIError, UsageError
from pipeline.sizes.limits import check_block_count, check_block_size
from pipeline.workloads import patterns
from pipeline.workloads.jsonl import TraceError, with_format_hint
from pipeline.workloads.mooncake import MOONCAKE_BLOCK_SIZE, read_mooncake
from pipeline.workloads.tokens import read_tokens
from pipeline.workloads.workload import Workload

__all__ = ["FORMATS", "GivenOption", "Workload", "add_input_arguments",
           "add_pattern_arguments", "add_trace_arguments", "check_pattern_options",
           "load_workload", "pattern_from_args"]

FORMATS = ("mooncake", "tokens")
TOKENS_BLOCK_SIZE = 16          # vLLM's default block size


#: the pattern options each pattern reads (``--shuffle-seed`` also seeds arrivals: not checked)
PATTERN_USES = {
    "long-doc-qa": ("num_documents", "document_length", "repeat_count", "repeat_mode",
                    "system_prompt_length", "question_length"),
    "multi-tenant": ("users", "num_documents", "document_length", "repeat_count",
                     "system_prompt_length", "question_length"),
    "zipf": ("num_documents", "document_length", "num_requests", "zipf_alpha",
             "system_prompt_length", "question_length"),
    "groups": ("groups", "users", "questions", "system_prompt_length", "question_length"),
    "multi-turn": ("sessions", "turns", "think_s", "system_prompt_length", "question_length"),
}


class GivenOption(argparse._StoreAction):
    """``store``, remembering the option string given (``args.pattern_options_given``), so
    that a pattern option the workload does not read is refused instead of ignored."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        given = dict(getattr(namespace, "pattern_options_given", None) or {})
        given[self.dest] = option_string
        namespace.pattern_options_given = given


def check_pattern_options(args: argparse.Namespace) -> None:
    """UsageError naming the first pattern option given that the workload does not read:
    any of them with a trace file, or one another pattern reads (``--num-requests`` with
    ``--pattern long-doc-qa``)."""
    given = getattr(args, "pattern_options_given", None) or {}
    pattern = getattr(args, "pattern", None)
    uses = PATTERN_USES.get(pattern, ())
    for dest, option in given.items():
        if dest in uses:
            continue
        if pattern is None:
            raise UsageError(f"{option}: a --pattern option; a trace file sets its own "
                             "requests (drop it, or give --pattern instead of the trace)")
        takes = ", ".join("--" + d.replace("_", "-") for d in uses)
        raise UsageError(f"{option}: --pattern {pattern} does not use it (it takes {takes})")


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH and --format, or --pattern with long_doc_qa's vocabulary."""
    add_trace_arguments(parser, FORMATS, "mooncake: {timestamp, input_length, output_length, "
                        "hash_ids}; tokens: {timestamp, tokens} and optional max_tokens, "
                        "output_token_ids")
    parser.add_argument("--block-size", type=positive_int, default=None,
                        help=f"tokens per block (default {MOONCAKE_BLOCK_SIZE} for mooncake, "
                             f"{TOKENS_BLOCK_SIZE} for tokens and patterns)")
    parser.add_argument("--skip-bad-lines", action="store_true",
                        help="skip and count bad trace lines instead of stopping at the first")
    add_pattern_arguments(parser)


def add_trace_arguments(parser: argparse.ArgumentParser, formats: tuple[str, ...],
                        formats_help: str, dest: str = "path", default: str = "mooncake"
                        ) -> None:
    """The trace file (``dest``: PATH, fleet's TRACE) and its ``--format``, whose default is
    the command's: mooncake for ``trace``, ``plan`` and ``fleet``, token ids for
    ``simulate``."""
    parser.add_argument(dest, nargs="?", metavar=dest.upper(),
                        help="trace file (JSONL, --format); or give --pattern instead")
    parser.add_argument("--format", choices=formats, default=default,
                        help=f"{formats_help} (default %(default)s)")


def add_pattern_arguments(parser: argparse.ArgumentParser, document_length: int = 20000,
                          num_requests: int = 1000) -> None:
    """--pattern and its options (LMCache long_doc_qa's vocabulary), defined once; the
    defaults of ``--document-length`` and ``--num-requests`` are the caller's (``fleet``: 2000
    and 200, as many engines simulated per point; ``plan --fleet`` keeps plan's)."""
    group = parser.add_argument_group("pattern (instead of PATH; LMCache long_doc_qa's names)")
    option = functools.partial(group.add_argument, action=GivenOption)
    group.add_argument("--pattern", choices=patterns.PATTERNS, default=None,
                       help="long-doc-qa: LMCache's benchmark; multi-tenant: a shared system "
                            "prompt + per-user documents; zipf: Zipf-popular documents")
    option("--num-documents", type=positive_int, default=8,
           help="documents (per user for multi-tenant) (default %(default)s)")
    option("--document-length", type=non_negative_int, default=document_length,
           help="tokens per document (default %(default)s)")
    option("--repeat-count", type=non_negative_int, default=2,
           help="long-doc-qa, multi-tenant: reads of each document after the "
                "first round (default %(default)s)")
    option("--repeat-mode", choices=patterns.REPEAT_MODES, default="random",
           help="long-doc-qa's query order (default %(default)s)")
    group.add_argument("--shuffle-seed", type=non_negative_int, default=0,
                       help="seed of the random repeat mode, the users' interleaving and "
                            "the Zipf draws (default %(default)s)")
    option("--system-prompt-length", type=non_negative_int, default=0,
           help="tokens of a system prompt shared by every request (default 0)")
    option("--users", type=positive_int, default=4,
           help="multi-tenant: users, each with --num-documents documents "
                "(default %(default)s)")
    option("--num-requests", type=non_negative_int, default=num_requests,
           help="zipf: requests drawn (default %(default)s)")
    option("--zipf-alpha", type=non_negative_float, default=1.0,
           help="zipf: popularity exponent (default %(default)s)")
    option("--question-length", type=non_negative_int, default=0,
           help="tokens of a unique question after the document (default 0)")


def pattern_from_args(args: argparse.Namespace) -> patterns.Pattern:
    """The pattern ``--pattern`` and its options describe (ValueError if they are bad)."""
    if args.pattern == "long-doc-qa":
        return patterns.long_doc_qa(args.num_documents, args.document_length,
                                    args.repeat_count, args.repeat_mode, args.shuffle_seed,
                                    True, args.system_prompt_length, args.question_length)
    if args.pattern == "multi-tenant":
        return patterns.multi_tenant(args.users, args.num_documents, args.document_length,
                                     args.system_prompt_length, args.repeat_count,
                                     args.shuffle_seed, args.question_length)
    return patterns.zipf_documents(args.num_documents, args.document_length,
                                   args.num_requests, args.zipf_alpha, args.shuffle_seed,
                                   args.system_prompt_length, args.question_length)


def _pattern_size(args: argparse.Namespace, block_size: int) -> tuple[int, str]:
    """(block accesses, the arguments that set them) of ``--pattern``, before generating it."""
    if args.pattern == "long-doc-qa":
        requests, what = args.num_documents * (1 + args.repeat_count), \
            "--num-documents x (1 + --repeat-count)"
    elif args.pattern == "multi-tenant":
        requests, what = args.users * args.num_documents * args.repeat_count, \
            "--users x --num-documents x --repeat-count"
    else:
        requests, what = max(args.num_requests, args.num_documents), \
            "--num-requests (or --num-documents)"
    prompt = args.system_prompt_length + args.document_length + args.question_length
    return max(requests, 1) * -(-prompt // block_size), \
        f"--pattern {args.pattern}: {what} requests of {prompt} tokens in {block_size}-token blocks"


def block_size_of(args: argparse.Namespace) -> int:
    """The block size the workload will have: --block-size, else the format's default."""
    if args.block_size:
        return args.block_size
    mooncake = args.pattern is None and args.format == "mooncake"
    return MOONCAKE_BLOCK_SIZE if mooncake else TOKENS_BLOCK_SIZE


def load_workload(args: argparse.Namespace) -> Workload:
    """Read or generate the workload; a user error becomes one ``CLIError`` line."""
    if (args.path is None) == (args.pattern is None):
        raise CLIError("give a trace PATH or --pattern, not both or neither")
    check_pattern_options(args)
    check_block_size(args.block_size)
    if args.pattern is not None:
        block_size = args.block_size or TOKENS_BLOCK_SIZE
        check_block_count(*_pattern_size(args, block_size))
        try:
            with np.errstate(over="ignore"):         # a huge --zipf-alpha: weights 1, 0, 0..
                pattern = pattern_from_args(args)
            if pattern.requests_count == 0:
                raise ValueError("the pattern has no requests")
        except ValueError as exc:
            raise CLIError(f"--pattern {args.pattern}: {exc}") from None
        return pattern.workload(block_size)
    try:
        if args.format == "mooncake":
            block_size = args.block_size or MOONCAKE_BLOCK_SIZE
            return read_mooncake(args.path, block_size, args.skip_bad_lines)
        block_size = args.block_size or TOKENS_BLOCK_SIZE
        return read_tokens(args.path, block_size, args.skip_bad_lines)
    except TraceError as exc:
        raise CLIError(str(with_format_hint(exc, args.path, args.format, "tokens"))) from None
