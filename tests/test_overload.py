"""Overloaded runs: the rule on synthetic timelines (pipeline.engine.overload), and the
``warning: overloaded:`` line and ``overloaded`` keys of simulate, fleet and plan."""

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_TRACES, cli_in_process
from pipeline.engine.overload import (POINT_LINES, QUEUE_MIN, overload, overload_of,
                                      warning_line, warning_lines)

WARNING = "warning: overloaded:"


def fifo(arrival, service: float, servers: int = 1):
    """(first scheduled, finish) times of a FIFO queue with ``servers`` servers and a
    fixed service time: the timeline of an engine with a fixed capacity."""
    free = np.zeros(servers)
    start, finish = [], []
    for a in arrival:
        k = int(np.argmin(free))
        s = max(a, free[k])
        free[k] = s + service
        start.append(s)
        finish.append(s + service)
    return np.array(start), np.array(finish)


def poisson(rate: float, n: int, seed: int) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def test_the_figures_of_a_hand_made_timeline():
    # arrivals at 0, 1, 2, 3; one server of 2 s: starts 0, 2, 4, 6; finishes 2, 4, 6, 8
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    start, finish = fifo(arrival, 2.0)
    figures = overload(arrival, start, finish, "s")
    assert figures.offered_rate == 4 / 3 and figures.served_rate == 4 / 6
    # at 3 s four have arrived and two started (at 0 and 2 s): those of 2 and 3 s wait
    assert figures.queue_at_last_arrival == 2 and figures.peak_queue == 2
    assert figures.drain == 5.0
    assert not figures.overloaded            # fewer than QUEUE_MIN requests ever wait
    assert figures.metrics()["rate_unit"] == "requests/s"


@settings(max_examples=30, deadline=None)
@given(load=st.floats(0.2, 0.8), n=st.integers(200, 1500), seed=st.integers(0, 1000),
       servers=st.integers(1, 4))
def test_a_stable_open_loop_is_not_overloaded(load, n, seed, servers):
    arrival = poisson(load * servers, n, seed)
    assert not overload(arrival, *fifo(arrival, 1.0, servers), "s").overloaded


@settings(max_examples=30, deadline=None)
@given(excess=st.floats(1.3, 4.0), n=st.integers(200, 1500), seed=st.integers(0, 1000),
       servers=st.integers(1, 4))
def test_an_open_loop_above_capacity_is_overloaded(excess, n, seed, servers):
    arrival = poisson(excess * servers, n, seed)
    figures = overload(arrival, *fifo(arrival, 1.0, servers), "s")
    assert figures.overloaded
    assert figures.served_rate == pytest.approx(servers, rel=0.05)     # the capacity
    assert figures.queue_at_last_arrival > 0.05 * n                     # it grew


@pytest.mark.parametrize("burst", [50, 400])
def test_a_burst_that_drains_is_not_overloaded(burst):
    # a burst of requests at 0 (peak queue = the burst), then half the capacity for 1,000 s
    arrival = np.concatenate([np.zeros(burst), poisson(0.5, 500, 1)])
    figures = overload(arrival, *fifo(arrival, 1.0), "s")
    assert figures.peak_queue >= burst - 1 and not figures.overloaded


def test_twice_the_capacity_is_overloaded_and_the_same_load_halved_is_not():
    arrival = np.arange(1000) * 0.5                   # 2 per second, one per second served
    over = overload(arrival, *fifo(arrival, 1.0), "s")
    assert over.overloaded and over.queue_at_last_arrival == pytest.approx(500, abs=2)
    assert over.offered_rate == pytest.approx(2.0, rel=0.01)
    assert over.served_rate == pytest.approx(1.0, rel=0.01)
    arrival = arrival * 4                             # 0.5 per second
    assert not overload(arrival, *fifo(arrival, 1.0), "s").overloaded


def test_a_closed_loop_with_a_steady_queue_is_not_overloaded():
    # K = 50 outstanding on 10 servers: 40 always wait, but the queue does not grow
    servers, k, n, service = 10, 50, 2000, 1.0
    free = np.zeros(servers)
    arrival = [0.0] * k
    start, finish = [], []
    for i in range(n):
        s = max(arrival[i], free.min())
        j = int(np.argmin(free))
        free[j] = s + service
        start.append(s)
        finish.append(s + service)
        if len(arrival) < n:
            arrival.append(s + service)              # the next request as one completes
    figures = overload(np.array(arrival), np.array(start), np.array(finish), "s")
    assert figures.queue_at_last_arrival >= QUEUE_MIN and not figures.overloaded


def test_one_arrival_moment_has_no_rate_and_is_not_overloaded():
    arrival = np.zeros(500)
    figures = overload(arrival, *fifo(arrival, 1.0), "step")
    assert figures.offered_rate is None and not figures.overloaded
    assert figures.peak_queue == 499
    assert overload([], [], [], "s").requests == 0


def test_a_request_never_scheduled_waits_to_the_end():
    arrival = np.arange(100.0)
    start = np.where(arrival < 50, arrival, np.nan)
    figures = overload(arrival, start, np.where(arrival < 50, arrival + 0.5, np.nan), "s")
    assert figures.queue_at_last_arrival == 50 and figures.served_rate == 50 / 49


def test_overload_of_reads_either_clock():
    steps = pl.DataFrame({"arrival_step": [0, 10, 20], "first_scheduled_step": [0, 10, 20],
                          "finish_step": [1, 11, 21]})
    assert overload_of(steps).unit == "step" and overload_of(steps).offered_rate == 3 / 20
    timed = pl.DataFrame({"arrival_ms": [0.0, 1000.0], "first_scheduled_ms": [0.0, 1000.0],
                          "finish_ms": [5.0, 1005.0]})
    assert overload_of(timed).unit == "s" and overload_of(timed).offered_rate == 2.0


def _point(i: int, ratio: float) -> dict:
    return {"name": f"p{i}", "overloaded": ratio > 1, "offered_rate": ratio,
            "served_rate": 1.0, "queue_at_last_arrival": 10 * i, "requests": 100}


def test_a_sweep_prints_a_line_per_point_or_one_with_the_worst():
    few = [_point(i, r) for i, r in enumerate([2.0, 0.5, 3.0])]
    lines = warning_lines(few, lambda p: p["name"])
    assert lines == [warning_line(few[2], "p2"), warning_line(few[0], "p0")]
    many = [_point(i, 1.5 + i) for i in range(POINT_LINES + 2)] + [_point(9, 0.5)]
    lines = warning_lines(many, lambda p: p["name"])
    assert len(lines) == 1 and lines[0].startswith(
        f"{WARNING} {POINT_LINES + 2} of {len(many)} points; the worst, p{POINT_LINES + 1}: ")
    assert lines[0].endswith("requests still queued when the last arrived (of 100)")


# --------------------------------------------------------------------------- the commands

LDQA = ["--pattern", "long-doc-qa", "--num-documents", "20", "--document-length", "200",
        "--output-tokens", "4", "--max-num-seqs", "1"]


@pytest.mark.parametrize("clock", [[], ["--latency", "roofline", "--model", "qwen2.5-1.5b"]],
                         ids=["steps", "time"])
def test_simulate_warns_when_overloaded_and_not_under_a_light_load(tmp_path, clock):
    unit = "req/s" if clock else "req/step"
    heavy, light = ("2000", "20") if clock else ("1", "0.1")
    done = cli_in_process("simulate", *LDQA, "--gpu", "300blocks", "--rate", heavy,
                          *clock, "--out", str(tmp_path / "heavy"))
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[-1]
    assert line.startswith(f"{WARNING} offered ") and f" {unit}, served " in line
    assert line.endswith("requests still queued when the last arrived (of 60)")
    metrics = json.loads((tmp_path / "heavy" / "metrics.json").read_text())
    assert metrics["overloaded"] is True
    assert metrics["offered_rate"] > 2 * metrics["served_rate"]
    assert f"{metrics['queue_at_last_arrival']:,} requests still queued" in line
    assert metrics["rate_unit"] == ("requests/s" if clock else "requests/step")
    done = cli_in_process("simulate", *LDQA, "--gpu", "300blocks", "--rate", light,
                          *clock, "--out", str(tmp_path / "light"))
    assert done.returncode == 0 and WARNING not in done.stdout + done.stderr
    assert json.loads((tmp_path / "light" / "metrics.json").read_text())["overloaded"] is False


def test_simulate_curves_mark_the_overloaded_points(tmp_path):
    done = cli_in_process("simulate", *LDQA, "--latency", "roofline", "--model", "qwen2.5-1.5b",
                          "--gpu", "4000,8000",
                          "--rate", "20,2000", "--out", str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr
    curves = pl.read_parquet(tmp_path / "c" / "curves.parquet")
    over = curves.filter(pl.col("overloaded"))
    assert over["load"].unique().to_list() == ["rate 2000/s"] and over.height == 2
    lines = [line for line in done.stdout.splitlines() if line.startswith(WARNING)]
    assert lines == [line for line in lines if "rate 2000/s, GPU " in line] and len(lines) == 2


FLEET = ["--pattern", "groups", "--groups", "3", "--users", "2", "--questions", "10",
         "--system-prompt-length", "128", "--question-length", "16", "--output-tokens", "4",
         "--latency", "roofline", "--model", "qwen2.5-1.5b", "--jobs", "1", "--max-num-seqs",
         "1", "--gpu", "40blocks"]


def test_fleet_marks_each_overloaded_point(tmp_path):
    # 400 requests/s offered; one engine running one request at a time serves about 87
    done = cli_in_process("fleet", *FLEET, "--instances", "1,5", "--rate", "400", "--out",
                          str(tmp_path / "f"))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(WARNING)]
    assert len(lines) == 1 and lines[0].startswith(
        f"{WARNING} round-robin, 1 instance x 40 GPU blocks, load 1: offered ")
    fleet = pl.read_parquet(tmp_path / "f" / "fleet.parquet").sort("instances")
    assert fleet["overloaded"].to_list() == [True, False]
    assert fleet["offered_rate"][0] > 2 * fleet["served_rate"][0]
    done = cli_in_process("fleet", *FLEET, "--instances", "1,5", "--rate", "400", "--json",
                          "--out", str(tmp_path / "j"))
    rows = [json.loads(line) for line in done.stdout.splitlines()]     # stdout: only JSON
    assert [r["overloaded"] for r in sorted(rows, key=lambda r: r["instances"])] == \
        [True, False]
    assert done.stderr.strip() == lines[0]


def test_fleet_under_a_light_load_says_nothing(tmp_path):
    done = cli_in_process("fleet", *FLEET, "--instances", "1", "--rate", "4", "--out",
                          str(tmp_path / "f"))
    assert done.returncode == 0 and WARNING not in done.stdout + done.stderr
    assert pl.read_parquet(tmp_path / "f" / "fleet.parquet")["overloaded"].to_list() == [False]


PLAN = ["--pattern", "long-doc-qa", "--num-documents", "20", "--document-length", "200",
        "--output-tokens", "4", "--latency", "roofline", "--model", "qwen2.5-1.5b",
        "--max-num-seqs", "1", "--target-ttft-p90-ms", "50"]


@pytest.mark.parametrize("rate, overloaded", [("2000", True), ("20", False)])
def test_plan_under_load_says_when_its_answer_is_queueing(rate, overloaded):
    done = cli_in_process("plan", *PLAN, "--rate", rate)
    assert (WARNING in done.stdout) is overloaded
    if overloaded:
        assert done.stdout.splitlines()[-1].startswith(f"{WARNING} the answer (")
    done = cli_in_process("plan", *PLAN, "--rate", rate, "--json")
    answer = json.loads(done.stdout)["answer"]                       # stdout: only JSON
    assert done.returncode == (1 if answer["status"] == "unreachable" else 0), done.stderr
    assert answer["overloaded"] is overloaded
    assert (answer["offered_rate"] > 2 * answer["served_rate"]) is overloaded
    assert done.stderr.startswith(WARNING) is overloaded


@pytest.mark.parametrize("rate, overloaded", [("400", True), ("4", False)])
def test_plan_fleet_says_when_an_answer_is_queueing(rate, overloaded):
    argv = ["plan", *FLEET, "--fleet", "--instances", "1", "--rate", rate,
            "--target-hit-ratio", "0.5"]
    done = cli_in_process(*argv)
    assert done.returncode == 0, done.stderr
    assert (f"{WARNING} the answer for round-robin (1 x 40 GPU blocks): offered"
            in done.stdout) is overloaded
    done = cli_in_process(*argv, "--json")
    answer = json.loads(done.stdout)["answers"][0]
    assert answer["overloaded"] is overloaded and answer["requests"] == 60
    assert (WARNING in done.stderr) is overloaded


def test_the_conversation_trace_at_its_own_rate_on_one_h100_is_overloaded(tmp_path):
    trace = SHARED_TRACES / "synthetic_trace.jsonl"
    if not trace.exists():
        pytest.skip(f"the shared trace {trace} is absent")
    done = cli_in_process("simulate", str(trace), "--format", "mooncake", "--latency",
                          "roofline", "--model", "llama-3.1-8b", "--gpu-type", "H100",
                          "--gpu", "12000blocks", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["overloaded"] is True and metrics["ttft_ms_p90"] > 60_000
    assert done.stdout.splitlines()[-1].startswith(f"{WARNING} offered ")
