"""Requests as engines see them: prompts, per-request output lengths, arrivals.

* Token-id JSONL (``--format tokens``), one request per line:
  ``{"prompt_token_ids": [...], "max_tokens": k, "arrival_step": s}``; optional
  ``arrival_time`` (seconds, for the time clock) and ``output_token_ids`` (the sampled
  tokens: the request then generates exactly those, so a later prompt re-sending them hits
  their blocks; ``max_tokens``, if given, must be at least their number). A line without
  ``max_tokens`` takes ``--output-tokens``.
* Mooncake JSONL (``--format mooncake``): ``timestamp`` (ms), ``input_length``,
  ``output_length`` (the request's ``max_tokens``), ``hash_ids`` (one prefix-chained id per
  512-token block). The engine's block size must divide 512: vLLM block b of a request is
  keyed by its 512-block's id and its offset inside it, which equal prefixes share.
* Either format may name each request's conversation (``session_id``, or ``chat_id`` with
  ``parent_chat_id``: ``pipeline.workloads.sessions``), which ``SimRequest.session`` keeps.

Bad lines raise ``TraceError`` naming ``file:line`` (timestamps going backwards,
``max_tokens`` < 1, empty prompts, negative token ids); nothing is returned then.
Arrival patterns for untimed traces (``with_arrivals``): ``--speed`` scales a trace's own
arrivals, ``--rate`` draws Poisson arrivals (seeded); ``--concurrency`` is a closed loop
(``pipeline.engine.loop``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from pipeline.engine.request import EngineRequests, SimRequest
from pipeline.base.errors import CLIError
from pipeline.workloads.sources import pattern_from_args
from pipeline.workloads import mooncake
from pipeline.workloads.jsonl import Field, TraceError, apply_checks, read_lines, \
    refuse_backwards, with_format_hint
from pipeline.workloads.sessions import SESSION_FIELDS, session_ids
from pipeline.workloads.tokens import splitmix64
from pipeline.workloads.workload import Workload

__all__ = ["FORMATS", "read_workload", "pattern_workload", "engine_requests", "with_arrivals",
           "TOKEN_FIELDS"]

FORMATS = ("tokens", "mooncake")
TOKEN_FIELDS = (Field("prompt_token_ids", "int list"), Field("max_tokens", "int"),
                Field("arrival_step", "int"), Field("arrival_time", "number"),
                Field("output_token_ids", "int list"))
_MOONCAKE_BLOCK = mooncake.MOONCAKE_BLOCK_SIZE


def _read_tokens(path: Path, default_max_tokens: int) -> EngineRequests:
    missing = pl.col("prompt_token_ids").is_null()
    prompt = pl.col("prompt_token_ids")
    outputs = pl.col("output_token_ids")
    checks = [
        (missing, "missing field 'prompt_token_ids'"),
        (prompt.list.len() == 0, "prompt_token_ids is empty"),
        (prompt.list.eval(pl.element().is_null()).list.any(), "non-integer prompt_token_ids"),
        (prompt.list.min() < 0, "negative token id in prompt_token_ids"),
        (pl.col("max_tokens") < 1, pl.format("max_tokens must be >= 1, got {}",
                                             pl.col("max_tokens"))),
        (outputs.is_not_null() & (outputs.list.len() == 0), "output_token_ids is empty"),
        (outputs.list.min() < 0, "negative token id in output_token_ids"),
        (outputs.is_not_null() & (pl.col("max_tokens") < outputs.list.len()),
         "max_tokens is smaller than the number of output_token_ids"),
        (pl.col("arrival_step") < 0, "arrival_step is negative"),
        (pl.col("arrival_time") < 0, "arrival_time is negative"),
    ]
    good, _ = apply_checks(read_lines(path, TOKEN_FIELDS + SESSION_FIELDS), checks, False)
    for column in ("arrival_step", "arrival_time"):
        refuse_backwards(good, column, path)
    lengths = good["prompt_token_ids"].list.len().to_numpy()
    flat = good["prompt_token_ids"].explode().to_numpy().astype(np.int64)
    prompts = np.split(flat, np.cumsum(lengths)[:-1])
    outs = good["output_token_ids"].to_list()
    max_tokens = good["max_tokens"].fill_null(default_max_tokens).to_list()
    steps = good["arrival_step"].to_list()
    times = good["arrival_time"].to_list()
    sessions = session_ids(good)
    requests = []
    for i, prompt_ids in enumerate(prompts):
        out = outs[i]
        requests.append(SimRequest(i, prompt_ids,
                                   len(out) if out is not None else int(max_tokens[i]),
                                   arrival_step=steps[i], arrival_s=times[i],
                                   output_token_ids=out, session=sessions[i]))
    timed = "steps" if steps and steps[0] is not None else (
        "seconds" if times and times[0] is not None else None)
    return EngineRequests(str(path), requests, good["line"].to_numpy(), timed)


def _read_mooncake(path: Path, block_size: int) -> EngineRequests:
    if _MOONCAKE_BLOCK % block_size:
        raise TraceError(f"{path}: --block-size {block_size} must divide Mooncake's "
                         f"{_MOONCAKE_BLOCK}-token blocks")
    checks = mooncake.line_checks(_MOONCAKE_BLOCK) + [
        (pl.col("output_length") < 1, pl.format("output_length must be >= 1, got {}",
                                                pl.col("output_length"))),
        (pl.col("timestamp") < 0, "timestamp is negative")]
    good, _ = apply_checks(read_lines(path, mooncake.FIELDS + SESSION_FIELDS), checks, False)
    refuse_backwards(good, "timestamp", path)
    per = _MOONCAKE_BLOCK // block_size
    lengths = good["input_length"].to_numpy().astype(np.int64)
    ids = good["hash_ids"].explode().to_numpy().astype(np.int64)
    id_start = np.cumsum(good["hash_ids"].list.len().to_numpy()) - good["hash_ids"].list.len()
    full = lengths // block_size                    # every request's keys in one pass
    key_start = np.cumsum(full) - full
    block = np.arange(int(full.sum()), dtype=np.int64) - np.repeat(key_start, full)
    raw = ids[np.repeat(id_start.to_numpy().astype(np.int64), full) + block // per] * per \
        + block % per
    with np.errstate(over="ignore"):
        keys = splitmix64(raw.view(np.uint64))
    outputs = good["output_length"].to_list()
    stamps = good["timestamp"].to_list()
    sessions = session_ids(good)
    requests = [SimRequest(i, range(length), int(outputs[i]),
                           arrival_s=float(stamps[i]) / 1000.0, prompt_keys=keys[a:a + f],
                           session=sessions[i])
                for i, (length, a, f) in enumerate(zip(lengths.tolist(), key_start.tolist(),
                                                       full.tolist()))]
    return EngineRequests(str(path), requests, good["line"].to_numpy(), "seconds")


def read_workload(path: str | Path, fmt: str, block_size: int,
                  default_max_tokens: int = 1) -> EngineRequests:
    """Read ``path`` in format ``fmt`` (see the module docstring)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")
    try:
        return (_read_tokens(path, default_max_tokens) if fmt == "tokens"
                else _read_mooncake(path, block_size))
    except TraceError as exc:
        raise with_format_hint(exc, path, fmt, "prompt_token_ids") from None


def engine_requests(workload: Workload, output_tokens: int,
                    label: str | None = None) -> EngineRequests:
    """The engine's requests from the one workload type's frames (any reader or pattern that
    gives block keys): each request's full blocks as chained keys (``prompt_keys``: the
    block keys mixed by ``splitmix64``), its prompt length, the output length the workload
    gives (else ``output_tokens``), and its timestamps as arrivals in seconds when every
    request has one. Sampled output tokens (``output_blocks``) are not carried: outputs are
    placeholders. ValueError for a workload of whole items (no block size)."""
    size = workload.block_size
    if size is None:
        raise ValueError("a workload of whole items has no blocks for the engine: give a "
                         "block size")
    blocks = workload.blocks.filter(pl.col("block_tokens") == size)
    keys = splitmix64(blocks["block_key"].to_numpy())
    count = workload.requests.height
    starts = np.concatenate(([0], np.cumsum(np.bincount(
        blocks["request"].to_numpy().astype(np.int64), minlength=count))))
    prompts = workload.requests["prompt_tokens"].to_list()
    outputs = ([output_tokens] * count if workload.output_tokens is None
               else np.asarray(workload.output_tokens).tolist())
    stamps = workload.requests["timestamp_ms"]
    timed = count > 0 and stamps.null_count() == 0
    arrivals = (stamps / 1000.0).to_list() if timed else [None] * count
    requests = [SimRequest(i, range(prompts[i]), int(outputs[i]), arrival_s=arrivals[i],
                           prompt_keys=keys[starts[i]:starts[i + 1]]) for i in range(count)]
    lines = workload.lines if workload.lines.size else None
    return EngineRequests(workload.label if label is None else label, requests, lines,
                          "seconds" if timed else None)


def pattern_workload(args: argparse.Namespace) -> EngineRequests:
    """The ``--pattern`` options' requests (``pipeline.workloads.sources``): prompts as chained
    block keys of ``args.block_size`` (no token ids needed), ``args.output_tokens`` each;
    a bad pattern option is a one-line CLIError."""
    try:
        pattern = pattern_from_args(args)
    except ValueError as exc:
        raise CLIError(f"--pattern {args.pattern}: {exc}") from None
    return engine_requests(pattern.workload(args.block_size), args.output_tokens,
                           f"--pattern {args.pattern}")


def with_arrivals(requests: list[SimRequest], clock: str, *, speed: float | None = None,
                  rate: float | None = None, seed: int = 0) -> None:
    """Set arrivals in place: ``rate`` R draws Poisson arrivals (R per second on the time
    clock, R per step on the step clock; seeded), ``speed`` X divides the trace's own
    arrivals by X (steps rounded down)."""
    if rate is not None:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=len(requests))
        when = np.cumsum(gaps) - gaps[0] if len(requests) else gaps
        for request, t in zip(requests, when.tolist()):
            if clock == "time":
                request.arrival_s = t
            else:
                request.arrival_step = int(t)
    if speed is not None:
        for request in requests:
            if request.arrival_s is not None:
                request.arrival_s = request.arrival_s / speed
            if request.arrival_step is not None:
                request.arrival_step = int(request.arrival_step // speed)
