"""The compiled engine's linear step time is ``Linear.step_ms`` (the one ``TERMS`` order)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.compiled import compiled_model
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.krun import QUANTITIES
from pipeline.engine.loop import simulate
from pipeline.engine.request import SimRequest
from pipeline.fit.schedule import FEATURES
from pipeline.steptime import Linear, StepCost
from pipeline.steptime.fitted_file import NAMES, TERMS

COEFFICIENT = st.one_of(st.just(0.0), st.floats(1e-6, 5.0, allow_nan=False))


def test_one_order_of_terms():
    assert FEATURES == NAMES
    fields = set(StepCost.__dataclass_fields__) | {"one"}
    assert {quantity for _, quantity in TERMS} <= set(QUANTITIES) <= fields
    model = Linear(dict(zip(NAMES, np.arange(1.0, 7.0))))
    assert model.kernel_coefficients() == ("linear", tuple(np.arange(1.0, 7.0)))


def _requests(rng: np.random.Generator, count: int) -> list[SimRequest]:
    prefixes = [rng.integers(0, 500, int(rng.integers(1, 120))) for _ in range(3)]
    arrivals = np.cumsum(rng.exponential(20.0, count))
    return [SimRequest(i, np.concatenate((prefixes[i % 3], rng.integers(0, 500, 5))),
                       int(rng.integers(1, 12)), arrival_s=float(arrivals[i]) / 1000)
            for i in range(count)]


@settings(max_examples=25, deadline=None)
@given(st.lists(COEFFICIENT, min_size=6, max_size=6), st.booleans(),
       st.integers(0, 2**31), st.sampled_from([16, 48, 8192]))
def test_the_kernel_prices_every_batch_as_step_ms(values, pairs, seed, budget):
    coefficients = dict(zip(NAMES, values))
    if not pairs:
        del coefficients["attention_pair_ms"]
    model = Linear(coefficients)
    assert compiled_model(model.step_ms) is not None      # the compiled kernel prices it
    config = SchedulerConfig(num_gpu_blocks=64, max_model_len=256, block_size=8,
                             max_num_batched_tokens=budget, max_num_seqs=4)
    compiled = simulate(_requests(np.random.default_rng(seed), 12), config, clock="time",
                        step_ms=model.step_ms)
    python = simulate(_requests(np.random.default_rng(seed), 12), config, clock="time",
                      step_ms=lambda record: model.step_ms(record))
    assert compiled.steps["duration_ms"].to_list() == python.steps["duration_ms"].to_list()
    assert compiled.steps.height == python.steps.height > 0
