"""A toy engine registered from this file (one ``register_engine`` call, no other edit) is
what ``simulate --engine``, ``fleet --engine`` (in this process and in worker processes)
and ``plan --fleet --engine`` run, what ``--help`` lists and what the ``models`` record
names; an option another engine owns is a usage error naming it, both ways."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import polars as pl
import pytest

from pipeline.cli import main
from pipeline.components import engine_layout as L
from pipeline.engine.compiled import request_table, with_times
from pipeline.engine.config import EngineOption, SchedulerConfig
from pipeline.engine.engines import ENGINES, register_engine, unregister_engine
from pipeline.engine.loop import STEP_COLUMNS, SimResult
from pipeline.engine.step import StepRecord, TimedSteps


class _Nothing:
    """A cache snapshot that holds nothing."""

    def prefix_blocks(self, keys) -> int:
        return 0

    def key_count(self) -> int:
        return 0


class OneAtATimeInstance:
    """One toy engine: each step serves the oldest waiting request whole (its prompt and
    every output token) with no cache; ``--toy-idle-blocks`` blocks always free."""

    num_running = 0

    def __init__(self, config: SchedulerConfig, cpu_tier=None) -> None:
        if cpu_tier is not None:
            raise ValueError("the one-at-a-time engine has no CPU tier")
        self.config, self.block_size = config, config.block_size
        self.waiting: deque = deque()
        self.rows: dict[int, list[int]] = {}
        self.step_no = 0

    num_waiting = property(lambda self: len(self.waiting))
    free_blocks = property(lambda self: self.config.num_gpu_blocks - 1)

    def add_request(self, request, keys=None) -> None:
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting)

    def cached_prefix_blocks(self, keys) -> int:
        return 0

    def cached_key_count(self) -> int:
        return 0

    def cache_snapshot(self) -> _Nothing:
        return _Nothing()

    def serve(self) -> StepRecord:
        request, step = self.waiting.popleft(), self.step_no
        prompt = len(request.prompt_token_ids)
        row = [L.NONE] * L.R_COLUMNS
        for column, value in ((L.INDEX, request.index), (L.FSCHED, step), (L.FTOK, step),
                              (L.FIN, step), (L.GPUHIT, 0), (L.CPUHIT, 0),
                              (L.NPROMPT, prompt), (L.NTOK, prompt + request.max_tokens),
                              (L.PREEMPT, 0)):
            row[column] = value
        self.rows[request.index] = row
        self.step_no += 1
        return StepRecord(step, [(request.index, prompt, 0)], prompt, 0, 0, 0, 1,
                          len(self.waiting), self.free_blocks, [request.index],
                          [request.index])

    def run_until(self, until_ms: float, now_ms: float, step_ms) -> TimedSteps:
        steps, starts, durations, events, now = [], [], [], [], now_ms
        while now < until_ms and self.waiting:
            record = self.serve()
            steps.append([getattr(record, name) for name in STEP_COLUMNS])
            starts.append(now)
            durations.append(float(step_ms(record)))
            now += durations[-1]
            events += [[record.step, 0, record.finished[0]], [record.step, 1,
                                                             record.finished[0]]]
        return TimedSteps(now, np.array(steps, np.int64).reshape(-1, 8),
                          np.array(starts, np.float64), np.array(durations, np.float64),
                          np.array(events, np.int64).reshape(-1, 3))

    def request_rows(self, requests) -> np.ndarray:
        return np.array([self.rows[r.index] for r in requests], np.int64)


class OneAtATime:
    """``one-at-a-time``: a toy engine, every request served alone in one step, no cache."""

    NAME = "one-at-a-time"
    SUMMARY = "a toy: one request per step, no cache"
    COMPILED = False
    OPTIONS = (EngineOption("--toy-idle-blocks", dict(type=int, help="unused (a toy's own "
                                                      "option)")),)

    @staticmethod
    def config(args, num_gpu_blocks: int, max_model_len: int) -> SchedulerConfig:
        return SchedulerConfig(num_gpu_blocks=num_gpu_blocks, max_model_len=max_model_len,
                               block_size=args.block_size)

    instance = OneAtATimeInstance

    @staticmethod
    def simulate(requests, config, *, cpu_tier=None, clock="steps", step_ms=None,
                 concurrency=None, decode_run_ms=None) -> SimResult:
        if concurrency is not None:
            raise ValueError("the one-at-a-time engine takes arrivals, not a concurrency")
        engine, timed = OneAtATimeInstance(config, cpu_tier), clock == "time"
        due = [(r.arrival_s or 0.0) * 1000.0 if timed else float(r.arrival_step or 0)
               for r in requests]
        price = step_ms if timed else (lambda record: 1.0)
        parts, now, pointer = [], 0.0, 0
        while pointer < len(requests):
            now = max(now, due[pointer])
            while pointer < len(requests) and due[pointer] <= now:
                engine.add_request(requests[pointer])
                pointer += 1
            part = engine.run_until(due[pointer] if pointer < len(requests) else np.inf,
                                    now, price)
            parts.append(part)
            now = part.now_ms
        rows = engine.request_rows(requests)
        steps = np.concatenate([p.steps for p in parts])
        frame = request_table(rows, np.array(due), timed)
        step_frame = pl.DataFrame({name: steps[:, j] for j, name in enumerate(STEP_COLUMNS)})
        if not timed:
            return SimResult(frame, step_frame)
        start = np.concatenate([p.start_ms for p in parts])
        end = start + np.concatenate([p.duration_ms for p in parts])
        at = rows[:, L.FIN]
        return SimResult(with_times(frame, np.array(due), start[at], end[at], end[at]),
                         step_frame.with_columns(start_ms=pl.Series(start),
                                                 duration_ms=pl.Series(end - start)))


@pytest.fixture
def engine():
    yield register_engine(OneAtATime)
    unregister_engine("one-at-a-time")


WORKLOAD = ["--pattern", "long-doc-qa", "--num-documents", "3", "--document-length", "600",
            "--model", "qwen2.5-1.5b"]


def test_register_refuses_a_taken_name(engine):
    with pytest.raises(ValueError, match="taken"):
        register_engine(OneAtATime)
    assert list(ENGINES) == ["vllm", "sglang", "one-at-a-time"]


@pytest.mark.parametrize("command", ["simulate", "fleet", "plan"])
def test_help_lists_the_toy_engine(engine, command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    assert "one-at-a-time" in shown and "--toy-idle-blocks" in shown


def test_simulate_runs_the_toy_engine(engine, tmp_path, capsys):
    """Every request arrives at step 0: n requests in n steps, request i served alone at
    step i, no prefix hit."""
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "one-at-a-time",
                 "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("models: engine one-at-a-time (a toy: one request per step, "
                            "no cache), CPU none (no CPU tier)\n")
    requests = pl.read_parquet(out / "requests.parquet")
    n = requests.height
    assert f"{n} requests in {n} steps: GPU prefix hits 0 of" in shown
    assert requests["first_scheduled_step"].to_list() == list(range(n))
    assert requests["finish_step"].to_list() == list(range(n))
    assert requests["gpu_hit_tokens"].sum() == 0
    steps = pl.read_parquet(out / "steps.parquet")
    assert steps["prefill_tokens"].to_list() == requests["prompt_tokens"].to_list()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["models"] == {"engine": "one-at-a-time", "gpu": None, "cpu": None}


def test_simulate_times_the_toy_engine(engine, tmp_path, capsys):
    """On the time clock request i finishes at the sum of the first i + 1 steps' times."""
    out = tmp_path / "sim"
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks", "--engine", "one-at-a-time",
                 "--latency", "roofline", "--out", str(out)]) == 0
    capsys.readouterr()
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert requests["finish_ms"].to_list() == pytest.approx(
        np.cumsum(steps["duration_ms"].to_numpy()).tolist())


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_fleet_runs_the_toy_engine(engine, jobs, tmp_path, capsys):
    """Each instance serves its requests one per step: no prefix hit anywhere."""
    out = tmp_path / "fleet"
    assert main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--engine", "one-at-a-time",
                 "--router", "round-robin,least-loaded", "--instances", "1,2", "--jobs",
                 jobs, "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("models: engine one-at-a-time")
    requests = pl.read_parquet(out / "requests")
    assert requests["gpu_hit_tokens"].sum() == 0 and requests["point"].n_unique() == 4
    assert (requests["first_token_step"] == requests["finish_step"]).all()
    steps = pl.read_parquet(out / "steps")
    assert steps.height == requests.height          # one step per request
    assert "one-at-a-time" in (out / "report.html").read_text()


def test_fleet_workers_answer_as_this_process(engine, tmp_path, capsys):
    frames = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--engine", "one-at-a-time",
              "--router", "least-loaded", "--instances", "2", "--jobs", jobs, "--out",
              str(out)])
        frames.append(pl.read_parquet(out / "requests").sort("request"))
    capsys.readouterr()
    assert frames[0].equals(frames[1])


def test_plan_fleet_runs_the_toy_engine(engine, capsys):
    plan = ["plan", "--fleet", *WORKLOAD, "--instances", "2", "--router", "round-robin",
            "--target-hit-ratio", "0.1", "--engine", "one-at-a-time", "--json"]
    documents = []
    for jobs in ("1", "2"):
        main([*plan, "--jobs", jobs])
        documents.append(json.loads(capsys.readouterr().out))
    assert documents[0] == documents[1]
    assert documents[0]["cache_models"]["engine"] == "one-at-a-time"
    assert all(a["status"] != "met" for a in documents[0]["answers"])   # no cache, no hit


@pytest.mark.parametrize("command", [["simulate", "--out", "x"], ["fleet"],
                                     ["plan", "--fleet", "--instances", "2",
                                      "--target-hit-ratio", "0.1"]])
def test_another_engines_option_is_a_usage_error(engine, command, capsys):
    for given, message in (
            (["--engine", "one-at-a-time", "--no-chunked-prefill"],
             "--no-chunked-prefill applies to the vllm engine, not --engine one-at-a-time"),
            (["--toy-idle-blocks", "3"],
             "--toy-idle-blocks applies to the one-at-a-time engine, not --engine vllm")):
        assert main([*command, *WORKLOAD, "--gpu", "64blocks", *given]) == 2
        assert message in capsys.readouterr().err


def test_curves_refuse_another_engine(engine, capsys):
    assert main(["simulate", *WORKLOAD, "--gpu", "64blocks,128blocks", "--latency",
                 "roofline", "--engine", "one-at-a-time", "--out", "x"]) == 2
    assert "--engine one-at-a-time: curves run vLLM's engine only" in capsys.readouterr().err


def test_fleet_names_an_engine_its_workers_cannot_get(tmp_path, capsys):
    """An engine class defined inside a function cannot travel to a worker process: one
    line naming it, before any point runs."""
    class Local(OneAtATime):
        NAME = "local-engine"
        OPTIONS = ()

    register_engine(Local)
    try:
        assert main(["fleet", *WORKLOAD, "--gpu", "64blocks", "--engine", "local-engine",
                     "--jobs", "2", "--out", str(tmp_path / "out")]) == 1
    finally:
        unregister_engine("local-engine")
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "registered at run time, cannot be sent" in error[0]
    assert "local-engine" in error[0]
    assert not (tmp_path / "out" / "requests").exists()
