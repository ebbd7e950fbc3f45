"""The engine kernels' numba decorators (each kernel compiled once, cached on disk).

All three compile without numba's reference counting (``_nrt=False``): the kernels
allocate nothing, so counting references to the arrays they receive (an increment and a
decrement per call and per variable, which cost more than most helpers' work and made
every module larger) buys nothing; the arrays stay alive because the Python caller
(``EngineSim``) holds them for the call. ``kernel``: an entry point Python calls (no C
wrapper: nothing takes its address). ``helper``: a function only compiled code calls;
numba builds it no CPython or C wrapper (for a 17-array state tuple the wrapper's unboxing
code is larger than most helpers' bodies). ``inlined``: a function whose body numba copies
into its caller (typed and compiled there: no module of its own, so its callees are not
compiled into one more module); numba's inlining is itself slow, so only for functions
called from one place or two.
"""

from __future__ import annotations

from numba import njit

__all__ = ["kernel", "helper", "inlined"]

kernel = njit(cache=True, error_model="numpy", no_cfunc_wrapper=True, _nrt=False)
helper = njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True,
              _nrt=False)
inlined = njit(inline="always", error_model="numpy", _nrt=False)
