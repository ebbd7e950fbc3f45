"""Array helpers shared by the code that calls numba kernels."""

from __future__ import annotations

import numpy as np

__all__ = ["read_only"]


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (same memory). numba compiles a kernel once per
    writeable flag of its arguments, and polars hands out either; passing every input
    array read-only keeps a kernel at one specialization."""
    view = array.view()
    view.flags.writeable = False
    return view
