"""Each step-time model is defined once: the compiled engine prices batches as the model's
``step_ms`` does (the linear form's ``TERMS``, the roofline's ``Rates``), and plan's TTFT of
a request alone (``request_ttft``: the linear closed form, any other model step by step) is
the engine's."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.compiled import compiled_model
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.krun import QUANTITIES
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.fit.schedule import FEATURES
from pipeline.sizes.units import model_shape
from pipeline.steptime import Linear, Roofline, StepCost, gpu_preset
from pipeline.steptime.alone import request_ttft
from pipeline.base.fitted_step_time import NAMES, TERMS
from pipeline.base.step_vectors import Rates

COEFFICIENT = st.one_of(st.just(0.0), st.floats(1e-6, 5.0, allow_nan=False))


def test_one_order_of_terms():
    assert FEATURES == NAMES
    fields = set(StepCost.__dataclass_fields__) | {"one"}
    assert {quantity for _, quantity in TERMS} <= set(QUANTITIES) <= fields
    model = Linear(dict(zip(NAMES, np.arange(1.0, 7.0))))
    assert model.kernel_coefficients() == ("linear", tuple(np.arange(1.0, 7.0)))
    roofline = Roofline(model_shape("qwen2.5-1.5b"), gpu_preset("H100"), 1.5)
    kind, vector = roofline.kernel_coefficients()
    assert kind == "roofline" and vector == tuple(roofline.rates)
    assert dict(zip(Rates._fields, vector))["overhead_ms"] == 1.5


def _roofline(overhead: float, gpu: str, tensor_parallel: int = 1) -> Roofline:
    return Roofline(model_shape("qwen2.5-1.5b"), gpu_preset(gpu), overhead,
                    tensor_parallel=tensor_parallel)


def _requests(rng: np.random.Generator, count: int) -> list[SimRequest]:
    prefixes = [rng.integers(0, 500, int(rng.integers(1, 120))) for _ in range(3)]
    arrivals = np.cumsum(rng.exponential(20.0, count))
    return [SimRequest(i, np.concatenate((prefixes[i % 3], rng.integers(0, 500, 5))),
                       int(rng.integers(1, 12)), arrival_s=float(arrivals[i]) / 1000)
            for i in range(count)]


def _model(values, pairs, roofline):
    if roofline:
        return _roofline(values[0], ("H100", "L4", "A100")[int(values[1]) % 3],
                         (1, 2, 4)[int(values[2]) % 3])         # TP: the all-reduce term
    coefficients = dict(zip(NAMES, values))
    if not pairs:
        del coefficients["attention_pair_ms"]
    return Linear(coefficients)


@settings(max_examples=25, deadline=None)
@given(st.lists(COEFFICIENT, min_size=6, max_size=6), st.booleans(), st.booleans(),
       st.integers(0, 2**31), st.sampled_from([16, 48, 8192]))
def test_the_kernel_prices_every_batch_as_step_ms(values, pairs, roofline, seed, budget):
    model = _model(values, pairs, roofline)
    assert compiled_model(model.step_ms) is not None      # the compiled kernel prices it
    config = SchedulerConfig(num_gpu_blocks=64, max_model_len=256, block_size=8,
                             max_num_batched_tokens=budget, max_num_seqs=4)
    compiled = simulate(_requests(np.random.default_rng(seed), 12), config, clock="time",
                        step_ms=model.step_ms)
    python = simulate(_requests(np.random.default_rng(seed), 12), config, clock="time",
                      step_ms=lambda record: model.step_ms(record))
    assert compiled.steps["duration_ms"].to_list() == python.steps["duration_ms"].to_list()
    assert compiled.steps.height == python.steps.height > 0


@settings(max_examples=15, deadline=None)
@given(st.lists(COEFFICIENT, min_size=6, max_size=6), st.booleans(), st.integers(1, 1500),
       st.integers(0, 1500), st.integers(1, 600), st.sampled_from([64, 256, 1000]))
def test_plans_ttft_is_the_engines_ttft_of_a_request_alone(values, roofline, shared, fresh,
                                                            first_fresh, chunk):
    """plan --latency's TTFT (``request_ttft``) is the engine's under the same model: a
    request after another that left ``shared`` tokens of its prompt cached."""
    model = _model(values, True, roofline)
    prompts = [np.arange(shared + first_fresh),
               np.concatenate((np.arange(shared), 10_000 + np.arange(fresh + 1)))]
    requests = [SimRequest(i, p, 2, arrival_s=1e6 * i) for i, p in enumerate(prompts)]
    config = SchedulerConfig(num_gpu_blocks=400, max_model_len=4096,
                             max_num_batched_tokens=chunk)
    frame = simulate(requests, config, clock="time", step_ms=model.step_ms).requests
    predicted = frame.select(
        pl.col("gpu_hit_tokens").alias("gpu_tokens"), pl.lit(0).alias("cpu_tokens"),
        (pl.col("prompt_tokens") - pl.col("gpu_hit_tokens")).alias("miss_tokens"),
    ).select(request_ttft(model, chunk))
    assert predicted.to_series().to_list() == pytest.approx(frame["ttft_ms"].to_list(),
                                                            rel=1e-9, abs=1e-5)
