"""The simulated schedule of measured requests: which steps ran, what each step did, when.

``simulate_run(run, engine, coefficients)`` is the one place the schedule comes from: every
step's cost features (``FEATURES``: 1, prefilled tokens, attended context tokens, decode
sequences, reloaded tokens, and attention pairs: query-key pairs under the causal mask,
``new x before + new (new + 1) / 2`` per scheduled request, what prefill attention costs) and its start and end under the step-time model
``step_ms = features @ coefficients`` (at least 0), the step that samples each request's
first token and the step that finishes it, and the prefix tokens each request found cached.

Source: the engine simulation (``pipeline.engine``: vLLM v1's scheduler and KV
cache manager on the time clock, ``engine_schedule``). ``serial_schedule`` is a plain
one-sequence-at-a-time engine that the tests hold it against (llama.cpp: ``max_num_seqs`` 1, the prompt in chunks of ``max_num_batched_tokens``
after the longest common prefix with the previous request's context, then one decode step
per further output token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.fit.inputs import Run
from pipeline.steptime.cost import StepCost, step_cost
from pipeline.base.fitted_step_time import NAMES, TERMS

__all__ = ["FEATURES", "EngineModel", "Schedule", "engine_schedule", "serial_schedule",
           "simulate_run", "step_features"]

#: the linear step-time form's coefficients, in its order (``steptime.fitted_file.TERMS``)
FEATURES = NAMES


@dataclass(frozen=True)
class EngineModel:
    """The scheduler settings a run is simulated with (SchedulerConfig's fields)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    num_gpu_blocks: int = 0            # 0: enough for every request's prompt
    max_model_len: int = 0             # 0: the longest request
    chunked_prefill: bool = True

    @classmethod
    def from_dict(cls, fields: dict) -> "EngineModel":
        known = {k: v for k, v in fields.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Schedule:
    """One run's schedule (see the module docstring); steps in execution order."""

    features: np.ndarray               # (steps, len(FEATURES))
    start_ms: np.ndarray
    end_ms: np.ndarray
    first_step: np.ndarray             # per request: its first scheduled step
    first_token_step: np.ndarray
    finish_step: np.ndarray
    hit_tokens: np.ndarray
    source: str
    #: when each request arrived: the measured send times (open loop) or, closed loop, the
    #: end of the step that freed its slot in the simulation
    arrival_ms: np.ndarray
    closed_loop: bool = False
    #: per step, milliseconds the fitted coefficients do not scale (a ``form``'s known part:
    #: the roofline's overhead, reloads and all-reduces); None: none (the linear form)
    offset_ms: np.ndarray | None = None

    def ttft_ms(self) -> np.ndarray:
        return self.end_ms[self.first_token_step] - self.arrival_ms

    def e2e_ms(self) -> np.ndarray:
        return self.end_ms[self.finish_step] - self.arrival_ms


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    differ = np.nonzero(a[:n] != b[:n])[0]
    return int(differ[0]) if differ.size else n


def serial_schedule(run: Run, engine: EngineModel, coefficients: np.ndarray) -> Schedule:
    """One request at a time in arrival order (see the module docstring)."""
    chunk = engine.max_num_batched_tokens
    rows, starts, ends = [], [], []
    begin, first, finish, hits, arrivals = [], [], [], [], []
    clock, live = 0.0, np.zeros(0, dtype=np.int64)
    closed = run.concurrency
    for index, prompt in enumerate(run.prompts):
        length = prompt.size
        reused = _common_prefix(live, prompt)
        reused = min(reused, length - 1)               # one token is evaluated for the logits
        if closed:                 # arrives when the request `closed` places ahead finishes
            arrival = ends[finish[index - closed]] if index >= closed else 0.0
        else:
            arrival = float(run.arrival_ms[index])
        arrivals.append(arrival)
        clock = max(clock, arrival)
        steps = []
        done = reused
        while done < length:
            new = min(chunk, length - done)
            steps.append(step_features(StepCost(new, 0, done + new, 0, new * done
                                                + new * (new + 1) // 2)))
            done += new
        first_index = len(rows) + len(steps) - 1
        context = length
        for _ in range(int(run.max_tokens[index]) - 1):
            context += 1
            steps.append(step_features(StepCost(0, 1, context, 0, context)))
        for row in steps:
            duration = max(float(np.dot(row, coefficients)), 0.0)
            rows.append(row)
            starts.append(clock)
            clock += duration
            ends.append(clock)
        begin.append(len(rows) - len(steps))
        first.append(first_index)
        finish.append(len(rows) - 1)
        hits.append(reused)
        live = prompt
    return Schedule(np.array(rows, dtype=np.float64).reshape(-1, len(FEATURES)),
                    np.array(starts), np.array(ends), np.array(begin), np.array(first),
                    np.array(finish),
                    np.array(hits), "serial (one sequence at a time)", np.array(arrivals),
                    bool(closed))


def step_features(record) -> tuple[float, ...]:
    """A step's regressors, the quantities of ``TERMS`` in order (the fitted step time is
    their dot product with the coefficients)."""
    cost = step_cost(record)
    return tuple(1.0 if quantity == "one" else float(getattr(cost, quantity))
                 for _, quantity in TERMS)


def engine_schedule(run: Run, engine: EngineModel, coefficients: np.ndarray,
                    form=None) -> Schedule:
    """The run through ``pipeline.engine`` (vLLM v1's engine loop) on the time clock.
    ``form`` (None: the linear form's ``step_features``) prices a step otherwise:
    ``form.step(record, coefficients)`` gives its regressors and the milliseconds they do
    not scale, the step taking their sum (``pipeline.fit.roofline_form``)."""
    from pipeline.engine.config import SchedulerConfig
    from pipeline.engine.loop import simulate
    from pipeline.engine.request import SimRequest

    longest = int(max(p.size for p in run.prompts) + run.max_tokens.max())
    model_len = max(engine.max_model_len, longest)
    blocks = engine.num_gpu_blocks or (
        -(-int(sum(p.size for p in run.prompts) + run.max_tokens.sum()) // engine.block_size) + 2)
    config = SchedulerConfig(num_gpu_blocks=blocks, max_model_len=model_len,
                             block_size=engine.block_size, max_num_seqs=engine.max_num_seqs,
                             max_num_batched_tokens=engine.max_num_batched_tokens,
                             chunked_prefill=engine.chunked_prefill)
    requests = [SimRequest(index=i, prompt_token_ids=prompt, max_tokens=int(run.max_tokens[i]),
                           arrival_s=float(run.arrival_ms[i]) / 1000.0)
                for i, prompt in enumerate(run.prompts)]
    beta = np.asarray(coefficients, dtype=np.float64)
    rows: dict[int, tuple[float, ...]] = {}
    offsets: dict[int, float] = {}

    def step_ms(record) -> float:
        if form is not None:
            rows[record.step], offsets[record.step] = form.step(record, beta)
            return max(offsets[record.step] + float(np.dot(rows[record.step], beta)), 0.0)
        rows[record.step] = step_features(record)
        return max(float(np.dot(rows[record.step], beta)), 0.0)

    result = simulate(requests, config, clock="time", step_ms=step_ms,
                      concurrency=run.concurrency)
    steps, frame = result.steps, result.requests
    order = steps["step"].to_list()
    position = {step: i for i, step in enumerate(order)}
    width = len(FEATURES) if form is None else len(form.names)
    features = np.array([rows[step] for step in order], dtype=np.float64)
    start = steps["start_ms"].to_numpy()

    def index(column: str) -> np.ndarray:
        return np.array([position[s] for s in frame[column].to_list()], dtype=np.int64)

    return Schedule(features.reshape(-1, width), start,
                    start + steps["duration_ms"].to_numpy(), index("first_scheduled_step"),
                    index("first_token_step"), index("finish_step"),
                    frame["gpu_hit_tokens"].to_numpy() + frame["cpu_hit_tokens"].to_numpy(),
                    f"pipeline.engine (vLLM v1 scheduler: max_num_seqs {engine.max_num_seqs}, "
                    f"max_num_batched_tokens {engine.max_num_batched_tokens}, block size "
                    f"{engine.block_size})", frame["arrival_ms"].to_numpy(),
                    bool(run.concurrency),
                    None if form is None else np.array([offsets[s] for s in order]))


#: ``simulate_run(run, engine, coefficients)``: the schedule source, the engine simulation
#: (swap for ``serial_schedule`` to compare).
simulate_run = engine_schedule
