"""The simulate (--gpu CAPS --report) and fleet pages: the summary on top, TTFT against
request rate in the embedded Vega-Lite spec, log axes only beyond 100x, bars (not a lone
dot) for one capacity, and no 7-digit milliseconds. Pages are built from small frames."""

import json
import re
from types import SimpleNamespace

import polars as pl
import pytest

from pipeline.charts.summary import engine_configuration, provenance_text
from pipeline.charts.fleet import report_html
from pipeline.charts.steptime import curves_page
from pipeline.steptime.curves import CURVE_SCHEMA, UPPER

LABEL = "roofline (L4, Qwen2.5-7B, bf16 weights)"
ARGS = SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=None,
                       no_chunked_prefill=False, async_scheduling=False, block_size=16,
                       cpu=0, cpu_tier_model=None, model="qwen2.5-7b")
CONFIG = engine_configuration(ARGS, None)


def _curves(capacities, rates, ttft=lambda c, r: 100.0 + 1e6 * r / c, extra=None):
    rows = []
    for c in capacities:
        rows.append({"curve": UPPER, "load": "concurrency 1 (one pass)", "load_kind":
                     "one-pass", "load_value": 1.0, "gpu_capacity": c, "hit_ratio": 0.3,
                     "gpu_hit_ratio": 0.3, "cpu_hit_ratio": 0.0, "ttft_ms_p50": 100.0,
                     "ttft_ms_p90": 110.0, "ttft_ms_p99": 120.0, "step_time_model": LABEL})
        for r in rates:
            t = ttft(c, r)
            rows.append({"curve": "under load", "load": f"rate {r:g}/s", "load_kind": "rate",
                         "load_value": r, "gpu_capacity": c, "hit_ratio": 0.3,
                         "gpu_hit_ratio": 0.25, "cpu_hit_ratio": 0.05, "ttft_ms_p50": t,
                         "ttft_ms_p90": 2 * t, "ttft_ms_p99": 3 * t, "request_rate": r,
                         "tpot_ms_p50": 20.0, "tpot_ms_p90": 30.0, "step_time_model": LABEL,
                         **(extra(c, r) if extra else {})})
    return pl.DataFrame(rows, schema=CURVE_SCHEMA)


def _specs(page: str) -> dict:
    line = next(l for l in page.splitlines() if l.startswith("const kvlabSpecs = "))
    return json.loads(line[len("const kvlabSpecs = "):-1])


def _units(spec):
    """Every (mark, encoding, data rows) unit of a spec, layers and concats walked."""
    datasets = spec.get("datasets", {})

    def rows(node, inherited):
        data = node.get("data", inherited)
        if isinstance(data, dict) and "name" in data:
            return datasets.get(data["name"], [])
        return (data or {}).get("values", []) if isinstance(data, dict) else []

    def walk(node, inherited=None):
        data = node.get("data", inherited)
        if "encoding" in node and "mark" in node:
            yield node["mark"], node["encoding"], rows(node, inherited)
        for key in ("layer", "hconcat", "vconcat", "concat"):
            for child in node.get(key, []):
                yield from walk(child, data)
        if "spec" in node:
            yield from walk(node["spec"], data)
    return list(walk(spec))


def _mark(mark):
    return mark if isinstance(mark, str) else mark["type"]


def _summary(page: str) -> str:
    return page[page.index('<section class="summary">'):page.index("</section>")]


def test_simulate_page_opens_with_the_summary():
    page = curves_page(_curves([2000, 40000], [1.0, 4.0, 16.0]), "--pattern x: 64 requests",
                       CONFIG, "roofline (L4): roofline lower bound, not measured: 121 TFLOP/s")
    summary = _summary(page)
    assert page.index('<section class="summary">') < page.index('id="chart-')
    for text in ("workload", "qwen2.5-7b", "block size",
                 "16 tokens", "max_num_seqs 256", "GPU KV capacities",
                 "2 capacities, 2,000 to 40,000 tokens", "rate 1/s, rate 4/s, rate 16/s",
                 "overload: not assessed", "hit ratio by tier",
                 "GPU 25.0 % / CPU 5.0 % / recomputed 70.0 %", "TTFT p50", "TTFT p90",
                 "TTFT p99", "TPOT p50", "TPOT p90", "step time", "121 TFLOP/s"):
        assert text in summary, text


def test_simulate_rate_chart_puts_ttft_p50_p90_against_request_rate():
    page = curves_page(_curves([2000, 40000], [1.0, 4.0, 16.0]), "w", CONFIG, "p")
    units = _units(_specs(page)["#chart-load-rate"])
    lines = [(enc, data) for mark, enc, data in units if _mark(mark) == "line"]
    assert lines
    encoding, data = lines[0]
    assert encoding["x"]["field"] == "request_rate" and "request rate" in encoding["x"]["title"]
    assert encoding["y"]["title"].startswith("TTFT")
    assert {row["statistic"] for row in data} == {"p50", "p90"}
    assert sorted({row["request_rate"] for row in data}) == [1.0, 4.0, 16.0]
    assert {row["capacity"] for row in data} == {"GPU 2,000 tokens", "GPU 40,000 tokens"}
    p90 = {(r["capacity"], r["request_rate"]): r["ttft_ms"] for r in data
           if r["statistic"] == "p90"}
    assert p90[("GPU 2,000 tokens", 16.0)] == pytest.approx(2 * (100 + 1e6 * 16 / 2000))


def test_time_axes_log_beyond_a_hundredfold_span_linear_within():
    wide = _specs(curves_page(_curves([2000, 40000], [1.0, 16.0],
                                      ttft=lambda c, r: 50.0 * r ** 3), "w", CONFIG, "p"))
    (_, enc, data), *_ = [u for u in _units(wide["#chart-load-rate"]) if _mark(u[0]) == "line"]
    assert enc["y"]["scale"]["type"] == "log" and enc["y"]["title"].endswith("(log scale)")
    assert "(s)" in enc["y"]["title"]                      # 409.6 s at the top: seconds
    assert max(r["value"] for r in data) == pytest.approx(2 * 50 * 16 ** 3 / 1e3)
    narrow = _specs(curves_page(_curves([2000, 40000], [1.0, 2.0],
                                        ttft=lambda c, r: 100.0 + r), "w", CONFIG, "p"))
    (_, enc, _), *_ = [u for u in _units(narrow["#chart-load-rate"]) if _mark(u[0]) == "line"]
    assert enc["y"]["scale"]["type"] == "linear" and "log" not in enc["y"]["title"]
    assert enc["y"]["title"] == "TTFT (ms)"


def test_one_capacity_and_one_load_are_bars_not_a_lone_point():
    page = curves_page(_curves([20000], [4.0]), "w", CONFIG, "p")
    specs = _specs(page)
    marks = {key: {_mark(m) for m, _, _ in _units(spec)} for key, spec in specs.items()}
    assert "bar" in marks["#chart-load-rate"] and "line" not in marks["#chart-load-rate"]
    assert "bar" in marks["#chart-load-hit"]
    assert "#chart-load-ttft" not in specs          # no capacity axis for one capacity
    for key, spec in specs.items():                 # no chart is a single point
        for mark, _, data in _units(spec):
            assert not (_mark(mark) in ("line", "point") and len(data) <= 2), key


def test_no_seven_digit_milliseconds_on_the_page():
    page = curves_page(_curves([2000, 40000], [1.0, 16.0],
                               ttft=lambda c, r: 3_000_000.0 * r / 16), "w", CONFIG, "p")
    text = re.sub(r"<script>.*?</script>", "", page, flags=re.S)
    assert not re.search(r"\d{1,3}(,\d{3})+(\.\d+)? ms|\d{4,} ms", text)
    assert "50.0 min" in text or "100.0 min" in text


def test_overload_keys_are_shown_when_the_points_carry_them():
    page = curves_page(_curves([2000, 40000], [1.0, 16.0], extra=lambda c, r: {
        "overloaded": r > 8, "offered_rate": r, "served_rate": min(r, 5.0),
        "queue_at_last_arrival": 30.0 if r > 8 else 0.0}), "w", CONFIG, "p")
    summary = _summary(page)
    assert "overloaded: yes (2 of 4 points" in summary and "served 5 requests/s" in summary
    assert "not assessed" not in summary
    rate = json.dumps(_specs(page)["#chart-load-rate"])      # the overloaded points circled
    assert "datum.overloaded" in rate and "circled: the 2 overloaded points" in page
    plain = curves_page(_curves([2000, 40000], [1.0, 16.0]), "w", CONFIG, "p")
    assert "datum.overloaded" not in json.dumps(_specs(plain)["#chart-load-rate"])


def test_provenance_names_the_clock_without_a_model():
    assert provenance_text(None) == "steps clock: no time model"
    model = SimpleNamespace(label="fitted (f.json: vllm, m)", provenance="fitted by least "
                            "squares (vllm, m) from run.jsonl: a 1")
    assert provenance_text(model) == ("fitted (f.json: vllm, m): fitted by least squares "
                                      "(vllm, m) from run.jsonl: a 1")


def _fleet(blocks=(40, 80), loads=(1.0, 4.0)):
    rows, requests = [], []
    for router in ("round-robin", "kv-cost"):
        for b in blocks:
            for x in loads:
                ttft = 3.0 * x * (80 / b) * (1 if router == "kv-cost" else 2)
                rows.append({"router": router, "instances": 2, "gpu_blocks": b, "load": x,
                             "requests": 3, "prompt_tokens": 300, "gpu_hit_tokens": 120,
                             "cpu_hit_tokens": 30, "hit_ratio": 0.5, "ttft_p50_ms": ttft,
                             "ttft_p90_ms": 2 * ttft, "ttft_p99_ms": 3 * ttft,
                             "queue_p90_ms": 0.0, "output_tokens": 12,
                             "throughput_rps": 2.0 * x, "imbalance": 1.0})
                for i in range(3):                       # arrivals 0, 1, 2 s at load 1
                    arrival = 1000.0 * i / x
                    requests.append({"router": router, "instances": 2, "gpu_blocks": b,
                                     "load": x, "arrival_ms": arrival,
                                     "first_token_ms": arrival + ttft,
                                     "finish_ms": arrival + ttft + 30.0, "output_tokens": 4})
    return pl.DataFrame(rows), pl.DataFrame(requests)


def test_fleet_page_summary_and_ttft_against_request_rate_per_router():
    fleet, requests = _fleet()
    page = report_html(fleet, "--pattern groups 3x2", LABEL, requests, CONFIG,
                       "roofline (H100): not measured")
    summary = _summary(page)
    for text in ("routers", "kv-cost, round-robin", "GPU blocks per instance", "40, 80",
                 "overload: not assessed", "GPU 40.0 %", "CPU 10.0 %", "recomputed",
                 "50.0 %", "TTFT p99", "TPOT p50", "10.0 ms", "roofline (H100): not measured",
                 "max_num_batched_tokens 8,192"):
        assert text in summary, text
    spec = _specs(page)["#chart-fleet-rate"]
    assert spec["facet"]["column"]["field"] == "fleet"       # 2 x 40 and 2 x 80 blocks
    (_, enc, data), *_ = [u for u in _units(spec) if _mark(u[0]) == "line"]
    assert enc["x"]["field"] == "request_rate" and enc["color"]["field"] == "router"
    assert {r["statistic"] for r in data} == {"p50", "p90"}
    assert sorted({r["request_rate"] for r in data}) == pytest.approx([1.0, 4.0])


def test_fleet_one_capacity_one_load_draws_bars():
    fleet, requests = _fleet(blocks=(80,), loads=(1.0,))
    specs = _specs(report_html(fleet, "w", LABEL, requests, CONFIG, "p"))
    for key in ("#chart-fleet-rate", "#chart-fleet-hit", "#chart-fleet-ttft"):
        assert {_mark(m) for m, _, _ in _units(specs[key])} & {"bar"}, key
        assert "line" not in {_mark(m) for m, _, _ in _units(specs[key])}, key


def test_fleet_offered_rate_of_the_detector_wins():
    fleet, requests = _fleet()
    fleet = fleet.with_columns(offered_rate=pl.col("load") * 10, overloaded=pl.col("load") > 2)
    page = report_html(fleet, "w", LABEL, requests, CONFIG, "p")
    (_, _, data), *_ = [u for u in _units(_specs(page)["#chart-fleet-rate"])
                        if _mark(u[0]) == "line"]
    assert sorted({r["request_rate"] for r in data}) == pytest.approx([10.0, 40.0])
    assert "overloaded: yes (4 of 8 points" in _summary(page)
