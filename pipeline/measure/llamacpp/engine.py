"""llama-cpp-python's OpenAI-compatible server on this machine: install, start, observe, stop.

* ``ensure_installed`` runs ``scripts/ensure_llamacpp.sh`` when ``llama_cpp`` 0.3.36 is not
  importable (a cached wheel, or a ~5 minute build).
* ``LlamaServer`` starts ``python -m llama_cpp.server`` on 127.0.0.1 only, with the RAM prompt
  cache (``--cache true --cache_type ram --cache_size BYTES``) or none, and
  ``--interrupt_requests false`` (otherwise a queued request cuts the running stream short);
  it waits until ``/v1/models`` answers and stops the server by its own PID.
* ``LogObserver`` reads what the verbose server logs for each request (``Llama._create_completion:
  cache hit|miss``, ``Llama.generate: N prefix-match hit, remaining M prompt tokens to eval``,
  llama.cpp's ``prompt eval time``) and turns it into fields of the JSON line, including the
  tier the engine itself says served the request.
* ``measure_state_size`` fits ``llama_state_get_size`` against the context length in-process.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from pipeline.base.config import ROOT
from pipeline.base.errors import CLIError
from pipeline.measure.client import StreamResult
from pipeline.components.llamacpp_cache import StateSize
from pipeline.measure.workload import Request

__all__ = ["LLAMACPP_VERSION", "LlamaServer", "LogObserver", "ensure_installed",
           "installed_version", "measure_state_size", "parse_request_log"]

LLAMACPP_VERSION = "0.3.36"
ENSURE_SCRIPT = ROOT / "scripts" / "ensure_llamacpp.sh"

_CACHE_LOOKUP = re.compile(r"Llama\._create_completion: cache (hit|miss)")
_PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_FULL_HIT = "Llama.generate: full prompt already cached"
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def installed_version() -> str | None:
    """The importable llama_cpp's version, or None."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return getattr(llama_cpp, "__version__", None)


def ensure_installed() -> str:
    """Make llama-cpp-python 0.3.36 importable (running the ensure script); its version."""
    if installed_version() == LLAMACPP_VERSION:
        return LLAMACPP_VERSION
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        raise CLIError(f"llama-cpp-python {LLAMACPP_VERSION} is not importable and this is not "
                       f"the project's .venv: install it with scripts/ensure_llamacpp.sh")
    print("measure: installing llama-cpp-python (scripts/ensure_llamacpp.sh)", file=sys.stderr)
    done = subprocess.run([str(ENSURE_SCRIPT)], cwd=ROOT, check=False)
    if done.returncode != 0:
        raise CLIError(f"scripts/ensure_llamacpp.sh failed (exit {done.returncode})")
    import importlib
    importlib.invalidate_caches()
    version = installed_version()
    if version != LLAMACPP_VERSION:
        raise CLIError(f"llama-cpp-python {LLAMACPP_VERSION} still not importable after "
                       f"scripts/ensure_llamacpp.sh (found {version})")
    return version


def measure_state_size(model: Path, n_ctx: int, token_ids: list[int],
                       lengths: tuple[int, int, int] = (32, 64, 160)) -> StateSize:
    """Fit ``llama_state_get_size`` = fixed + per_token * tokens on this model, in-process.

    ``token_ids``: any valid ids (at least ``max(lengths)``). The third length checks the fit.
    """
    from llama_cpp import Llama

    llm = Llama(model_path=str(model), n_ctx=n_ctx, n_threads=2, verbose=False)
    try:
        sizes = []
        for length in lengths:
            llm.reset()
            llm.eval(token_ids[:length])
            sizes.append(llm.save_state().llama_state_size)
    finally:
        llm.close()
    (n0, n1, n2), (s0, s1, s2) = lengths, sizes
    per_token, rest = divmod(s1 - s0, n1 - n0)
    fit = StateSize(s0 - per_token * n0, per_token)
    if rest or fit(n2) != s2:
        raise CLIError(f"llama_state_get_size is not linear in the tokens held: "
                       f"{dict(zip(lengths, sizes))}")
    return fit


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LlamaServer:
    """One ``llama_cpp.server`` process; use as a context manager (start ... stop)."""

    def __init__(self, model: Path, log_path: Path, cache_bytes: int | None,
                 n_ctx: int = 8192, threads: int = 2, port: int | None = None,
                 nice: int | None = None) -> None:
        self.model, self.log_path, self.cache_bytes = model, log_path, cache_bytes
        self.n_ctx, self.threads, self.nice = n_ctx, threads, nice
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The server's command line."""
        cache = (["--cache", "false"] if self.cache_bytes is None else
                 ["--cache", "true", "--cache_type", "ram", "--cache_size", str(self.cache_bytes)])
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                *cache, "--interrupt_requests", "false", "--verbose", "true"]

    def start(self, ready_timeout_s: float = 120.0) -> None:
        """Start the server and wait until it answers; CLIError (with its log) otherwise."""
        with self.log_path.open("ab") as log:
            nice = self.nice
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                # every thread of the server inherits the niceness set before exec
                preexec_fn=None if nice is None else (lambda: os.nice(nice)))
        deadline = time.monotonic() + ready_timeout_s
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise CLIError(f"llama_cpp.server exited with status {self.process.returncode}"
                                   f" before it was ready: {self._log_tail()}")
                try:
                    if client.get(self.base_url + "/v1/models").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise CLIError(f"llama_cpp.server not ready within {ready_timeout_s:g} s: "
                       f"{self._log_tail()}")

    def stop(self) -> None:
        """Terminate the server by its PID (SIGTERM, then SIGKILL after 10 s) and reap it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def __enter__(self) -> "LlamaServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_request_log(text: str) -> dict:
    """The engine's own account of one request, from its verbose log.

    Fields (present when logged): ``server_lookup`` (``hit``/``miss``: the RAM cache
    lookup), ``server_reused_tokens`` and ``server_evaluated_tokens`` (prompt tokens taken
    from the context / evaluated), ``server_prompt_eval_ms``, and ``server_tier``: ``cpu``
    when a RAM state was loaded, ``gpu`` when at least half the prompt came from the live
    context, else ``miss``.
    """
    fields: dict = {}
    lookup = _CACHE_LOOKUP.findall(text)
    if lookup:
        fields["server_lookup"] = lookup[-1]
    prefix = _PREFIX_HIT.findall(text)
    if prefix:
        reused, remaining = map(int, prefix[-1])
        fields["server_reused_tokens"], fields["server_evaluated_tokens"] = reused, remaining
    elif _FULL_HIT in text:
        fields["server_evaluated_tokens"] = 0
    evals = _PROMPT_EVAL.findall(text)
    if evals:
        fields["server_prompt_eval_ms"] = float(evals[-1][0])
        fields.setdefault("server_evaluated_tokens", int(evals[-1][1]))
    reused = fields.get("server_reused_tokens", 0)
    evaluated = fields.get("server_evaluated_tokens")
    if _FULL_HIT in text:
        tier = "gpu"
    elif evaluated is None:
        tier = None
    elif reused < evaluated:
        tier = "miss"
    else:
        tier = "cpu" if fields.get("server_lookup") == "hit" else "gpu"
    if tier is not None:
        fields["server_tier"] = tier
    return fields


class LogObserver:
    """Adds ``parse_request_log`` fields for each request (the server must run verbose)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.offset = 0

    def before(self, request: Request) -> None:
        self.offset = self.log_path.stat().st_size if self.log_path.exists() else 0

    def after(self, request: Request, result: StreamResult) -> dict:
        with self.log_path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode("utf-8", errors="replace")
        return parse_request_log(text)
