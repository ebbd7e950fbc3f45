"""The report pages' time rules: one duration formatter, log axes beyond a 100x span."""

import re

import polars as pl
import pytest

from pipeline.charts.durations import format_duration, needs_log, scale_for, time_axis
from pipeline.charts.summary import cell_text, overload_text, tier_text
from pipeline.steptime.tpot import tpot_quantiles


@pytest.mark.parametrize("ms, text", [
    (0.0, "0 ms"), (2.9227, "2.92 ms"), (812.4, "812 ms"), (999.4, "999 ms"),
    (1_000.0, "1.00 s"), (12_400.0, "12.4 s"), (121_991.0, "122 s"), (599_000.0, "599 s"),
    (600_000.0, "10.0 min"), (3_738_000.0, "62.3 min"), (None, "n/a"),
    (float("nan"), "n/a")])
def test_durations_read_in_ms_s_or_min(ms, text):
    assert format_duration(ms) == text


@pytest.mark.parametrize("ms", [1e-3, 0.5, 7.0, 999.0, 1234.5, 99_999.0, 3.6e6, 8.64e7, 1e9])
def test_no_duration_has_more_than_three_integer_digits_in_ms(ms):
    text = format_duration(ms)
    number, unit = text.rsplit(" ", 1)
    assert unit in ("ms", "s", "min")
    if unit in ("ms", "s"):
        assert len(re.sub(r"\D", "", number.split(".")[0])) <= 3, text


def test_log_only_beyond_a_hundredfold_span():
    assert not needs_log([1.0, 100.0])                   # exactly 100x: linear
    assert needs_log([1.0, 100.5])
    assert not needs_log([0.0, -5.0, 3.0, 250.0])        # positive values 3 .. 250: 83x
    assert needs_log([0.0, 2.0, 250.0])
    assert not needs_log([]) and not needs_log([None, float("nan")])
    log, suffix = scale_for([1, 1000])
    assert log.type == "log" and suffix == " (log scale)"
    linear, suffix = scale_for([10, 20])
    assert linear.type == "linear" and suffix == ""


def test_time_axis_in_seconds_above_ten_seconds_and_says_log():
    short = time_axis([2.9, 3.1], "TTFT")
    assert (short.unit, short.divisor, short.log, short.title) == ("ms", 1.0, False,
                                                                    "TTFT (ms)")
    long = time_axis([114.0, 179_348.0], "TTFT p90")
    assert (long.unit, long.divisor, long.log) == ("s", 1e3, True)
    assert long.title == "TTFT p90 (s) (log scale)"
    assert time_axis([9_000.0, 10_000.0], "t").unit == "ms"           # 10 s is not above


def test_cells_word_durations_ratios_and_flags():
    assert cell_text("ttft_p90_ms", 1_234_567.0) == "20.6 min"
    assert cell_text("hit_ratio", 0.3256) == "32.6 %"
    assert cell_text("overloaded", True) == "yes" and cell_text("x", None) == "n/a"
    assert tier_text(0.5, 0.2) == "GPU 50.0 % / CPU 20.0 % / recomputed 30.0 %"


def test_overload_read_by_key_or_not_assessed():
    assert overload_text([{"ttft_ms_p90": 1.0}]) == "overload: not assessed"
    assert overload_text([{"overloaded": None}]) == "overload: not assessed"
    assert overload_text([{"overloaded": False}, {"overloaded": False}]).startswith(
        "overloaded: no")
    text = overload_text([{"overloaded": False, "offered_rate": 1.0},
                          {"overloaded": True, "offered_rate": 16.0, "served_rate": 4.5,
                           "queue_at_last_arrival": 40, "label": "rate 16/s"}])
    assert text.startswith("overloaded: yes (1 of 2 points; rate 16/s")
    assert "16 requests/s" in text and "4.5 requests/s" in text and "40 queued" in text


def test_tpot_is_decode_time_over_output_tokens_after_the_first():
    requests = pl.DataFrame({"first_token_ms": [10.0, 10.0, 5.0],
                             "finish_ms": [40.0, 110.0, 5.0], "output_tokens": [4, 11, 1]})
    figures = tpot_quantiles(requests)                     # 30/3 = 10, 100/10 = 10; 1 token out
    assert figures == {"tpot_ms_p50": pytest.approx(10.0), "tpot_ms_p90": pytest.approx(10.0)}
    assert tpot_quantiles(requests.drop("finish_ms")) == {"tpot_ms_p50": None,
                                                          "tpot_ms_p90": None}


def test_a_timed_run_prints_long_ttft_in_seconds_and_minutes():
    from pipeline.commands.simulate_time import metric_lines
    metrics = {"step_time_model": "roofline (H100)", "ttft_ms_p50": 95_081.5,
               "ttft_ms_p90": 3_907_751.0, "ttft_ms_p99": 812.0, "queue_ms_p90": 3_900_000.0,
               "request_throughput": 2.0, "output_throughput": 10.0, "duration_s": 100.0,
               "gpu_hit_ratio": 0.5, "cpu_hit_ratio": 0.0, "vllm_prefix_cache_hit_rate": 0.5,
               "vllm_log_hit_rate_final": 0.5}
    first = metric_lines(metrics)[0]
    assert first.startswith("TTFT p50 / p90 / p99: 95.1 s / 65.1 min / 812 ms, queue p90 65.0 min")
    assert "3,907" not in first and "95,081" not in first
