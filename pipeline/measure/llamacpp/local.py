"""``python -m pipeline measure --local-engine``: the whole llama.cpp measurement in one command.

Steps: make llama-cpp-python 0.3.36 importable (``scripts/ensure_llamacpp.sh``), write the
tiny GGUF model into the work folder, fit the engine's state size, then for every
``--ram-cache`` config and repeat start a fresh server (no RAM cache for DOCS = 0, else
``--cache_size`` = DOCS x one request's state bytes), send the lab's workload through the
harness with the server's log observed, and stop it. Writes OUTPUT (JSON lines) and
OUTPUT's ``.provenance.json`` (engine version, model shape, machine, date, command,
capacities), then prints the predicted vs measured tiers.

``--resume`` keeps every line: a (config, repeat) already complete is skipped; one cut short
is continued on a fresh server after replaying its finished requests unrecorded, so that the
caches are in the state an uninterrupted run would have left.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

import polars as pl

from kvlab.summarize import write_json_atomic
from pipeline.base.errors import CLIError
from pipeline.measure.client import RequestFailed
from pipeline.measure.llamacpp.compare import agreement, load_measurement
from pipeline.measure.llamacpp.engine import (LlamaServer, LogObserver, ensure_installed,
                                              measure_state_size)
from pipeline.measure.llamacpp.gguf_model import ModelShape, vocabulary, write_model
from pipeline.measure.output import check_output, kept_note, provenance_path
from pipeline.measure.runner import run_requests, settings_from
from pipeline.measure.sidecar import machine, sha256
from pipeline.measure.workload import (FORCED_WORD, QUESTION_WORDS, Request, spec_requests,
                                       workload_spec)

__all__ = ["cache_bytes_for", "prepare_model", "run_local", "server_context", "show"]

N_CTX = 8192                 # the model's context; a server gets just what the prompts need
FORCED_BIAS = 100.0


def cache_bytes_for(configs: list[tuple[str, float]], request_state: int) -> dict[str, int | None]:
    """config -> RAM cache bytes (None for no RAM cache)."""
    return {name: (None if docs == 0 else int(docs * request_state)) for name, docs in configs}


def _machine() -> dict:
    return {**machine(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def _command(args: argparse.Namespace) -> str:
    caches = ",".join(f"{name}={docs:g}" for name, docs in args.ram_cache)
    order = (f"--passes {','.join(args.passes)}" if args.pattern == "lab" else
             f"--pattern long-doc-qa --repeat-count {args.repeat_count} --repeat-mode "
             f"{args.repeat_mode} --shuffle-seed {args.shuffle_seed}")
    return (f"python -m pipeline measure --local-engine --output {args.output} "
            f"--docs {args.docs} --tokens {args.tokens} {order} "
            f"--repeats {args.repeats} --max-tokens {args.max_tokens} --ram-cache {caches} "
            f"--threads {args.threads}")


def server_context(prompt_tokens: int, max_tokens: int) -> int:
    """The server's --n_ctx: prompt + completion rounded up to 256, at most N_CTX.

    A context no larger than needed matters: every RAM-cache load zeroes the logits rows
    past the loaded tokens (``Llama.load_state``), a cost proportional to the spare context.
    """
    return min(N_CTX, -(-(prompt_tokens + max_tokens + 1) // 256) * 256)


def prepare_model(work_dir: Path | None) -> tuple[Path, str, ModelShape, Path]:
    """(work_dir or a new temp folder, llama-cpp-python's version, the tiny model: shape, file)."""
    work = work_dir or Path(tempfile.mkdtemp(prefix="kvlab-measure-"))
    work.mkdir(parents=True, exist_ok=True)
    version = ensure_installed()
    shape = ModelShape(context=N_CTX)
    return work, version, shape, write_model(work / "kvlab-tiny.gguf", shape)


def _validate(args: argparse.Namespace) -> None:
    if args.base_url:
        raise CLIError("--base-url and --local-engine exclude each other")
    if args.concurrency != 1:
        raise CLIError("--local-engine measures at --concurrency 1 (the server serves one "
                       "request at a time and its log is read per request)")
    prompt = 1 + args.tokens + QUESTION_WORDS
    if prompt + args.max_tokens > N_CTX:
        raise CLIError(f"--tokens {args.tokens}: prompt ({prompt}) + --max-tokens "
                       f"({args.max_tokens}) exceed the model's context of {N_CTX} tokens")


def run_local(args: argparse.Namespace) -> int:
    """Measure the lab's workload on local llama.cpp servers (see the module docstring)."""
    _validate(args)
    done = check_output(args.output, args.resume)
    work, version, shape, model = prepare_model(args.work_dir)
    vocab = vocabulary()
    prompt_tokens = 1 + args.tokens + QUESTION_WORDS
    n_ctx = server_context(prompt_tokens, args.max_tokens)
    state = measure_state_size(model, n_ctx, [1] + list(vocab.words.values())[:400])
    request_state = state(prompt_tokens + args.max_tokens - 1)
    caches = cache_bytes_for(args.ram_cache, request_state)
    spec = workload_spec(args)
    requests = [r for name, _ in args.ram_cache for r in spec_requests(name, spec)]
    provenance = {
        "what": "TTFT of the lab's workload on llama.cpp (llama-cpp-python's server) with its "
                "RAM prompt cache; tiny random-weight model generated by the project",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": _command(args),
        "engine": {"package": "llama-cpp-python[server]", "version": version,
                   "build": "CMAKE_ARGS=-DGGML_NATIVE=OFF (scripts/ensure_llamacpp.sh)",
                   "server": "python -m llama_cpp.server --model MODEL --host 127.0.0.1 "
                             f"--port PORT --n_ctx {n_ctx} --n_threads {args.threads} "
                             f"--n_threads_batch {args.threads} --cache true --cache_type ram "
                             "--cache_size BYTES (--cache false when BYTES is null) "
                             "--interrupt_requests false --verbose true; one fresh server per "
                             "config and repeat"},
        "model": {**shape.describe(), "file_sha256": sha256(model)},
        "state_size": {"fixed_bytes": state.fixed, "bytes_per_token": state.per_token,
                       "one_request_bytes": request_state},
        "workload": {**spec, "prompt_tokens": prompt_tokens,
                     "completion_tokens": args.max_tokens, "temperature": 0.0,
                     "logit_bias": f"+{FORCED_BIAS:g} on {FORCED_WORD!r}", "concurrency": 1},
        "configs": {name: {"ram_cache_docs": docs, "cache_bytes": caches[name]}
                    for name, docs in args.ram_cache},
        "machine": {**_machine(), "threads": args.threads},
    }
    write_json_atomic(provenance_path(args.output), provenance)
    bias = {str(vocab.words[FORCED_WORD]): FORCED_BIAS}
    for name, _ in args.ram_cache:
        for repeat in range(args.repeats):
            group = [r for r in requests if (r.config, r.repeat) == (name, repeat)]
            _measure_group(args, group, done, model, work, caches[name], bias, n_ctx)
    provenance["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json_atomic(provenance_path(args.output), provenance)
    return show(args.output)


def _measure_group(args: argparse.Namespace, group: list[Request], done: set[tuple],
                   model: Path, work: Path, cache_bytes: int | None,
                   bias: dict[str, float], n_ctx: int) -> None:
    todo = [r for r in group if r.key not in done]
    if not todo:
        return
    replay = group[:group.index(todo[0])]
    log = work / f"server-{group[0].config}-r{group[0].repeat}.log"
    log.unlink(missing_ok=True)
    progress = None if args.quiet else sys.stderr
    with LlamaServer(model, log, cache_bytes, n_ctx, args.threads) as server:
        settings = settings_from(args, server.base_url)
        settings.logit_bias = bias
        settings.stop_on_failure = True      # later requests would meet another cache state
        if progress:
            print(f"measure: {group[0].config} (repeat {group[0].repeat}): llama.cpp server on "
                  f"{server.base_url}, RAM cache {cache_bytes or 'none'} bytes", file=progress)
        try:
            if replay:
                if progress:
                    print(f"measure: replaying {len(replay)} finished request(s) unrecorded to "
                          f"restore the cache state", file=progress)
                run_requests(replay, settings, Path(os.devnull), progress=None)
            run_requests(todo, settings, args.output, observer=LogObserver(log),
                         progress=progress)
        except RequestFailed as exc:
            raise CLIError(f"{exc}; {kept_note(args.output)} (server log: {log})") from None


def show(output: Path) -> int:
    """Print predicted vs measured tiers and TTFT per (config, pass, measured tier)."""
    if not provenance_path(output).exists():
        raise CLIError(f"{output}: no provenance file {provenance_path(output)} (only "
                       f"--local-engine outputs can be shown)")
    try:
        joined = load_measurement(output)
    except (OSError, ValueError, KeyError, pl.exceptions.PolarsError) as exc:
        raise CLIError(f"{output}: cannot read the measurement ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    per_tier = (joined.group_by("config", "pass", "server_tier", maintain_order=True)
                .agg(n=pl.len(), p50_ms=pl.col("ttft_ms").median(),
                     min_ms=pl.col("ttft_ms").min(), max_ms=pl.col("ttft_ms").max()))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_hide_dataframe_shape=True,
                   tbl_hide_column_data_types=True, tbl_width_chars=200, float_precision=1):
        print(f"TTFT per config, pass and measured tier ({output}):")
        print(per_tier)
        print("\nPredicted (llama.cpp model, plain LRU) vs measured tiers, per config:")
        print(agreement(joined))
    return 0
