"""A synthetic ``vllm bench serve --save-result --save-detailed`` JSON from kvlab's own
``simulate`` on the roofline with known efficiency factors: what ``fit --vllm-bench`` must
recover (``tests/test_fit_vllm_bench.py``).

The workload is vllm bench serve's random dataset: ``--num-prompts`` prompts of distinct
token ids, lengths uniform in ``input_len x (1 -+ range_ratio)`` (and the same for the
outputs, every one generated to its length), sent as a Poisson process at ``--request-rate``
(``inf``: all at once) and normalised to ``num_prompts / rate`` seconds as vLLM's
``get_request`` does. ``simulate --latency roofline --mfu-prefill F --mbu-decode F`` runs
it; the result's per-request lists and summary are computed as vLLM's
``calculate_metrics`` computes them (seconds in the lists, milliseconds in the summary).

    python scripts/synth_vllm_bench.py OUT.json --model llama-3.1-8b --gpu-type H100 \\
        --mfu 0.55 --mbu 0.8 --num-prompts 60 --request-rate 4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def workload(num_prompts: int, input_len: int, output_len: int, range_ratio: float,
             rate: float, seed: int) -> list[dict]:
    """The token-id lines (``arrival_time`` seconds) of the random dataset."""
    rng = np.random.default_rng(seed)

    def lengths(mean: int) -> np.ndarray:
        low, high = int(mean * (1 - range_ratio)), int(mean * (1 + range_ratio))
        return rng.integers(max(low, 1), max(high, 1) + 1, num_prompts)

    inputs, outputs = lengths(input_len), lengths(output_len)
    if rate == float("inf"):
        arrivals = np.zeros(num_prompts)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / rate, num_prompts))
        arrivals *= (num_prompts / rate) / arrivals[-1]
        arrivals -= arrivals[0]
    ends = np.cumsum(inputs)
    return [{"arrival_time": float(t), "max_tokens": int(o),
             "prompt_token_ids": list(range(int(e - n) + 1, int(e) + 1))}
            for t, n, o, e in zip(arrivals, inputs, outputs, ends)]


def bench_result(requests: pl.DataFrame, steps: pl.DataFrame, rate: float, model: str
                 ) -> dict:
    """vllm bench serve's result JSON of a simulated run (module docstring)."""
    frame = requests.sort("arrival_ms")
    end = (steps["start_ms"] + steps["duration_ms"]).to_numpy()
    step_index = {s: i for i, s in enumerate(steps["step"].to_list())}
    ttft = (frame["ttft_ms"] / 1e3).to_list()
    latency = ((frame["finish_ms"] - frame["arrival_ms"]) / 1e3).to_list()
    outs = frame["output_tokens"].to_list()
    itls = []
    for first, finish, n in zip(frame["first_token_step"], frame["finish_step"], outs):
        times = end[step_index[first]:step_index[finish] + 1]
        gaps = np.diff(times) / 1e3
        itls.append(gaps.tolist() if gaps.size == n - 1 else
                    [float(times[-1] - times[0]) / 1e3 / max(n - 1, 1)] * (n - 1))
    tpots = [(lat - t) / (n - 1) for lat, t, n in zip(latency, ttft, outs) if n > 1]
    duration = float(frame["finish_ms"].max() - frame["arrival_ms"].min()) / 1e3
    result = {"date": "synthetic", "endpoint_type": "vllm", "backend": "vllm",
              "label": None, "model_id": model, "tokenizer_id": model,
              "num_prompts": frame.height, "request_rate": rate if rate < float("inf")
              else "inf", "burstiness": 1.0, "max_concurrency": None,
              "duration": duration, "completed": frame.height, "failed": 0,
              "total_input_tokens": int(frame["prompt_tokens"].sum()),
              "total_output_tokens": int(sum(outs)),
              "request_throughput": frame.height / duration,
              "input_lens": frame["prompt_tokens"].to_list(), "output_lens": outs,
              "ttfts": ttft, "itls": itls, "latencies": latency,
              "start_times": (frame["arrival_ms"] / 1e3 + 1000.0).to_list(),
              "errors": [""] * frame.height}
    pooled = [g for gaps in itls for g in gaps]
    for name, values in (("ttft", ttft), ("tpot", tpots), ("itl", pooled), ("e2el", latency)):
        values = np.asarray(values or [0.0]) * 1e3
        result.update({f"mean_{name}_ms": float(values.mean()),
                       f"median_{name}_ms": float(np.median(values)),
                       f"std_{name}_ms": float(values.std()),
                       f"p99_{name}_ms": float(np.percentile(values, 99))})
    return result


def simulated(*, model: str, gpu_type: str, mfu: float, mbu: float, num_prompts: int,
              input_len: int, output_len: int, range_ratio: float, rate: float, seed: int,
              tensor_parallel: int = 1, step_model: list[str] | None = None,
              batched: int = 8192) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(requests, steps) of ``simulate`` on the random dataset (see ``synthesize``)."""
    from pipeline.cli import main
    lines = workload(num_prompts, input_len, output_len, range_ratio, rate, seed)
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "bench.jsonl"
        trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
        tokens = sum(len(x["prompt_token_ids"]) + x["max_tokens"] for x in lines)
        roofline = ["--latency", "roofline", "--model", model, "--mfu-prefill", str(mfu),
                    "--mbu-decode", str(mbu)]
        argv = ["simulate", str(trace), "--out", str(Path(scratch) / "run"), "--gpu-type",
                gpu_type, *(step_model or roofline), "--gpu", str(tokens + 64),
                "--max-num-seqs", "1024", "--max-num-batched-tokens", str(batched),
                "--tensor-parallel-size", str(tensor_parallel)]
        code = main(argv)
        if code:
            raise SystemExit(f"simulate failed ({code})")
        run = Path(scratch) / "run"
        return (pl.read_parquet(run / "requests.parquet"),
                pl.read_parquet(run / "steps.parquet"))


def synthesize(out: Path, *, model: str, gpu_type: str, mfu: float, mbu: float,
               num_prompts: int, input_len: int, output_len: int, range_ratio: float,
               rate: float, seed: int, tensor_parallel: int = 1,
               step_model: list[str] | None = None, batched: int = 8192) -> dict:
    """Simulate and write ``out`` (module docstring); returns the result. ``step_model``:
    simulate's options of another step-time model (``--latency profile:DIR
    --model-config PATH``) instead of the roofline of ``model`` with ``mfu`` and ``mbu``;
    ``batched``: ``--max-num-batched-tokens``."""
    requests, steps = simulated(model=model, gpu_type=gpu_type, mfu=mfu, mbu=mbu,
                                num_prompts=num_prompts, input_len=input_len,
                                output_len=output_len, range_ratio=range_ratio, rate=rate,
                                seed=seed, tensor_parallel=tensor_parallel,
                                step_model=step_model, batched=batched)
    result = bench_result(requests, steps, rate, model)
    out.write_text(json.dumps(result))
    return result


def run_parser(doc: str, rate: float) -> argparse.ArgumentParser:
    """The synthetic run's options (``vllm bench serve``'s names), shared with
    ``synth_vllm_metrics.py``; ``run_options`` turns them into ``simulated``'s keywords."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--gpu-type", default="H100")
    parser.add_argument("--mfu", type=float, default=0.55)
    parser.add_argument("--mbu", type=float, default=0.8)
    parser.add_argument("--num-prompts", type=int, default=60)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--range-ratio", type=float, default=0.5)
    parser.add_argument("--request-rate", type=float, default=rate)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def run_options(args: argparse.Namespace) -> dict:
    return dict(model=args.model, gpu_type=args.gpu_type, mfu=args.mfu, mbu=args.mbu,
                num_prompts=args.num_prompts, input_len=args.input_len,
                output_len=args.output_len, range_ratio=args.range_ratio,
                rate=args.request_rate, seed=args.seed,
                tensor_parallel=args.tensor_parallel_size)


def main() -> int:
    args = run_parser(__doc__, 4.0).parse_args()
    result = synthesize(args.output, **run_options(args))
    print(f"wrote {args.output}: {result['completed']} requests, median TTFT "
          f"{result['median_ttft_ms']:.1f} ms, median TPOT {result['median_tpot_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
