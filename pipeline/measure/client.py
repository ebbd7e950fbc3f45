"""One streaming completion over HTTP (httpx), timed client-side.

``stream_completion`` POSTs an OpenAI-style ``/v1/completions`` request with ``stream: true``
and reads the server-sent events: ``data: {json}`` lines, ``data: [DONE]`` at the end, comment
lines (``: ping``) and other SSE fields ignored. TTFT is the time from just before the request
is sent to the first event carrying generated text; total is the time to ``[DONE]``. Both use
``time.perf_counter`` (monotonic). Whatever the server reports is kept: ``usage``
(prompt / completion tokens, ``prompt_tokens_details.cached_tokens``: vLLM, SGLang), a
``timings`` object (llama.cpp's own server sends one; its ``cache_n`` is the cached prompt
tokens) and SGLang's ``meta_info.cached_tokens``.

Every failure is a ``RequestFailed`` whose message is one line: refused connection, timeout,
HTTP status (with the start of the body), an error event in the stream, or a malformed stream
(not JSON, no text before ``[DONE]``, or no ``[DONE]`` at all).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

__all__ = ["RequestFailed", "StreamResult", "parse_event", "stream_completion"]


class RequestFailed(Exception):
    """A request that produced no measurement; the message is one line, ``kind`` one of
    refused, timeout, http, malformed, error-event."""

    def __init__(self, message: str, kind: str = "malformed") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class StreamResult:
    """What one streamed completion measured and what the server reported."""

    ttft_ms: float
    total_ms: float
    text: str
    chunks: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    server_timings: dict | None = field(default=None)

    def reported(self) -> dict:
        """The server-reported fields that are present, for the JSON line."""
        fields = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                  "cached_tokens": self.cached_tokens, "server_timings": self.server_timings}
        return {name: value for name, value in fields.items() if value is not None}


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_event(line: str) -> dict | str | None:
    """One SSE line: the decoded ``data`` object, ``"[DONE]"``, or None for anything else
    (blank lines, comments, ``event:``/``id:`` fields). RequestFailed if the data is not a
    JSON object."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return data
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise RequestFailed(f"malformed stream: data is not JSON: {_one_line(data, 80)!r}") from None
    if not isinstance(event, dict):
        raise RequestFailed(f"malformed stream: data is not a JSON object: {_one_line(data, 80)!r}")
    return event


def _event_text(event: dict) -> str:
    """Generated text of a completions (``text``) or chat (``delta.content``) event."""
    choices = event.get("choices")
    if not isinstance(choices, list):
        return ""
    parts = []
    for choice in choices:
        if isinstance(choice, dict):
            text = choice.get("text")
            if text is None and isinstance(choice.get("delta"), dict):
                text = choice["delta"].get("content")
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _absorb_report(result: StreamResult, event: dict) -> None:
    """Copy ``usage`` and ``timings`` from an event into ``result``."""
    usage = event.get("usage")
    if isinstance(usage, dict):
        result.prompt_tokens = _int_or_none(usage.get("prompt_tokens")) or result.prompt_tokens
        result.completion_tokens = (_int_or_none(usage.get("completion_tokens"))
                                    or result.completion_tokens)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and _int_or_none(details.get("cached_tokens")) is not None:
            result.cached_tokens = details["cached_tokens"]
    if isinstance(event.get("timings"), dict):
        result.server_timings = event["timings"]
        cached = _int_or_none(event["timings"].get("cache_n"))    # llama.cpp's llama-server
        if cached is not None and result.cached_tokens is None:
            result.cached_tokens = cached
    meta = event.get("meta_info")                                 # SGLang's native fields
    if isinstance(meta, dict) and _int_or_none(meta.get("cached_tokens")) is not None:
        result.cached_tokens = meta["cached_tokens"]


async def stream_completion(client: httpx.AsyncClient, url: str, payload: dict,
                            timeout_s: float) -> StreamResult:
    """POST ``payload`` (``stream`` forced on) to ``url`` and time the streamed answer."""
    body = {**payload, "stream": True}
    first: float | None = None
    result = StreamResult(ttft_ms=0.0, total_ms=0.0, text="", chunks=0)
    text: list[str] = []
    start = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body, timeout=timeout_s) as response:
            if response.status_code != 200:
                detail = _one_line((await response.aread()).decode("utf-8", "replace"))
                raise RequestFailed(f"HTTP {response.status_code} from {url}: {detail or '(empty body)'}",
                                    "http")
            done = False
            async for line in response.aiter_lines():
                event = parse_event(line)
                if event is None:
                    continue
                if event == "[DONE]":
                    done = True
                    break
                if "error" in event and not event.get("choices"):
                    raise RequestFailed(f"error event in the stream from {url}: "
                                        f"{_one_line(json.dumps(event['error']))}",
                                        "error-event")
                result.chunks += 1
                piece = _event_text(event)
                if piece and first is None:
                    first = time.perf_counter()
                text.append(piece)
                _absorb_report(result, event)
    except httpx.ConnectError as exc:
        raise RequestFailed(f"cannot connect to {url}: {_one_line(str(exc)) or 'refused'}",
                            "refused") from None
    except httpx.TimeoutException:
        raise RequestFailed(f"no complete answer from {url} within {timeout_s:g} s (timeout)",
                            "timeout") from None
    except httpx.HTTPError as exc:
        raise RequestFailed(f"HTTP failure talking to {url}: {type(exc).__name__}: "
                            f"{_one_line(str(exc))}", "http") from None
    end = time.perf_counter()
    if not done:
        raise RequestFailed(f"malformed stream from {url}: it ended without 'data: [DONE]' "
                            f"after {result.chunks} event(s)")
    if first is None:
        raise RequestFailed(f"malformed stream from {url}: no generated text before [DONE] "
                            f"({result.chunks} event(s))")
    result.ttft_ms = (first - start) * 1000.0
    result.total_ms = (end - start) * 1000.0
    result.text = "".join(text)
    return result
