"""Send a workload's requests, write one JSON line per answered request, resume after a failure.

Each line has the lab's fields (``config, pass, doc, doc_tokens, ttft_ms, total_ms``), where
the request sits in the workload (``repeat``, ``step``), and whatever the server reported
(``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``server_timings``) plus any
fields an ``Observer`` adds (an engine's log, for instance). Lines are appended and flushed
one request at a time, so a failure keeps everything written before it (the file is opened
at the first answer: a run that gets none leaves no file); ``done_keys`` reads a file back
so that a rerun skips what is done.

Requests go out in workload order, ``concurrency`` at a time (1 by default: the next request
is sent when the previous answer is complete). The first failure stops new requests; those
already in flight finish and are written, then ``RequestFailed`` says what happened and how
many lines the file holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

import httpx

from pipeline.measure.client import RequestFailed, StreamResult, stream_completion
from pipeline.measure.workload import Request

__all__ = ["Observer", "RunSettings", "done_keys", "record", "run_requests", "settings_from"]


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

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/completions"

    def payload(self, request: Request) -> dict:
        body: dict = {"prompt": request.prompt, "max_tokens": self.max_tokens,
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


def record(request: Request, result: StreamResult, extra: dict | None = None) -> dict:
    """The JSON line of one answered request."""
    line = {"config": request.config, "pass": request.pass_name, "doc": request.doc,
            "doc_tokens": request.doc_tokens, "ttft_ms": round(result.ttft_ms, 3),
            "total_ms": round(result.total_ms, 3), "repeat": request.repeat,
            "step": request.step, **result.reported()}
    line.update(extra or {})
    return line


def done_keys(path: Path) -> set[tuple]:
    """The (config, repeat, pass, step) of every line already in ``path`` (empty if absent).

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
                keys.add((line["config"], line.get("repeat", 0), line["pass"], line["step"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{path}:{lineno}: not a measure line (JSON with config, "
                                 f"pass, step); cannot resume from it") from None
    return keys


def _progress(done: int, total: int, request: Request, result: StreamResult,
              stream: TextIO) -> None:
    print(f"measure: [{done}/{total}] {request.config} {request.pass_name} doc {request.doc}: "
          f"TTFT {result.ttft_ms:.1f} ms, total {result.total_ms:.1f} ms", file=stream,
          flush=True)


async def _run(requests: Sequence[Request], settings: RunSettings, out: TextIO,
               observer: Observer | None, progress: TextIO | None) -> int:
    queue: asyncio.Queue[Request] = asyncio.Queue()
    for request in requests:
        queue.put_nowait(request)
    written = 0
    failures: list[str] = []
    lock = asyncio.Lock()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal written
        while not failures and not queue.empty():
            request = queue.get_nowait()
            if observer is not None:
                observer.before(request)
            try:
                result = await stream_completion(client, settings.url, settings.payload(request),
                                                 settings.timeout_s)
            except RequestFailed as exc:
                failures.append(f"{request.config} {request.pass_name} doc {request.doc}: {exc}")
                return
            extra = observer.after(request, result) if observer is not None else None
            async with lock:
                out.write(json.dumps(record(request, result, extra)) + "\n")
                out.flush()
                written += 1
                if progress is not None:
                    _progress(written, len(requests), request, result, progress)

    limits = httpx.Limits(max_connections=settings.concurrency)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        await asyncio.gather(*(worker(client) for _ in range(settings.concurrency)))
    if failures:
        raise RequestFailed(f"{failures[0]} ({written} of {len(requests)} request(s) written "
                            f"this run)")
    return written


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
    """Send ``requests`` and append their lines to ``output``; return the lines written.

    ``observer`` needs concurrency 1 (ValueError otherwise). RequestFailed on the first
    failure, after every finished request is written, and when ``output`` cannot be written.
    """
    if observer is not None and settings.concurrency != 1:
        raise ValueError("an observer needs concurrency 1")
    out = _AppendOnFirstWrite(output)
    try:
        return asyncio.run(_run(requests, settings, out, observer, progress))
    except OSError as exc:
        raise RequestFailed(f"{output}: cannot write a line ({exc.strerror or exc})") from None
    finally:
        out.close()
