"""Seeded random traces for the policy tests (a helper module, not a test file)."""

from __future__ import annotations

import numpy as np


def random_traces(seed, count=40):
    """Seeded random traces that do evict: capacity below the working set, keys uniform or
    Zipf-like, sizes unit, fixed per key (0 included) or varying per access."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n_keys, n = int(rng.integers(2, 30)), int(rng.integers(20, 250))
        keys = (rng.integers(0, n_keys, n) if rng.random() < 0.5
                else rng.zipf(1.3, n) % n_keys).astype(np.int64)
        mode = rng.integers(0, 3)
        sizes = (np.ones(n, np.int64) if mode == 0 else
                 rng.integers(0, 20, n_keys)[keys] if mode == 1 else rng.integers(0, 20, n))
        working = int(sizes[np.unique(keys, return_index=True)[1]].sum())
        yield keys, sizes.astype(np.int64), int(rng.integers(0, max(working, 1) + 1))

