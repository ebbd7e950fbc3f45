"""Views of the engine's arrays without numba's reference counting.

Every array a numba function receives is reference counted (an atomic increment and
decrement per call), which costs more than the work of most of the scheduler's small
functions. The kernels' entry points therefore rebuild their state tuples from
``raw`` views (the same memory, no owner: its reference operations are no-ops; the CPU
tier's: ``kgeneric.tier_raw``); the arrays stay alive because the Python caller
(``EngineSim``) holds them for the call.
"""

from __future__ import annotations

from numba import carray, njit
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["raw", "raw_state"]


@intrinsic
def _voidptr(typingctx, address):
    """The integer ``address`` as a void pointer."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(address), codegen


@njit(cache=True, error_model="numpy")
def raw(a):
    """``a``'s memory as an array with no owner."""
    return carray(_voidptr(a.ctypes.data), a.shape, a.dtype)


@njit(cache=True, error_model="numpy")
def raw_state(S):
    return (raw(S[0]), raw(S[1]), raw(S[2]), raw(S[3]), raw(S[4]), raw(S[5]), raw(S[6]),
            raw(S[7]), raw(S[8]), raw(S[9]), raw(S[10]), raw(S[11]), raw(S[12]),
            raw(S[13]), raw(S[14]), raw(S[15]), raw(S[16]))

