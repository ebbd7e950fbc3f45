"""fit --loss absolute: least absolute relative errors (reweighted least squares) recover
noise-free coefficients as least squares does, and are pulled less by one slow request."""

from __future__ import annotations

import numpy as np

from pipeline.fit.solve import fit_runs
from test_fit import SERIAL, synthetic_run

TRUE = np.array([3.0, 0.2, 0.001, 1.5, 0.0, 2e-5])


def _runs(seed: int):
    rng = np.random.default_rng(seed)
    return [synthetic_run(rng, rate, 12, TRUE) for rate in (0.05, 0.5, 5.0)]


def test_absolute_recovers_noise_free_coefficients():
    runs = _runs(1)
    fit = fit_runs(runs, [SERIAL] * 3, [np.ones(r.n, dtype=bool) for r in runs], absolute=True)
    assert np.allclose(fit.vector()[[1, 3, 5]], TRUE[[1, 3, 5]], rtol=1e-3)


def test_absolute_is_pulled_less_by_one_slow_request():
    runs = _runs(2)
    runs[0].ttft_ms[3] *= 3.0                      # one request three times slower
    runs[0].e2e_ms[3] *= 3.0
    masks = [np.ones(r.n, dtype=bool) for r in runs]
    errors = {}
    for absolute in (False, True):
        got = fit_runs(runs, [SERIAL] * 3, masks, absolute=absolute).vector()
        errors[absolute] = abs(got[1] - TRUE[1]) / TRUE[1]      # the prefill cost
    assert errors[True] < errors[False] and errors[True] < 0.02
