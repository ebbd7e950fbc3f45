"""Send a workload's requests, write one JSON line per answered request, resume after a failure.

Each line has the lab's fields (``config, pass, doc, doc_tokens, ttft_ms, total_ms``), where
the request sits in the workload (``repeat``, ``step``), and whatever the server reported
(``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``server_timings``) plus any
fields an ``Observer`` adds (an engine's log, for instance), and the timing: ``send_s`` and
``end_s`` (seconds after the run's start, monotonic clock), ``send_unix`` (wall clock),
``max_tokens``, and for trace requests ``scheduled_s``, ``prefix_block`` and ``prefix_ids``
(the prompt's block structure, which ``fit`` simulates). Lines are appended and flushed one
request at a time, so a failure keeps everything written before it (the file is opened at
the first line: a run that sends nothing leaves no file); ``done_keys`` reads a file back so
that a rerun skips what is done.

Requests go out in workload order, ``concurrency`` at a time (1 by default: the next request
is sent when the previous answer is complete), or, open loop, each at its ``send_at_s``.
A failure (refused, timeout, HTTP error, malformed stream) is a line of its own with
``error`` and ``error_kind`` and one line on stderr; the run goes on (a refused connection
stops new requests: the server is gone), and ``RequestFailed`` at the end counts them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

import httpx

from pipeline.base.arguments import plural
from pipeline.measure.client import RequestFailed, StreamResult, stream_completion
from pipeline.measure.workload import Request

__all__ = ["Observer", "RunSettings", "done_keys", "failure_record", "record", "run_requests",
           "settings_from"]


class Observer(Protocol):
    """Engine-side evidence for each request (used only at concurrency 1)."""

    def before(self, request: Request) -> None: ...

    def after(self, request: Request, result: StreamResult) -> dict: ...


@dataclass
class RunSettings:
    """How to talk to the server."""

    base_url: str
    timeout_s: float = 300.0
    concurrency: int = 1
    max_tokens: int = 16
    temperature: float = 0.0
    model: str | None = None
    logit_bias: dict[str, float] = field(default_factory=dict)
    include_usage: bool = False
    #: fields added to every line (the sidecar session a line belongs to, for instance)
    tags: dict = field(default_factory=dict)
    #: send nothing more after a failure (when later requests depend on the cache state)
    stop_on_failure: bool = False

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/completions"

    def payload(self, request: Request) -> dict:
        prompt = list(request.prompt) if isinstance(request.prompt, tuple) else request.prompt
        body: dict = {"prompt": prompt, "max_tokens": request.max_tokens or self.max_tokens,
                      "temperature": self.temperature}
        if self.model:
            body["model"] = self.model
        if self.logit_bias:
            body["logit_bias"] = dict(self.logit_bias)
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


def settings_from(args: argparse.Namespace, base_url: str) -> RunSettings:
    """RunSettings from ``measure``'s options, for the server at ``base_url``."""
    return RunSettings(base_url=base_url, timeout_s=args.timeout, concurrency=args.concurrency,
                       max_tokens=args.max_tokens, model=args.served_model,
                       logit_bias=dict(args.logit_bias), include_usage=args.include_usage)


def _place(request: Request) -> dict:
    """Where a request sits in the workload, and its prompt's size and structure."""
    line = {"config": request.config, "pass": request.pass_name, "doc": request.doc,
            "doc_tokens": request.doc_tokens, "repeat": request.repeat, "step": request.step}
    if request.prefix_ids:
        line.update(prefix_block=request.prefix_block, prefix_ids=list(request.prefix_ids),
                    input_tokens=request.input_tokens or request.doc_tokens)
    if request.send_at_s is not None:
        line["scheduled_s"] = round(request.send_at_s, 6)
    return line


def record(request: Request, result: StreamResult, extra: dict | None = None,
           sent: dict | None = None) -> dict:
    """The JSON line of one answered request (``sent``: send_s, send_unix, max_tokens)."""
    line = {"config": request.config, "pass": request.pass_name, "doc": request.doc,
            "doc_tokens": request.doc_tokens, "ttft_ms": round(result.ttft_ms, 3),
            "total_ms": round(result.total_ms, 3), "repeat": request.repeat,
            "step": request.step, **result.reported()}
    if sent:
        line.update(sent, end_s=round(sent["send_s"] + result.total_ms / 1000.0, 6))
    line.update({k: v for k, v in _place(request).items() if k not in line})
    line.update(extra or {})
    return line


def failure_record(request: Request, failure: RequestFailed, sent: dict | None = None) -> dict:
    """The JSON line of a request that failed: its place, ``error`` and ``error_kind``."""
    return {**_place(request), **(sent or {}), "error": str(failure),
            "error_kind": failure.kind}


def done_keys(path: Path) -> set[tuple]:
    """The (config, repeat, pass, step) of every answered line in ``path`` (empty if absent;
    failure lines do not count, so ``--resume`` sends those requests again).

    A line that is not a JSON object with those fields raises ValueError("path:line: ...").
    """
    keys: set[tuple] = set()
    if not path.exists():
        return keys
    with path.open(encoding="utf-8") as handle:
        for lineno, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
                key = (line["config"], line.get("repeat", 0), line["pass"], line["step"])
                if "error" not in line:            # a failed request is sent again
                    keys.add(key)
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{path}:{lineno}: not a measure line (JSON with config, "
                                 f"pass, step); cannot resume from it") from None
    return keys


def _progress(done: int, total: int, request: Request, result: StreamResult,
              stream: TextIO) -> None:
    print(f"measure: [{done}/{total}] {request.config} {request.pass_name} doc {request.doc}: "
          f"TTFT {result.ttft_ms:.1f} ms, total {result.total_ms:.1f} ms", file=stream,
          flush=True)


def _label(request: Request) -> str:
    return f"{request.config} {request.pass_name} doc {request.doc}"


async def _run(requests: Sequence[Request], settings: RunSettings, out: TextIO,
               observer: Observer | None, progress: TextIO | None,
               open_loop: bool) -> tuple[int, list[str]]:
    written = 0
    failures: list[str] = []
    refused = False
    lock = asyncio.Lock()

    async def one(client: httpx.AsyncClient, request: Request) -> None:
        nonlocal written, refused
        if observer is not None:
            observer.before(request)
        sent = {"send_s": round(time.perf_counter() - start, 6),
                "send_unix": round(time.time(), 6),
                "max_tokens": request.max_tokens or settings.max_tokens}
        try:
            result = await stream_completion(client, settings.url, settings.payload(request),
                                             settings.timeout_s)
        except RequestFailed as exc:
            line = failure_record(request, exc, sent)
            failures.append(f"{_label(request)}: {exc}")
            refused = refused or exc.kind == "refused" or settings.stop_on_failure
            print(f"measure: failed: {_label(request)}: {exc}", file=sys.stderr, flush=True)
        else:
            line = record(request, result,
                          observer.after(request, result) if observer is not None else None, sent)
        line.update(settings.tags)
        async with lock:
            out.write(json.dumps(line) + "\n")
            out.flush()
            if "error" not in line:
                written += 1
                if progress is not None:
                    _progress(written, len(requests), request, result, progress)

    limits = httpx.Limits(max_connections=None if open_loop else settings.concurrency)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        start = time.perf_counter()        # the run's clock: send_s, end_s, send_at_s
        if open_loop:                      # send at the planned times, whatever is in flight
            tasks = []
            for request in requests:
                delay = start + (request.send_at_s or 0.0) - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if refused:
                    break
                tasks.append(asyncio.create_task(one(client, request)))
            await asyncio.gather(*tasks)
        else:
            queue: asyncio.Queue[Request] = asyncio.Queue()
            for request in requests:
                queue.put_nowait(request)

            async def worker() -> None:
                while not refused and not queue.empty():
                    await one(client, queue.get_nowait())

            await asyncio.gather(*(worker() for _ in range(settings.concurrency)))
    return written, failures


class _AppendOnFirstWrite:
    """A text file opened for appending only when the first line is written."""

    def __init__(self, path: Path) -> None:
        self.path, self.handle = path, None

    def write(self, text: str) -> None:
        if self.handle is None:
            self.handle = self.path.open("a", encoding="utf-8")
        self.handle.write(text)

    def flush(self) -> None:
        if self.handle is not None:
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def run_requests(requests: Sequence[Request], settings: RunSettings, output: Path,
                 observer: Observer | None = None, progress: TextIO | None = sys.stderr) -> int:
    """Send ``requests`` and append their lines to ``output``; return the lines answered.

    Requests with ``send_at_s`` go out at those times (open loop), others ``concurrency`` at
    a time. ``observer`` needs one request at a time (ValueError otherwise). Every failure
    is a line of its own (and one on stderr) and the run goes on, except that a refused
    connection (or any failure, with ``stop_on_failure``) stops new requests; at the end
    RequestFailed says how many failed, and when ``output`` cannot be written.
    """
    open_loop = any(r.send_at_s is not None for r in requests)
    if observer is not None and (settings.concurrency != 1 or open_loop):
        raise ValueError("an observer needs one request at a time (concurrency 1)")
    out = _AppendOnFirstWrite(output)
    try:
        written, failures = asyncio.run(_run(requests, settings, out, observer, progress,
                                             open_loop))
    except OSError as exc:
        raise RequestFailed(f"{output}: cannot write a line ({exc.strerror or exc})") from None
    finally:
        out.close()
    if failures:
        unsent = len(requests) - written - len(failures)
        raise RequestFailed(f"{plural(len(failures), 'request')} of {len(requests)} failed "
                            f"(first: {failures[0]}); {written} answered"
                            + (f", {unsent} not sent" if unsent else ""))
    return written
