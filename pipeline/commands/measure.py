"""Measure TTFT on a real server: the lab's workload as streaming completions, one JSON line each.

``python -m pipeline measure --base-url http://127.0.0.1:8000 --output ttft.jsonl
[--config NAME] [--docs 10] [--tokens 5000] [--passes fwd,fwd,rev] [--repeats 1]
[--concurrency 1] [--served-model NAME] [--resume]`` sends the lab's documents (plus a short
question) to an OpenAI-compatible ``/v1/completions`` endpoint (vLLM, SGLang, llama.cpp) and
appends one line per request: ``config, pass, doc, doc_tokens, ttft_ms, total_ms, repeat,
step`` and what the server reports. ``--local-engine`` instead builds (or reuses)
llama-cpp-python, writes a tiny random-weight GGUF model, and measures one fresh server per
``--ram-cache`` config and repeat (see pipeline/measure/llamacpp/local.py), with provenance
beside the output.

``--trace FILE`` (Mooncake or token-id JSONL) replays real traffic instead, at the trace's
timestamps (``--speed``), a Poisson ``--rate`` or a closed-loop ``--concurrency``, and writes a
sidecar describing engine, model, hardware, options and workload (pipeline/measure/replay.py).

A failure (refused connection, timeout, HTTP error, malformed stream) is one line in OUTPUT
(``error``, ``error_kind``) and one on stderr; the run goes on (a refused connection stops
it), every line already written stays, and the same command with ``--resume`` sends only the
requests that have no answered line yet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.base.arguments import derive, pass_list, positive_float, positive_int
from pipeline.base.config import BASELINE, LAB_DOCS, LAB_PASSES
from pipeline.base.errors import CLIError, UsageError
from pipeline.measure.client import RequestFailed
from pipeline.measure.output import check_output, kept_note
from pipeline.measure.runner import run_requests, settings_from
from pipeline.measure.workload import WORDS, spec_requests, workload_spec
from pipeline.workloads.patterns import REPEAT_MODES

__all__ = ["add_arguments", "main", "parse_ram_caches"]

DEFAULT_TOKENS = 5000
DEFAULT_RAM_CACHES = f"{BASELINE}=0,cache-4.5=4.5,cache=10.5"


def _logit_bias(text: str) -> tuple[str, float]:
    token, sep, value = text.partition("=")
    try:
        if not sep or not token.strip():
            raise ValueError
        return token.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOKEN_ID=BIAS, got {text!r}") from None


def parse_ram_caches(text: str) -> list[tuple[str, float]]:
    """argparse type: NAME=DOCS,... (DOCS >= 0: RAM cache size in documents; 0 = none)."""
    configs: list[tuple[str, float]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, size = part.partition("=")
        try:
            value = float(size)
        except ValueError:
            value = -1.0
        if not sep or not name or not value >= 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected NAME=DOCS (DOCS a number >= 0), got {part!r}")
        if name in {n for n, _ in configs}:
            raise argparse.ArgumentTypeError(f"config {name!r} given twice")
        configs.append((name, value))
    if not configs:
        raise argparse.ArgumentTypeError(f"empty config list {text!r}")
    return configs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``measure``."""
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--base-url", help="server to measure, e.g. http://127.0.0.1:8000")
    target.add_argument("--show", action="store_true",
                        help="measure nothing: print predicted vs measured tiers and TTFT of "
                             "an existing --local-engine OUTPUT (needs its provenance file)")
    target.add_argument("--local-engine", action="store_true",
                        help="build/reuse llama-cpp-python, start its server on 127.0.0.1 with "
                             "a tiny generated model, measure, stop it")
    parser.add_argument("--output", required=True, type=Path, help="JSON-lines file to append to")
    parser.add_argument("--resume", action="store_true",
                        help="continue OUTPUT: send only requests without a line in it")
    parser.add_argument("--config", default=BASELINE,
                        help="config name written on each line (--base-url; default %(default)s)")
    parser.add_argument("--docs", type=_docs, default=LAB_DOCS,
                        help=f"documents, 1 to {len(WORDS) - 1} (default %(default)s)")
    parser.add_argument("--tokens", type=positive_int, default=DEFAULT_TOKENS,
                        help="words (= tokens with the tiny model) per document "
                             "(default %(default)s)")
    parser.add_argument("--passes", type=pass_list, default=list(LAB_PASSES),
                        help="reading orders, comma-separated fwd/rev (default fwd,fwd,rev)")
    parser.add_argument("--pattern", choices=("lab", "long-doc-qa"), default="lab",
                        help="lab: --passes over the documents; long-doc-qa: LMCache's "
                             "long_doc_qa order (a warmup pass, then --repeat-count reads of "
                             "each document by --repeat-mode) (default %(default)s)")
    parser.add_argument("--repeat-count", type=positive_int, default=2,
                        help="long-doc-qa: reads of each document in the query pass "
                             "(default %(default)s)")
    parser.add_argument("--repeat-mode", choices=REPEAT_MODES, default="random",
                        help="long-doc-qa: order of the query pass (default %(default)s)")
    parser.add_argument("--shuffle-seed", type=int, default=0,
                        help="long-doc-qa: seed of the random order (default %(default)s)")
    parser.add_argument("--repeats", type=positive_int, default=1,
                        help="run the whole workload this many times (default %(default)s; "
                             "--local-engine starts a fresh server for each, a --base-url "
                             "server keeps its cache across them)")
    parser.add_argument("--concurrency", type=positive_int, default=None,
                        help="requests in flight at once, a closed loop (default 1, as the lab)")
    parser.add_argument("--timeout", type=positive_float, default=300.0,
                        help="seconds allowed per request (default %(default)s)")
    parser.add_argument("--max-tokens", type=positive_int, default=16,
                        help="tokens to generate per request (default %(default)s)")
    parser.add_argument("--served-model", metavar="NAME",
                        help="the served model's name, sent as the request's \"model\" field "
                             "(--base-url; what vLLM's --served-model-name gives; not kvlab's "
                             "--model KV-size preset)")
    parser.add_argument("--logit-bias", type=_logit_bias, action="append", default=[],
                        metavar="TOKEN_ID=BIAS", help="logit_bias entry to send (repeatable)")
    parser.add_argument("--include-usage", action="store_true",
                        help="ask for a final usage event (stream_options.include_usage: vLLM "
                             "and SGLang then report prompt and cached tokens)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_replay_arguments(parser)
    local = parser.add_argument_group("--local-engine")
    local.add_argument("--ram-cache", type=parse_ram_caches, default=DEFAULT_RAM_CACHES,
                       metavar="NAME=DOCS,...",
                       help="one server per config: RAM prompt cache of DOCS documents' states "
                            "(0 = no RAM cache) (default %(default)s)")
    local.add_argument("--threads", type=positive_int, default=1,
                       help="server threads (default %(default)s: on a shared machine, more "
                            "threads than free cores make ggml's workers spin)")
    local.add_argument("--nice", type=int,
                       help="replay: the server's niceness (negative = higher priority, needs "
                            "root; keeps neighbours on a shared machine from setting the pace)")
    local.add_argument("--work-dir", type=Path,
                       help="model file and server logs (default: a new temporary folder)")


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """Replaying traffic: a trace's prompts, its timestamps or a rate, the sidecar."""
    replay = parser.add_argument_group(
        "replay (a trace, or a pattern with --rate; writes OUTPUT.provenance.json)")
    replay.add_argument("--trace", type=Path,
                        help="send this trace's prompts: Mooncake JSONL (prompts built per "
                             "hash id) or token-id JSONL (sent as given)")
    replay.add_argument("--trace-format", choices=("auto", "mooncake", "tokens"),
                        default="auto", help="--trace's format (default: from its first line)")
    replay.add_argument("--trace-block-size", type=positive_int, default=512,
                        help="tokens per Mooncake hash id (default %(default)s)")
    replay.add_argument("--token-ids", action="store_true",
                        help="send Mooncake prompts as token ids (vLLM, SGLang) instead of "
                             "the lab's words")
    replay.add_argument("--limit", type=positive_int, help="the trace's first N requests only")
    replay.add_argument("--speed", type=positive_float,
                        help="open loop at the trace's timestamps divided by SPEED (the "
                             "default for --trace: 1)")
    replay.add_argument("--rate", type=positive_float,
                        help="open loop at Poisson arrivals of RATE requests per second")
    replay.add_argument("--seed", type=int, default=0,
                        help="--rate's arrival seed (default %(default)s)")
    replay.add_argument("--speed-probe", action="store_true",
                        help="time 3 fixed prompts of 2,048 words on the server before and "
                             "after the run, into the sidecar (fit --speed-probe scales each "
                             "run's step times by them)")
    replay.add_argument("--engine", default="unknown",
                        help="engine behind --base-url, for the sidecar (vllm, sglang, ...)")
    replay.add_argument("--hardware", help="what it runs on, for the sidecar (e.g. '1x H100')")
    replay.add_argument("--max-num-seqs", type=positive_int,
                        help="the engine's max_num_seqs, kept in the sidecar for fit")
    replay.add_argument("--max-num-batched-tokens", type=positive_int,
                        help="the engine's max_num_batched_tokens, kept for fit")


def _docs(text: str) -> int:
    """argparse type: a document count from 1 to the number of distinct document words."""
    value = positive_int(text)
    if value > len(WORDS) - 1:
        raise argparse.ArgumentTypeError(f"expected at most {len(WORDS) - 1} documents, "
                                         f"got {text!r}")
    return value


def main(args: argparse.Namespace) -> int:
    """Run the measurement; 1 with one line on stderr on a failure."""
    from pipeline.measure.replay import is_replay, run_replay
    if is_replay(args):
        return run_replay(args)
    if args.speed_probe:
        raise UsageError("--speed-probe: only with a replay (--trace, or a pattern with "
                         "--rate): fit reads it from the replay's sidecar")
    args = derive(args, concurrency=args.concurrency or 1)
    if args.local_engine or args.show:
        from pipeline.measure.llamacpp.local import run_local, show
        return show(args.output) if args.show else run_local(args)
    if not args.base_url.startswith(("http://", "https://")):
        raise CLIError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    done = check_output(args.output, args.resume)
    requests = [r for r in spec_requests(args.config, workload_spec(args)) if r.key not in done]
    if not requests:
        print(f"measure: nothing to do, {args.output} has every request", file=sys.stderr)
        return 0
    if done:
        print(f"measure: resuming, {len(done)} line(s) already in {args.output}",
              file=sys.stderr)
    try:
        written = run_requests(requests, settings_from(args, args.base_url), args.output,
                               progress=None if args.quiet else sys.stderr)
    except RequestFailed as exc:
        raise CLIError(f"{exc}; {kept_note(args.output)}") from None
    print(f"measure: wrote {written} line(s) to {args.output}", file=sys.stderr)
    return 0


def interrupted(args: argparse.Namespace) -> str:
    """The CLI's line on Ctrl-C: the lines answered so far stay in OUTPUT (for --resume)."""
    output = getattr(args, "output", None)
    try:
        kept = output is not None and output.is_file() and output.stat().st_size > 0
    except OSError:
        kept = False
    if kept:
        return (f"interrupted; the lines answered so far are kept in {output}: rerun with "
                f"--resume to continue")
    return "interrupted; nothing written"


if __name__ == "__main__":
    from pipeline.cli import run_command

    sys.exit(run_command("measure"))
