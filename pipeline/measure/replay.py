"""``measure --trace FILE`` (or a pattern with ``--rate``): replay traffic and describe it.

Builds the requests (``pipeline.measure.traffic``), sends the ones without an answered line
(``--resume``) at their times or ``--concurrency`` at a time, to ``--base-url`` or to a fresh
local llama.cpp server (``--local-engine``, no RAM prompt cache: the live context only), and
writes the sidecar (``pipeline.measure.sidecar``). Every line carries ``session``: the
sidecar session (server start, for ``--local-engine``) it was measured in; ``fit`` simulates
each session from an empty cache.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx
import numpy as np

from pipeline.base.errors import CLIError
from pipeline.measure.client import RequestFailed
from pipeline.measure.output import check_output, provenance_path
from pipeline.measure.probe import probed, run_probe
from pipeline.measure.runner import run_requests, settings_from
from pipeline.measure.sidecar import machine, sha256, write_sidecar
from pipeline.measure.traffic import Timing, send_times, trace_requests
from pipeline.measure.workload import QUESTION_WORDS, SEED, Request, spec_requests, workload_spec
from pipeline.workloads.jsonl import TraceError

__all__ = ["is_replay", "replay_requests", "run_replay", "timing_from"]

def is_replay(args: argparse.Namespace) -> bool:
    """Whether ``measure``'s options ask for a replay (a trace, or a timed pattern)."""
    return bool(args.trace or args.rate or args.speed)


def timing_from(args: argparse.Namespace) -> Timing:
    """The timing the options give; CLIError when they contradict each other."""
    given = [name for name, value in (("--rate", args.rate), ("--speed", args.speed),
                                      ("--concurrency", args.concurrency)) if value]
    if len(given) > 1:
        raise CLIError(f"{given[0]} and {given[1]} exclude each other (one timing per run)")
    if args.speed and not args.trace:
        raise CLIError("--speed replays a trace's timestamps: it needs --trace")
    if args.rate:
        return Timing("rate", rate=args.rate, seed=args.seed)
    if args.concurrency or not args.trace:
        return Timing("concurrency", concurrency=args.concurrency or 1)
    return Timing("trace", speed=args.speed or 1.0)


def _trace_format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    try:
        with path.open(encoding="utf-8") as handle:
            first = next((line for line in handle if line.strip()), "")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"--trace {path}: cannot read ({exc})") from None
    if '"hash_ids"' in first:
        return "mooncake"
    if '"tokens"' in first:
        return "tokens"
    raise CLIError(f"--trace {path}:1: neither a Mooncake line (hash_ids) nor a token-id line "
                   f"(tokens); give --trace-format")


def replay_requests(args: argparse.Namespace) -> tuple[list[Request], dict, Timing]:
    """The requests, the workload description (for the sidecar) and the timing."""
    timing = timing_from(args)
    if args.trace:
        fmt = _trace_format(args.trace, args.trace_format)
        try:
            requests = trace_requests(args.trace, fmt, timing, args.config,
                                      block_size=args.trace_block_size, token_ids=args.token_ids,
                                      limit=args.limit)
        except TraceError as exc:
            raise CLIError(str(exc)) from None
        workload = {"trace": str(args.trace), "trace_sha256": sha256(args.trace), "format": fmt,
                    "block_size": args.trace_block_size if fmt == "mooncake" else None,
                    "prompts": ("token ids" if args.token_ids or fmt == "tokens" else
                                "words of the lab's vocabulary, one token each under the "
                                "project's tiny model"),
                    "seed": SEED, "limit": args.limit, "requests": len(requests)}
        return requests, workload, timing
    requests = spec_requests(args.config, workload_spec(args))
    times = send_times(timing, np.zeros(len(requests)))
    if times is not None:
        requests = [Request(r.config, r.repeat, timing.label, index, r.doc, r.doc_tokens,
                            r.prompt, send_at_s=float(times[index]),
                            prefix_ids=(r.doc,), prefix_block=r.doc_tokens + QUESTION_WORDS,
                            input_tokens=r.doc_tokens + QUESTION_WORDS)
                    for index, r in enumerate(requests)]
    return requests, {**workload_spec(args), "requests": len(requests)}, timing


def _served_model(args: argparse.Namespace) -> str | None:
    """The model named by the options, else the first one the server lists."""
    named = getattr(args, "served_model", None) or getattr(args, "model", None)
    if named:
        return named
    try:
        with httpx.Client(trust_env=False, timeout=5.0) as client:
            data = client.get(args.base_url.rstrip("/") + "/v1/models").json().get("data")
        return data[0]["id"] if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def _send(requests: list[Request], args: argparse.Namespace, base_url: str, tags: dict,
          bias: dict | None = None, observer=None) -> int:
    settings = settings_from(args, base_url)
    settings.concurrency = args.concurrency or 1
    settings.tags = tags
    if bias:
        settings.logit_bias = bias
    first = next((r.send_at_s for r in requests if r.send_at_s is not None), None)
    if first:                           # resuming an open loop: the first one now
        requests = [Request(**{**r.__dict__, "send_at_s": r.send_at_s - first})
                    for r in requests]
    try:
        return run_requests(requests, settings, args.output, observer=observer,
                            progress=None if args.quiet else sys.stderr)
    except RequestFailed as exc:
        raise CLIError(f"{exc}; every line is kept in {args.output}, rerun with --resume to "
                       f"send the rest") from None


def run_replay(args: argparse.Namespace) -> int:
    """Replay the workload (see the module docstring)."""
    if args.local_engine and args.base_url:
        raise CLIError("--base-url and --local-engine exclude each other")
    done = check_output(args.output, args.resume)
    requests, workload, timing = replay_requests(args)
    todo = [r for r in requests if r.key not in done]
    if not todo:
        print(f"measure: nothing to do, {args.output} has every request", file=sys.stderr)
        return 0
    options = {"max_tokens": args.max_tokens, "timeout_s": args.timeout,
               "include_usage": args.include_usage, "config": args.config}
    if args.local_engine:
        from pipeline.measure.llamacpp.replay import local_replay
        return local_replay(args, todo, workload, timing, options, _send)
    if not args.base_url.startswith(("http://", "https://")):
        raise CLIError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    model = _served_model(args)
    before = (run_probe(args.base_url, dict(args.logit_bias), args.timeout, model)
              if args.speed_probe else None)
    document = write_sidecar(args.output, {
        "what": "a replay measured with python -m pipeline measure",
        "engine": {"name": args.engine, "base_url": args.base_url},
        "served_model": model,
        "hardware": {"described": args.hardware, "client_machine": machine()},
        "options": options, "workload": workload, "timing": timing.describe(),
        "engine_model": _engine_model(args)}, args.resume)
    if done:
        print(f"measure: resuming, {len(done)} answered line(s) already in {args.output}",
              file=sys.stderr)
    def run() -> int:
        return _send(todo, args, args.base_url, {"session": len(document["sessions"]) - 1})
    written = (probed(args.output, args.base_url, before, run,
                      logit_bias=dict(args.logit_bias), timeout_s=args.timeout, model=model)
               if before is not None else run())
    print(f"measure: wrote {written} line(s) to {args.output} (sidecar "
          f"{provenance_path(args.output)})", file=sys.stderr)
    return 0


def _engine_model(args: argparse.Namespace) -> dict | None:
    """SchedulerConfig fields given on the command line (None when none is)."""
    fields = {"max_num_seqs": args.max_num_seqs,
              "max_num_batched_tokens": args.max_num_batched_tokens}
    given = {k: v for k, v in fields.items() if v}
    return given or None
