"""The simulated schedule of measured requests: which steps ran, what each step did, when.

``simulate_run(run, engine, coefficients)`` is the one place the schedule comes from: every
step's cost features (``FEATURES``: 1, prefilled tokens, attended context tokens, decode
sequences, reloaded tokens) and its start and end under the step-time model
``step_ms = features @ coefficients`` (at least 0), the step that samples each request's
first token and the step that finishes it, and the prefix tokens each request found cached.

Source: the engine simulation (``pipeline.engine``, vLLM v1's scheduler and KV cache manager,
time clock) when it is importable; otherwise ``serial_schedule``, a one-sequence-at-a-time
engine (llama.cpp: ``max_num_seqs`` 1, the prompt in chunks of ``max_num_batched_tokens``
after the longest common prefix with the previous request's context, then one decode step
per further output token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.fit.inputs import Run

__all__ = ["FEATURES", "EngineModel", "Schedule", "serial_schedule", "simulate_run"]

FEATURES = ("fixed_ms", "prefill_token_ms", "context_token_ms", "decode_seq_ms",
            "reload_token_ms")


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

    def ttft_ms(self, arrival_ms: np.ndarray) -> np.ndarray:
        return self.end_ms[self.first_token_step] - arrival_ms

    def e2e_ms(self, arrival_ms: np.ndarray) -> np.ndarray:
        return self.end_ms[self.finish_step] - arrival_ms


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    differ = np.nonzero(a[:n] != b[:n])[0]
    return int(differ[0]) if differ.size else n


def serial_schedule(run: Run, engine: EngineModel, coefficients: np.ndarray) -> Schedule:
    """One request at a time in arrival order (see the module docstring)."""
    chunk = engine.max_num_batched_tokens
    rows, starts, ends = [], [], []
    begin, first, finish, hits = [], [], [], []
    clock, live = 0.0, np.zeros(0, dtype=np.int64)
    for index, prompt in enumerate(run.prompts):
        length = prompt.size
        reused = _common_prefix(live, prompt)
        reused = min(reused, length - 1)               # one token is evaluated for the logits
        clock = max(clock, float(run.arrival_ms[index]))
        steps = []
        done = reused
        while done < length:
            new = min(chunk, length - done)
            steps.append((1.0, new, done + new, 0.0, 0.0))
            done += new
        first_index = len(rows) + len(steps) - 1
        context = length
        for _ in range(int(run.max_tokens[index]) - 1):
            context += 1
            steps.append((1.0, 0.0, context, 1.0, 0.0))
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
                    np.array(hits), "serial (one sequence at a time)")


def simulate_run(run: Run, engine: EngineModel, coefficients: np.ndarray) -> Schedule:
    """The run's schedule under ``coefficients`` (the source described above)."""
    return serial_schedule(run, engine, coefficients)
