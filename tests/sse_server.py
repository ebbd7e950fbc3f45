"""A small OpenAI-style streaming server for the harness's tests (127.0.0.1 only).

Each request's behaviour is chosen by the document its prompt starts with (the first word of
document d is ``WORDS[d]``): ``modes[d]`` is one of ok, slow (first token after ``delay_s``),
http500, not_json, no_done, no_text, error_event, hang (never answers). Every request body is
kept in ``bodies``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.measure.workload import WORD_INDEX


class _Handler(BaseHTTPRequestHandler):
    server: "SSEServer"

    def log_message(self, *args: object) -> None:     # keep test output quiet
        pass

    def _send_lines(self, lines: list[str], delay_first: float = 0.0) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": ping\n\n")
        self.wfile.flush()
        for index, line in enumerate(lines):
            if index == 0 and delay_first:
                time.sleep(delay_first)
            self.wfile.write(line.encode() + b"\n\n")
            self.wfile.flush()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        prompt = body["prompt"]               # text (a document first) or token ids
        doc = WORD_INDEX.get(prompt.split(" ")[0], -1) if isinstance(prompt, str) else -1
        mode = self.server.modes.get(doc, "ok")
        chunk = lambda text: "data: " + json.dumps({"choices": [{"text": text, "index": 0}]})  # noqa: E731
        final = "data: " + json.dumps({
            "choices": [{"text": "", "index": 0, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2,
                      "prompt_tokens_details": {"cached_tokens": 5}},
            "timings": {"prompt_n": 2, "prompt_ms": 1.5}})
        if mode == "http500":
            self.send_response(500)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"internal\nboom")
        elif mode == "hang":
            time.sleep(self.server.delay_s)
        elif mode == "not_json":
            self._send_lines([chunk(" a"), "data: {oops"])
        elif mode == "no_done":
            self._send_lines([chunk(" a"), chunk(" b")])
        elif mode == "no_text":
            self._send_lines([chunk(""), "data: [DONE]"])
        elif mode == "error_event":
            self._send_lines(['data: {"error": {"message": "context overflow"}}', "data: [DONE]"])
        else:
            delay = self.server.delay_s if mode == "slow" else 0.0
            self._send_lines([chunk(" ppp"), chunk(" ppp"), final, "data: [DONE]"],
                             delay_first=delay)


class SSEServer(ThreadingHTTPServer):
    """Start with ``with SSEServer() as server:``; ``server.base_url`` to talk to it."""

    daemon_threads = True

    def __init__(self, modes: dict[int, str] | None = None, delay_s: float = 0.05) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.modes = dict(modes or {})
        self.delay_s = delay_s
        self.bodies: list[dict] = []
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, per server
        self._thread = threading.Thread(target=self.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> "SSEServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
