"""``measure --local-engine --trace FILE``: replay traffic on a fresh local llama.cpp server.

One server (llama-cpp-python 0.3.36, the project's tiny model, no RAM prompt cache: only the
live context is reused) per invocation; ``--resume`` starts a new one and sends the missing
requests (a new sidecar session, simulated by ``fit`` from an empty cache). At one request
at a time (closed loop, ``--concurrency 1``) the server's log adds its own account of each
request (``server_reused_tokens`` and so on, see ``engine.LogObserver``). The sidecar's
``engine_model`` is how ``fit`` simulates this engine: one sequence at a time
(``max_num_seqs`` 1), the prompt in chunks of llama-cpp-python's ``n_batch`` (512) after
the prefix it shares token by token with the live context (block size 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from pipeline.base.errors import CLIError
from pipeline.measure.llamacpp.engine import LlamaServer, LogObserver
from pipeline.measure.llamacpp.gguf_model import ModelShape, vocabulary
from pipeline.measure.llamacpp.local import FORCED_BIAS, N_CTX, prepare_model, server_context
from pipeline.measure.output import provenance_path
from pipeline.measure.probe import PROBE_TOKENS, probed, run_probe
from pipeline.measure.sidecar import machine, sha256, write_sidecar
from pipeline.measure.traffic import Timing
from pipeline.measure.workload import FORCED_WORD, Request

__all__ = ["local_replay", "kv_bytes_per_token"]

#: llama.cpp matches prompts token by token: the engine model's block size is 1
BLOCK = 1


def kv_bytes_per_token(shape: ModelShape) -> int:
    """KV bytes per token of llama.cpp's default f16 cache: layers x (K, V) x KV width x 2."""
    return shape.layers * 2 * shape.kv_heads * shape.head_dim * 2


def local_replay(args: argparse.Namespace, todo: list[Request], workload: dict,
                 timing: Timing, options: dict, send: Callable) -> int:
    """Start the server, write the sidecar, send ``todo``, stop the server."""
    longest = max(r.doc_tokens + 1 for r in todo)
    if getattr(args, "speed_probe", False):
        longest = max(longest, PROBE_TOKENS + 1)
    most = max((r.max_tokens or args.max_tokens) for r in todo)
    if longest + most > N_CTX:
        raise CLIError(f"a prompt of {longest} tokens + {most} generated exceeds the tiny "
                       f"model's context of {N_CTX}")
    if any(isinstance(r.prompt, tuple) for r in todo):
        raise CLIError("--local-engine sends text prompts (llama-cpp-python's server takes no "
                       "token ids): drop --token-ids / use a Mooncake trace")
    work, version, shape, model = prepare_model(args.work_dir)
    n_ctx = server_context(longest, most)
    vocab = vocabulary()
    bias = {str(vocab.words[FORCED_WORD]): FORCED_BIAS}
    log = work / f"server-{timing.label}.log"
    nice = getattr(args, "nice", None)
    if nice is not None and nice < 0 and os.geteuid() != 0:
        raise CLIError(f"--nice {nice}: a negative niceness needs root")
    with LlamaServer(model, log, None, n_ctx, args.threads, nice=nice) as server:
        probe = getattr(args, "speed_probe", False)
        before = run_probe(server.base_url, bias, args.timeout) if probe else None
        document = write_sidecar(args.output, {
            "what": "a replay measured on llama.cpp (llama-cpp-python's server, one request at "
                    "a time) with the project's tiny random-weight model on this machine",
            "engine": {"name": "llama.cpp", "package": "llama-cpp-python[server]",
                       "version": version, "server": " ".join(server.command()[1:])
                       .replace(str(model), "MODEL").replace(str(server.port), "PORT")},
            "served_model": "kvlab-tiny-random",
            "model": {**shape.describe(), "file_sha256": sha256(model)},
            "kv_bytes_per_token": kv_bytes_per_token(shape),
            "hardware": {"described": "this machine's CPU (llama.cpp CPU build, "
                                      f"{args.threads} thread(s))", **machine()},
            "options": {**options, "threads": args.threads, "n_ctx": n_ctx, "nice": nice,
                        "logit_bias": f"+{FORCED_BIAS:g} on {FORCED_WORD!r}"},
            "workload": workload, "timing": timing.describe(),
            "engine_model": {"max_num_seqs": 1, "max_num_batched_tokens": 512,
                             "block_size": BLOCK, "num_gpu_blocks": n_ctx // BLOCK + 1,
                             "max_model_len": n_ctx, "chunked_prefill": True,
                             "note": "llama.cpp reuses the longest common token prefix with "
                                     "the live context: a prefix cache of 1-token blocks"}},
            args.resume)
        session = len(document["sessions"]) - 1
        if not args.quiet:
            print(f"measure: llama.cpp server on {server.base_url} (session {session}), "
                  f"{len(todo)} request(s), timing {timing.label}", file=sys.stderr)
        one_at_a_time = not timing.open_loop and timing.concurrency == 1
        def run() -> int:
            return send(todo, args, server.base_url, {"session": session}, bias,
                        LogObserver(log) if one_at_a_time else None)
        written = (probed(args.output, server.base_url, before, run, logit_bias=bias,
                          timeout_s=args.timeout) if before is not None else run())
    print(f"measure: wrote {written} line(s) to {args.output} (sidecar "
          f"{provenance_path(args.output)})", file=sys.stderr)
    return 0
