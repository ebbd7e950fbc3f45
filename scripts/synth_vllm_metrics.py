"""A synthetic vLLM ``/metrics`` scrape from kvlab's own ``simulate`` on the roofline with
known efficiency factors: what ``fit --vllm-metrics`` must recover
(``tests/test_fit_vllm_metrics.py``).

The run is ``scripts/synth_vllm_bench.py``'s (vllm bench serve's random dataset, Poisson
arrivals). Each finished request is observed as vLLM 0.33.0 observes it
(``vllm/v1/metrics/stats.py``, ``update_from_finished_request``; ``loggers.py``,
``PrometheusStatLogger.record``): TTFT from arrival, queue = first scheduled - arrival,
prefill = first token - first scheduled, decode = last token - first token, TPOT = decode /
(tokens - 1) (0 for one token), one ITL per decoding step, and one
``vllm:iteration_tokens_total`` observation per step that emits a token (the computed
prompt tokens of the requests whose first token it samples + the tokens it emits). The
buckets are ``vllm/v1/metrics/buckets.py``'s (request tokens: 1-2-5 up to
``--max-model-len``); the text is prometheus_client's exposition, labels ``model_name``
and ``engine``.

    python scripts/synth_vllm_metrics.py OUT.prom --mfu 0.55 --mbu 0.8 --request-rate 1
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("synth_vllm_bench",
                                               ROOT / "scripts" / "synth_vllm_bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TIME_TO_FIRST_TOKEN = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_LATENCY = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def one_two_five(max_value: int) -> tuple[int, ...]:
    """vLLM's ``build_1_2_5_buckets``."""
    out, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * 10**exponent > max_value:
                return tuple(out)
            out.append(mantissa * 10**exponent)
        exponent += 1


def observations(requests: pl.DataFrame, steps: pl.DataFrame) -> dict[str, list[float]]:
    """Every histogram's observations and every counter's increments of a simulated run."""
    frame = requests.sort("arrival_ms")
    end = (steps["start_ms"] + steps["duration_ms"]).to_numpy()
    decodes = steps["decode_seqs"].to_numpy()
    position = {s: i for i, s in enumerate(steps["step"].to_list())}
    computed = (frame["prompt_tokens"] - frame["gpu_hit_tokens"] - frame["cpu_hit_tokens"])
    firsts = np.zeros(len(end), dtype=np.int64)
    first_prompt = np.zeros(len(end), dtype=np.int64)
    itl = []
    for first, finish, n, tokens in zip(frame["first_token_step"], frame["finish_step"],
                                        frame["output_tokens"], computed):
        firsts[position[first]] += 1
        first_prompt[position[first]] += tokens
        times = end[position[first]:position[finish] + 1]
        itl.extend(np.diff(times).tolist() if times.size == n else
                   [float(times[-1] - times[0]) / max(n - 1, 1)] * (n - 1))
    emitted = decodes + firsts
    outputs = frame["output_tokens"].to_numpy()
    decode_s = ((frame["finish_ms"] - frame["first_token_ms"]) / 1e3).to_numpy()
    return {
        "vllm:time_to_first_token_seconds": (frame["ttft_ms"] / 1e3).to_list(),
        "vllm:inter_token_latency_seconds": (np.asarray(itl) / 1e3).tolist(),
        "vllm:e2e_request_latency_seconds":
            ((frame["finish_ms"] - frame["arrival_ms"]) / 1e3).to_list(),
        "vllm:request_queue_time_seconds":
            ((frame["first_scheduled_ms"] - frame["arrival_ms"]) / 1e3).to_list(),
        "vllm:request_prefill_time_seconds":
            ((frame["first_token_ms"] - frame["first_scheduled_ms"]) / 1e3).to_list(),
        "vllm:request_decode_time_seconds": decode_s.tolist(),
        "vllm:request_time_per_output_token_seconds":
            np.where(outputs > 1, decode_s / np.maximum(outputs - 1, 1), 0.0).tolist(),
        "vllm:request_prompt_tokens": frame["prompt_tokens"].to_list(),
        "vllm:request_generation_tokens": outputs.tolist(),
        "vllm:request_prefill_kv_computed_tokens": computed.to_list(),
        "vllm:iteration_tokens_total": (first_prompt + emitted)[emitted > 0].tolist(),
        "vllm:prompt_tokens_total": [float(frame["prompt_tokens"].sum())],
        "vllm:generation_tokens_total": [float(outputs.sum())],
        "vllm:prefix_cache_queries_total": [float(frame["prompt_tokens"].sum())],
        "vllm:prefix_cache_hits_total": [float(frame["gpu_hit_tokens"].sum())],
    }


def buckets(name: str, max_model_len: int) -> tuple[float, ...]:
    """The histogram's buckets in vLLM 0.33.0 (``loggers.py`` picks the family)."""
    if name.endswith("_tokens") or name == "vllm:request_prefill_kv_computed_tokens":
        return one_two_five(max_model_len)
    if name == "vllm:iteration_tokens_total":
        return ITERATION_TOKENS
    if name == "vllm:time_to_first_token_seconds":
        return TIME_TO_FIRST_TOKEN
    if name in ("vllm:inter_token_latency_seconds",
                "vllm:request_time_per_output_token_seconds"):
        return INTER_TOKEN_LATENCY
    return REQUEST_LATENCY


def _number(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


def exposition(observed: dict[str, list[float]], model: str, max_model_len: int = 8192,
               engine: str = "0") -> str:
    """prometheus_client's text for ``observed`` (module docstring)."""
    lines, labels = [], f'model_name="{model}",engine="{engine}"'
    for name, values in observed.items():
        if name.endswith("_total") and name != "vllm:iteration_tokens_total":
            lines += [f"# HELP {name} synthetic", f"# TYPE {name} counter",
                      f"{name}{{{labels}}} {_number(sum(values))}"]
            continue
        data = np.asarray(values, dtype=np.float64)
        lines += [f"# HELP {name} synthetic", f"# TYPE {name} histogram"]
        for bound in (*buckets(name, max_model_len), float("inf")):
            le = _number(bound) if bound != float("inf") else "+Inf"
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} '
                         f"{_number((data <= bound).sum())}")
        lines += [f"{name}_count{{{labels}}} {_number(data.size)}",
                  f"{name}_sum{{{labels}}} {_number(data.sum())}",
                  f"{name}_created{{{labels}}} 1.7e+09"]
    return "\n".join(lines) + "\n"


def merged(*runs: dict[str, list[float]]) -> dict[str, list[float]]:
    """The observations of several runs on one server, one after the other."""
    return {name: [v for run in runs for v in run[name]] for name in runs[0]}


def seconds(requests: pl.DataFrame) -> float:
    """The run's length: first arrival to last finish (``fit --vllm-metrics-seconds``)."""
    return float(requests["finish_ms"].max() - requests["arrival_ms"].min()) / 1e3


def run_observations(**options) -> tuple[dict[str, list[float]], float]:
    """(``observations``, ``seconds``) of ``synth_vllm_bench.simulated(**options)``."""
    requests, steps = bench.simulated(**options)
    return observations(requests, steps), seconds(requests)


def main() -> int:
    args = bench.run_parser(__doc__, 1.0).parse_args()
    observed, length = run_observations(**bench.run_options(args))
    args.output.write_text(exposition(observed, args.model))
    print(f"wrote {args.output}: {len(observed['vllm:e2e_request_latency_seconds'])} "
          f"requests, mean prefill "
          f"{1e3 * np.mean(observed['vllm:request_prefill_time_seconds']):.1f} ms, mean ITL "
          f"{1e3 * np.mean(observed['vllm:inter_token_latency_seconds']):.2f} ms, "
          f"{length:.1f} s from first arrival to last finish")
    return 0


if __name__ == "__main__":
    sys.exit(main())
