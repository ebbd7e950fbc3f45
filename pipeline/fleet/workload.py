"""What the fleet serves: a trace or a generated pattern, as ``EngineRequests``.

Traces are read as ``simulate`` reads them (``pipeline.engine.workload``: Mooncake's block
ids become the engine's chained block keys, token-id JSONL keeps its tokens); the block
patterns (long-doc-qa, multi-tenant, zipf) as ``simulate`` builds them; ``groups`` and
``multi-turn`` (``pipeline.workloads.patterns``) as token ids with session ids. Arrivals
are the trace's own, or Poisson at ``--rate`` (multi-turn: its own schedule). A sweep
point's load divides every arrival time.
"""

from __future__ import annotations

import argparse
from dataclasses import replace


from pipeline.base.arguments import non_negative_float, positive_float, positive_int
from pipeline.engine.request import EngineRequests, SimRequest
from pipeline.engine.workload import FORMATS, pattern_workload, read_workload, with_arrivals
from pipeline.base.errors import CLIError
from pipeline.workloads.sources import (GivenOption, add_pattern_arguments, add_trace_arguments,
                                       check_pattern_options)
from pipeline.workloads import patterns
from pipeline.workloads.jsonl import TraceError

__all__ = ["FLEET_PATTERNS", "add_workload_arguments", "load_workload",
           "requests_at_load"]

FLEET_PATTERNS = (*patterns.PATTERNS, *patterns.TOKEN_PATTERNS)


def requests_at_load(workload: EngineRequests, load: float) -> list[SimRequest]:
    """The requests with arrival times divided by ``load``: copies, or at load 1 (where
    the division changes nothing) the requests themselves (nobody changes them)."""
    if load == 1.0 and all(r.arrival_s is not None for r in workload.requests):
        return list(workload.requests)
    return [replace(r, arrival_s=(r.arrival_s or 0.0) / load) for r in workload.requests]


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """TRACE or --pattern (``simulate``'s and ``trace``'s vocabulary, plus groups and
    multi-turn)."""
    add_trace_arguments(parser, FORMATS, "mooncake: {timestamp, input_length, "
                        "output_length, hash_ids}; tokens: {prompt_token_ids, max_tokens, "
                        "arrival_time}", dest="trace")
    parser.add_argument("--limit", type=positive_int, metavar="N",
                        help="the trace's first N requests only")
    add_pattern_arguments(parser, document_length=2000, num_requests=200)
    pattern = next(a for a in parser._actions if a.dest == "pattern")
    pattern.choices = FLEET_PATTERNS
    pattern.help += ("; groups: groups x users, a system prompt per group and unique "
                     "questions (llm-d's shared-prefix workload); multi-turn: chats with "
                     "session ids that re-send earlier turns and answers")
    group = parser.add_argument_group("groups and multi-turn patterns, arrivals")
    group.add_argument("--groups", action=GivenOption, type=positive_int, default=4,
                       help="groups: system prompts, each shared by --users users "
                            "(default %(default)s)")
    group.add_argument("--questions", action=GivenOption, type=positive_int, default=4,
                       help="groups: questions per user (default %(default)s)")
    group.add_argument("--sessions", action=GivenOption, type=positive_int, default=8,
                       help="multi-turn: chats (default %(default)s)")
    group.add_argument("--turns", action=GivenOption, type=positive_int, default=4,
                       help="multi-turn: turns per chat; a turn's user message has "
                            "--question-length tokens (default %(default)s)")
    group.add_argument("--think-s", action=GivenOption, type=non_negative_float, default=2.0,
                       help="multi-turn: seconds between a chat's turns (default %(default)s)")
    group.add_argument("--output-tokens", type=positive_int, default=16,
                       help="tokens each pattern request samples (token traces: lines "
                            "without max_tokens) (default %(default)s)")
    group.add_argument("--rate", type=positive_float, default=4.0,
                       help="Poisson arrivals per second of patterns (multi-turn: chats "
                            "starting per second) (default %(default)s)")


def _token_pattern(args: argparse.Namespace) -> tuple[str, list[SimRequest], bool]:
    """groups / multi-turn: (label, requests, whether arrivals are set)."""
    if args.pattern == "groups":
        made = patterns.tenant_groups(args.groups, args.users, args.questions,
                                      args.system_prompt_length, args.question_length,
                                      args.shuffle_seed)
    else:
        made = patterns.multi_turn(args.sessions, args.turns, args.system_prompt_length,
                                   args.question_length, args.output_tokens, args.think_s,
                                   args.rate, args.shuffle_seed)
    arrivals = made.arrivals_s
    requests = [SimRequest(i, prompt, args.output_tokens,
                           arrival_s=None if arrivals is None else float(arrivals[i]),
                           session=session,
                           output_token_ids=None if output is None else output.tolist())
                for i, (prompt, output, session)
                in enumerate(zip(made.prompts, made.outputs, made.sessions))]
    return f"--pattern {made.name}", requests, arrivals is not None


def workload_usage_checks(args: argparse.Namespace) -> None:
    """ValueError naming the option (a usage error) when the options cannot name one
    workload: a TRACE and --pattern both or neither, --limit on a pattern, a pattern whose
    prompts would be empty."""
    if (args.trace is None) == (args.pattern is None):
        raise ValueError("give a TRACE or --pattern, not both or neither")
    check_pattern_options(args)
    if args.pattern is not None and getattr(args, "limit", None) is not None:
        raise ValueError(f"--limit takes a TRACE's first N requests; --pattern {args.pattern} "
                         "sets its size with its own options")
    if (args.pattern in patterns.TOKEN_PATTERNS
            and args.system_prompt_length + args.question_length < 1):
        raise ValueError(f"--pattern {args.pattern}: give --system-prompt-length or "
                         "--question-length (a prompt needs at least one token)")


def load_workload(args: argparse.Namespace) -> EngineRequests:
    """The trace or pattern the options name (``workload_usage_checks`` passed), requests
    in a tuple in arrival order, base arrivals in ``arrival_s``; CLIError (one line) on a
    user error in the data."""
    timed, lines = True, None
    try:
        if args.trace is not None:
            read = read_workload(args.trace, args.format, args.block_size, args.output_tokens)
            requests, label = read.requests[:args.limit], str(args.trace)
            lines = read.lines[:args.limit]
            if read.arrival_unit == "steps":
                raise CLIError(f"{label}: arrivals are in steps (arrival_step), but the "
                               "fleet's clock is in seconds: give arrival_time, or neither "
                               "for Poisson arrivals at --rate")
            timed = read.arrival_unit == "seconds"
        elif args.pattern in patterns.TOKEN_PATTERNS:
            label, requests, timed = _token_pattern(args)
        else:
            requests, label, timed = pattern_workload(args).requests, \
                f"--pattern {args.pattern}", False
    except TraceError as exc:
        raise CLIError(str(exc)) from None
    except OSError as exc:
        raise CLIError(f"{args.trace}: {exc.strerror}") from None
    except ValueError as exc:
        raise CLIError(f"--pattern {args.pattern}: {exc}") from None
    if not requests:
        raise CLIError("the workload has no requests")
    if not timed:
        with_arrivals(requests, "time", rate=args.rate, seed=args.shuffle_seed)
    if any(r.arrival_s is None for r in requests):
        raise CLIError(f"{label}: requests need arrival times (arrival_time) for the "
                       "fleet's clock")
    return EngineRequests(label, tuple(requests), lines, "seconds")
