#!/usr/bin/env python3
"""Compare two folders of pipeline outputs: prove a refactor changed nothing.

``scripts/compare_outputs.py BEFORE AFTER`` walks both folders (e.g. two trees written by
``python -m pipeline run --events-dir D/events --exports-dir D/exports --report
D/report/index.html``) and checks every file:

* ``.parquet``: the frames are equal (``polars.DataFrame.equals``, schema included);
* ``.html``: equal once white space and generated ids are removed;
* anything else (JSON exports, JSONL, text): byte for byte.

A file present on one side only is a difference. Prints one line per difference and a
verdict; exit status 0 when everything matches, 1 otherwise.

``scripts/compare_outputs.py --generate DIR`` writes every output of this checkout into DIR
first: ``lab/`` (the default run), ``docs20/`` (``--docs 20 --tokens 4096``), ``direct/``
(``--method direct --passes fwd,rev,fwd``), ``engines/`` (block mode with the vllm and lmcache
models), ``measured-cli/`` (the ``measured`` command's print-out and ``--json``) and
``commands/`` (``blocks``, ``trace``, ``policies``, ``plan`` (hit ratio, TTFT, fitted
latency, fleet), ``simulate``, ``fleet``, ``fit`` and ``measured`` answers, warnings and
files; JSON with sorted keys, the output folder's path replaced by ``DIR`` and the
checkout's by ``ROOT``, in pages too; the trace cases need ``--trace PATH``, default the
shared synthetic trace). Run it before and after a change, then compare the two folders.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl

# Ids: id="..." attributes, and the names altair generates (view_1, param_2, data-<hash>).
_IDS = re.compile(r'\bid="[^"]*"|\b(?:view|param|selector|data)[-_][0-9a-f]+\b')
_SPACE = re.compile(r"\s+")


def normalized_html(text: str) -> str:
    """``text`` without white space and generated ids."""
    return _SPACE.sub("", _IDS.sub("ID", text))


def difference(before: Path, after: Path) -> str | None:
    """Why two files differ, or None when they match."""
    if before.suffix == ".parquet":
        old, new = pl.read_parquet(before), pl.read_parquet(after)
        if old.schema != new.schema:
            return f"schema {old.schema} != {new.schema}"
        return None if old.equals(new) else f"frames differ ({old.height} vs {new.height} rows)"
    if before.suffix in (".html", ".htm"):
        same = (normalized_html(before.read_text(encoding="utf-8"))
                == normalized_html(after.read_text(encoding="utf-8")))
        return None if same else "HTML differs beyond white space and ids"
    return None if before.read_bytes() == after.read_bytes() else "bytes differ"


def compare(before: Path, after: Path) -> list[str]:
    """One line per difference between the two folders (empty when they match)."""
    old = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    new = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    problems = [f"{path}: only in {before}" for path in sorted(old - new)]
    problems += [f"{path}: only in {after}" for path in sorted(new - old)]
    for path in sorted(old & new):
        why = difference(before / path, after / path)
        if why:
            problems.append(f"{path}: {why}")
    return problems


ROOT = Path(__file__).resolve().parents[1]
RUNS = {"lab": [], "docs20": ["--docs", "20", "--tokens", "4096"],
        "direct": ["--method", "direct", "--passes", "fwd,rev,fwd"],
        "engines": ["--block-size", "16", "--gpu-model", "vllm", "--cpu-model", "lmcache"]}
SHARED_TRACE = ROOT.parent / "shared" / "traces" / "synthetic_trace.jsonl"


def command_cases(out: Path, trace: Path | None) -> dict[str, list[str]]:
    """name -> arguments of ``python -m pipeline`` whose answers (stdout) and files under
    ``out/name`` are compared; the trace cases only when ``trace`` is given."""
    cases = {
        "blocks-lab": ["blocks", "--cpu", "20000"],
        "blocks-engines": ["blocks", "--gpu", "48000", "--cpu", "30000", "--gpu-model", "vllm",
                           "--cpu-model", "lmcache"],
        "blocks-policies": ["blocks", "--gpu", "30000", "--cpu", "30000", "--gpu-model", "fifo",
                            "--cpu-model", "arc", "--passes", "fwd,rev,fwd"],
        "policies-lab": ["policies", "--json", "--out", str(out / "policies-lab")],
        "policies-lab-cpu": ["policies", "--cpu", "20000", "--cpu-policy", "s3fifo",
                             "--gpu-policy", "lru,fifo,opt", "--out",
                             str(out / "policies-lab-cpu")],
        "plan-lab": ["plan", "--target-ttft-ms", "100", "--json", "--report",
                     str(out / "plan-lab" / "plan.html")],
        "plan-blocks": ["plan", "--target-hit-ratio", "0.6", "--block-size", "16", "--json"],
        "plan-engines": ["plan", "--target-hit-ratio", "0.6", "--block-size", "256",
                         "--gpu-model", "vllm", "--cpu-model", "lmcache", "--json"],
        "plan-policy": ["plan", "--target-hit-ratio", "0.6", "--block-size", "256",
                        "--cpu-model", "fifo"],
        "measured-llamacpp": ["measured", "data/measured/llamacpp_lab.jsonl"],
        "trace-pattern": ["trace", "--pattern", "long-doc-qa", "--num-documents", "4",
                          "--document-length", "2000", "--gpu-model", "lru", "--cpu-model",
                          "s3fifo", "--json", "--out", str(out / "trace-pattern"),
                          "--report", str(out / "trace-pattern" / "trace.html")],
        "simulate-chat": ["simulate", "data/simulate/chat.jsonl", "--format", "tokens",
                          "--block-size", "4", "--gpu", "64blocks", "--out",
                          str(out / "simulate-chat")],
        "simulate-ldqa": ["simulate", "--pattern", "long-doc-qa", "--num-documents", "4",
                          "--document-length", "2000", "--gpu", "300blocks", "--output-tokens",
                          "16", "--concurrency", "8", "--cpu", "40000", "--out",
                          str(out / "simulate-ldqa")],
        "simulate-lru": ["simulate", "--pattern", "long-doc-qa", "--num-documents", "4",
                         "--document-length", "2000", "--gpu", "300blocks", "--output-tokens",
                         "16", "--concurrency", "8", "--cpu", "40000", "--cpu-model", "lru",
                         "--out", str(out / "simulate-lru")],
        "simulate-overloaded": ["simulate", "--pattern", "long-doc-qa", "--num-documents", "20",
                                "--document-length", "200", "--gpu", "300blocks",
                                "--max-num-seqs", "1", "--output-tokens", "4", "--rate", "1",
                                "--out", str(out / "simulate-overloaded")],
        "simulate-roofline": ["simulate", "--pattern", "long-doc-qa", "--num-documents", "4",
                              "--document-length", "2000", "--gpu", "300blocks", "--cpu",
                              "40000", "--rate", "4", "--model", "qwen2.5-1.5b", "--latency",
                              "roofline", "--out", str(out / "simulate-roofline")],
        "simulate-fitted": ["simulate", "--pattern", "long-doc-qa", "--num-documents", "4",
                            "--document-length", "2000", "--gpu", "300blocks", "--rate", "4",
                            "--latency", "data/measured/llamacpp_calib.fitted.json", "--out",
                            str(out / "simulate-fitted")],
        "fleet-groups": ["fleet", "--pattern", "groups", "--groups", "4", "--users", "4",
                         "--questions", "3", "--system-prompt-length", "1024", "--router",
                         "round-robin,prefix-approx,kv-cost", "--instances", "4", "--gpu",
                         "200blocks,400blocks", "--model", "qwen2.5-1.5b", "--jobs", "1",
                         "--out", str(out / "fleet-groups")],
        "fleet-chat": ["fleet", "--pattern", "multi-turn", "--sessions", "6", "--turns", "3",
                       "--system-prompt-length", "256", "--question-length", "64",
                       "--output-tokens", "32", "--router", "session,least-loaded",
                       "--instances", "3", "--gpu", "300blocks", "--model", "qwen2.5-1.5b",
                       "--jobs", "1", "--json", "--out", str(out / "fleet-chat")],
        "plan-fleet": ["plan", "--pattern", "groups", "--groups", "4", "--users", "4",
                       "--questions", "3", "--system-prompt-length", "1024", "--fleet",
                       "--instances", "2,4", "--router", "round-robin,prefix-approx,kv-cost",
                       "--gpu", "66blocks,100blocks,150blocks,200blocks,300blocks",
                       "--target-ttft-p90-ms", "3.5", "--model", "qwen2.5-1.5b", "--jobs", "1"],
        "plan-latency": ["plan", "--target-hit-ratio", "0.5", "--latency",
                         "data/measured/llamacpp_calib.fitted.json", "--docs", "4", "--tokens",
                         "5000"],
        "fit-calib": ["fit", *(f"data/measured/llamacpp_calib_{run}.jsonl" for run in
                               ("closed-c1", "rate-0.1", "rate-0.2", "rate-0.3", "rate-0.45")),
                      "--machine-load", "--holdout", "0.4", "--holdout-by", "load",
                      "--output", str(out / "fit-calib" / "fitted.json")],
    }
    if trace is not None:
        cases.update({
            "trace": ["trace", str(trace), "--out", str(out / "trace"), "--report",
                      str(out / "trace" / "trace.html")],
            "trace-engines": ["trace", str(trace), "--gpu-model", "vllm", "--cpu-model",
                              "lmcache", "--json", "--no-report", "--out",
                              str(out / "trace-engines")],
            "policies-trace": ["policies", "--trace", str(trace), "--cpu", "2000",
                               "--cpu-policy", "arc", "--json", "--events", "--out",
                               str(out / "policies-trace")],
            "plan-trace": ["plan", str(trace), "--target-hit-ratio", "0.3", "--json"],
        })
    return cases


def generate(folder: Path, trace: Path | None = None) -> None:
    """Write the outputs of this checkout's pipeline into ``folder`` (see the docstring)."""
    for name, options in RUNS.items():
        out = folder / name
        subprocess.run([sys.executable, "-m", "pipeline", "run", "--quiet", *options,
                        "--events-dir", str(out / "events"), "--exports-dir", str(out / "exports"),
                        "--report", str(out / "report" / "index.html")],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    out = folder / "measured-cli"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "measured-cli.stdout", "w", encoding="utf-8") as stdout:
        subprocess.run([sys.executable, "-m", "pipeline", "measured", "data/ttft.jsonl",
                        "--json", str(out / "measured-cli.json")],
                       cwd=ROOT, check=True, stdout=stdout)
    out = folder / "commands"
    for name, arguments in command_cases(out, trace).items():
        (out / name).mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pipeline", *arguments], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
        shown = re.sub(r"\(\d+\.\d s\)", "(T s)", done.stdout.replace(str(folder), "DIR")
                       .replace(str(ROOT), "ROOT"))
        (out / name / "stdout.txt").write_text(stable_json(shown), encoding="utf-8")
        if done.stderr:                                   # warnings and notes
            (out / name / "stderr.txt").write_text(
                done.stderr.replace(str(folder), "DIR").replace(str(ROOT), "ROOT"),
                encoding="utf-8")
        for page in (out / name).glob("*.html"):          # pages that name the checkout
            text = page.read_text(encoding="utf-8")
            page.write_text(text.replace(str(ROOT), "ROOT"), encoding="utf-8")


def stable_json(text: str) -> str:
    """A JSON print-out with its keys sorted (the order of some dicts varies from run to
    run, e.g. plan's per-tier medians); any other text unchanged."""
    try:
        return json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--generate", type=Path, metavar="DIR",
                        help="write this checkout's outputs into DIR instead of comparing")
    parser.add_argument("--trace", type=Path, default=SHARED_TRACE,
                        help="trace of the trace cases (default: the shared synthetic trace; "
                             "skipped when absent)")
    args = parser.parse_args(argv)
    if args.generate:
        generate(args.generate, args.trace if args.trace.is_file() else None)
        print(f"outputs written to {args.generate}")
        return 0
    if args.after is None:
        parser.error("give two folders to compare, or --generate DIR")
    for folder in (args.before, args.after):
        if not folder.is_dir():
            parser.error(f"{folder}: not a folder")
    problems = compare(args.before, args.after)
    files = sum(1 for p in args.before.rglob("*") if p.is_file())
    print("\n".join(problems) if problems else
          f"identical: {files} files (exports byte for byte, Parquet frames equal, HTML equal "
          f"up to white space and ids)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
