"""The engine kernels' numba decorators (compiled once, cached on disk).

``kernel``: an entry point Python calls. ``helper``: a function only compiled code calls;
numba builds it no CPython or C wrapper (for a 17-array state tuple the wrapper's unboxing
code is larger than most helpers' bodies, and every caller's module links it in again).
``inlined``: a function whose body numba copies into each caller (typed and compiled there:
no module of its own, so its callees are not compiled into one more module).
"""

from __future__ import annotations

from numba import njit

__all__ = ["kernel", "helper", "inlined"]

kernel = njit(cache=True, error_model="numpy", _nrt=False)
helper = njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True,
              _nrt=False)
inlined = njit(inline="always", error_model="numpy", _nrt=False)
