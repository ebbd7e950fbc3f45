"""``vllm bench serve`` result files as runs of requests for ``fit --vllm-bench``.

vLLM 0.33.0's ``vllm bench serve --save-result`` writes one JSON object
(``vllm/benchmarks/serve.py``, ``main_async`` and ``benchmark``): the setup (``backend``,
``model_id``, ``num_prompts``, ``request_rate`` (a number or ``"inf"``), ``burstiness``,
``max_concurrency``), the totals (``duration``, ``completed``, ``failed``,
``total_input_tokens``, ``total_output_tokens``) and the summary (``mean_ttft_ms``,
``median_ttft_ms``, ``p99_ttft_ms``, the same for ``tpot``, ``itl``, ``e2el``).
``--save-detailed`` keeps the per-request lists, one entry per request sent, in seconds:
``input_lens``, ``output_lens`` (0 for a failed request), ``ttfts``, ``itls``,
``latencies``, ``start_times`` (``time.perf_counter()`` when the request was sent, after the
``--max-concurrency`` semaphore) and ``errors`` (empty when it succeeded). ``--append-result``
writes several objects, one a line: each is one run.

Each run's requests arrive at their measured send times (open loop: the concurrency limit
is already in them), with the prompt and output lengths measured, and prompts that share
nothing (vllm bench serve's random dataset; a benchmark whose prompts share prefixes is
fitted as if they did not, and predicted too slow). Every problem is a ``UsageError``
(exit 2) naming the file, the result and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from pipeline.base.errors import UsageError, read_text
from pipeline.fit.inputs import Run

__all__ = ["SUMMARY", "DETAILED", "load_bench", "read_results"]

#: the fields every result has (a file without them is not a bench serve result)
SUMMARY = ("duration", "completed", "total_input_tokens", "total_output_tokens",
           "request_rate", "max_concurrency", "mean_ttft_ms", "median_ttft_ms")
#: the per-request lists of --save-detailed that the fit needs
DETAILED = ("input_lens", "output_lens", "ttfts", "latencies", "start_times")


def read_results(path: Path) -> list[dict]:
    """The result objects of ``path`` (one, or one a line with --append-result)."""
    text = read_text(path, f"--vllm-bench {path}")
    try:
        results = [json.loads(text)]
    except json.JSONDecodeError:
        results = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                results.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UsageError(f"--vllm-bench {path}:{number}: not JSON ({exc.msg})") from None
    if not results:
        raise UsageError(f"--vllm-bench {path}: empty")
    for index, result in enumerate(results):
        where = _where(path, index, len(results))
        if not isinstance(result, dict) or not {"completed", "duration"} <= set(result):
            raise UsageError(f"--vllm-bench {where}: not a vllm bench serve result (no "
                             f"'completed' and 'duration'; write it with vllm bench serve "
                             f"--save-result --save-detailed)")
        missing = [name for name in SUMMARY if name not in result]
        if missing:
            raise UsageError(f"--vllm-bench {where}: missing field {missing[0]!r}")
    return results


def _where(path: Path, index: int, count: int) -> str:
    return str(path) if count == 1 else f"{path} (result {index + 1} of {count})"


def _numbers(result: dict, name: str, where: str, size: int) -> np.ndarray:
    values = result[name]
    if not isinstance(values, list) or len(values) != size:
        raise UsageError(f"--vllm-bench {where}: {name} must be a list of {size} entries "
                         f"(one per request, as input_lens)")
    ok = all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
             and v >= 0 for v in values)
    if not ok:
        raise UsageError(f"--vllm-bench {where}: {name} must hold numbers >= 0")
    return np.asarray(values, dtype=np.float64)


def _run(path: Path, result: dict, where: str, label: str) -> Run:
    missing = [name for name in DETAILED if name not in result]
    if missing:
        raise UsageError(f"--vllm-bench {where}: no per-request data ({missing[0]!r}): fit "
                         f"needs vllm bench serve --save-result --save-detailed")
    inputs = result["input_lens"]
    size = len(inputs) if isinstance(inputs, list) else -1
    lens, outs, ttft, latency, start = (_numbers(result, name, where, size)
                                        for name in DETAILED)
    errors = result.get("errors") or [""] * size
    ok = (outs >= 1) & (lens >= 1) & np.array([not e for e in errors][:size] + [True] *
                                              max(0, size - len(errors)))
    if not ok.any():
        raise UsageError(f"--vllm-bench {where}: no request succeeded")
    bad = np.nonzero(ok & (ttft > latency))[0]
    if bad.size:
        raise UsageError(f"--vllm-bench {where}: request {int(bad[0])}: ttfts exceeds "
                         f"latencies")
    index = np.nonzero(ok)[0]
    index = index[np.argsort(start[index], kind="stable")]
    lengths = lens[index].astype(np.int64)
    ends = np.cumsum(lengths)                   # distinct token ids: nothing is shared
    prompts = [np.arange(end - n, end, dtype=np.int64) + 1 for end, n in zip(ends, lengths)]
    sidecar = {"engine": {"name": f"vllm ({result.get('backend', 'vllm')}, bench serve)"},
               "served_model": result.get("model_id"),
               "bench": {key: result.get(key) for key in (
                   "date", "backend", "model_id", "num_prompts", "request_rate",
                   "burstiness", "max_concurrency", "completed", "failed", "duration")}}
    return Run(file=str(path), label=label, engine_model={}, lines=(index + 1).tolist(),
               arrival_ms=(start[index] - start[index].min()) * 1e3,
               ttft_ms=ttft[index] * 1e3, e2e_ms=latency[index] * 1e3,
               prompt_tokens=lengths, max_tokens=outs[index].astype(np.int64),
               prompts=prompts, cached_tokens=np.full(index.size, -1, dtype=np.int64),
               failures=int(size - index.size), sidecar=sidecar)


def load_bench(paths: list[Path]) -> list[Run]:
    """Every result of every file as a run (see the module docstring); ``lines`` are the
    requests' positions (from 1) in the result's lists."""
    runs = []
    for path in paths:
        results = read_results(path)
        for index, result in enumerate(results):
            where = _where(path, index, len(results))
            rate = result["request_rate"]
            label = (f"rate {rate}" + (f", concurrency {result['max_concurrency']}"
                                       if result["max_concurrency"] else "")
                     + ("" if len(results) == 1 else f" (result {index + 1})"))
            runs.append(_run(path, result, where, label))
    return runs
