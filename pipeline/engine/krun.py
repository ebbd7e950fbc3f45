"""Whole runs compiled: arrivals by step or by time, the idle jump, the closed loop, the
step-time models that are formulas of a step's totals (fitted ``Linear``, ``Roofline``),
stretches of pure decode steps (``advance``) and an engine's steps up to a time
(``run_until``, for callers that interleave engines: the fleet).

``run_loop`` is ``pipeline.engine.loop.simulate``'s loop: before each ``schedule()`` every
request due is added in input order (or, closed loop, while fewer than ``concurrency`` are
outstanding); an idle engine jumps to the next arrival; each executed batch is one row of
``STEPS`` (and on the time clock its start and duration). It returns when done, when the
step buffer is full (the caller grows it and calls again: all state is in the arrays) or
when the engine is stuck.

The four (and ``step_once``) are one compiled kernel, ``_engine``, that an operation code
steers: the scheduler is compiled once into it, not once into each entry point.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.kjit import helper, inlined, kernel
from pipeline.components.kstack import stack_step_ms
from pipeline.engine.ksched import engine_step
from pipeline.engine.ksched_schedule import wait_append
from pipeline.components.engine_layout import (
    B_NSAMP, B_NSCHED, BQ_NEW, BQ_START, C_ASYNC, C_BS, C_MAXBATCH, C_MAXE, C_MAXLEN,
    C_MAXSEQS, COMPUTED, G_ERROR, G_FIN, G_NEV, G_NFREE, G_NRUN, G_QHEAD, G_QLEN, G_STEP,
    G_WLEN, HOLDS, INFLIGHT, MAXTOK, NBLK, NPROMPT, NTOK, STALE, X_CONTEXT, X_DECODE, X_FREE,
    X_NFIRST, X_NRUN, X_NSCHED, X_NWAIT, X_PREFILL, X_Q, X_RELOAD, X_STEP, F_END0, F_NEXTARR,
    F_NOW, O_DONE, O_ERROR, O_JLEN, O_KLEN, O_LOADB, O_ON, O_STOREB)
from pipeline.engine.kstep import (  # noqa: F401 (re-exported: QUANTITIES, linear_ms)
    MODEL_LINEAR, MODEL_NONE, MODEL_ROOFLINE, QUANTITIES, linear_ms, reload_ms, step_time)

__all__ = ["run_loop", "run_until", "advance", "step_once", "step_time", "MODEL_NONE",
           "MODEL_LINEAR", "MODEL_ROOFLINE", "DONE", "FULL", "STUCK", "STEP_FIELDS"]

DONE, FULL, STUCK = 0, 1, 2
#: Engine calls in a row that execute nothing before the run is declared stuck.
STUCK_CALLS = 64
#: loop state L: next request, idle calls, rows written
L_POINTER, L_IDLE, L_ROWS = 0, 1, 2
STEP_FIELDS = (X_STEP, X_PREFILL, X_DECODE, X_CONTEXT, X_RELOAD, X_NRUN, X_NWAIT, X_FREE)


@inlined
def _record_row(S, T, O, STEPS, row):
    """The executed batch's row of ``STEPS``: its ``STEP_FIELDS``, then a tier stack's bytes
    loaded per tier or the native offload's bytes loaded and stored (when the buffer has
    those columns), reset; the stack's load ms (< 0: the tier does not price loads)."""
    REC, OC = S[16], O[0]
    for j in range(8):
        STEPS[row, j] = REC[STEP_FIELDS[j]]
    loads = stack_step_ms(T, S[2], S[3], STEPS, row)
    if OC[O_ON] != 0:                                 # (a stack and native never both)
        if STEPS.shape[1] >= 10:
            STEPS[row, 8], STEPS[row, 9] = OC[O_LOADB], OC[O_STOREB]
        OC[O_LOADB], OC[O_STOREB] = 0, 0
    return loads


@inlined
def _execute(S, T, O, timed, model, coef, STEPS, DUR, L, now):
    """One engine call; a batch it executed is the next row (priced when ``timed``; with
    the native offload the worker's end of the step, its synchronous loads included).
    Returns the clock after it, or ``-1 - now`` when the engine is stuck."""
    OC, OF = O[0], O[1]
    native = OC[O_ON] != 0
    OF[F_NOW] = now
    done = OC[O_DONE]
    if engine_step(S, T, O) == 0:
        end = OF[F_END0 + S[16][X_Q]]                 # the batch it scheduled, if any
        if native and (OC[O_DONE] != done or (timed and end > now)):
            L[L_IDLE] = 0                             # waiting on the link
            return end if timed else now
        L[L_IDLE] += 1
        if L[L_IDLE] > STUCK_CALLS or S[1][G_ERROR] != 0 or OC[O_ERROR] != 0:
            return -1.0 - now
        return now
    L[L_IDLE] = 0
    row = L[L_ROWS]
    REC = S[16]
    loads = _record_row(S, T, O, STEPS, row)
    if timed:
        if native:
            duration = OF[F_END0 + REC[X_Q]] - now
        else:
            duration = step_time(S, model, coef)
            if loads >= 0.0:
                duration += loads - reload_ms(S, model, coef)
        DUR[row, 0] = now
        DUR[row, 1] = duration
        now += duration
    L[L_ROWS] = row + 1
    return now


@inlined
def _run_loop(S, T, O, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L, NOW):
    G = S[1]
    OC = O[0]
    n = due.size
    now = NOW[0]
    while True:
        if L[L_ROWS] >= STEPS.shape[0]:
            NOW[0] = now
            return FULL
        clock = now if timed else float(G[G_STEP])
        p = L[L_POINTER]
        if concurrency <= 0:
            while p < n and due[p] <= clock:
                arrival[p] = due[p] if timed else clock
                wait_append(G, S[9], p)
                p += 1
        else:
            while p < n and G[G_NRUN] + G[G_WLEN] + OC[O_KLEN] < concurrency:
                arrival[p] = clock
                wait_append(G, S[9], p)
                p += 1
        L[L_POINTER] = p
        O[1][F_NEXTARR] = due[p] if timed and concurrency <= 0 and p < n else np.inf
        if not (G[G_NRUN] > 0 or G[G_WLEN] > 0 or G[G_FIN] != 0 or G[G_QLEN] > 0
                or OC[O_KLEN] > 0 or OC[O_JLEN] > 0):
            if p == n:
                NOW[0] = now
                return DONE
            if timed:
                now = max(now, due[p])
            else:
                G[G_STEP] = max(G[G_STEP], np.int64(due[p]))
            continue
        now = _execute(S, T, O, timed, model, coef, STEPS, DUR, L, now)
        if now < 0:
            NOW[0] = -now - 1.0
            return STUCK


@helper
def _steady(S):
    """Every running request decoding one token per step: sync with its token sampled;
    async with exactly the running requests' one-token batch in flight."""
    C, G, R, RUN, BQ, BSMP, BMETA = S[0], S[1], S[2], S[8], S[10], S[11], S[12]
    n = G[G_NRUN]
    if C[C_ASYNC] == 0:
        for i in range(n):
            slot = RUN[i]
            if R[slot, NTOK] - R[slot, COMPUTED] != 1 or R[slot, NTOK] <= R[slot, NPROMPT]:
                return False
        return True
    q = G[G_QHEAD]
    if G[G_QLEN] != 1 or BMETA[q, B_NSCHED] != n or BMETA[q, B_NSAMP] != n:
        return False
    for i in range(n):
        slot = RUN[i]
        if BQ[q, i, 0] != slot or BQ[q, i, BQ_NEW] != 1 or BSMP[q, i] != slot:
            return False
        if R[slot, HOLDS] != 1 or R[slot, INFLIGHT] != 1 or R[slot, STALE] != 0 \
                or R[slot, COMPUTED] != R[slot, NTOK] or R[slot, NTOK] <= R[slot, NPROMPT]:
            return False
    return True


@helper
def _allocations(S, steps):
    C, G, R, RUN = S[0], S[1], S[2], S[8]
    size, total = C[C_BS], 0
    for i in range(G[G_NRUN]):
        slot = RUN[i]
        total += max(-(-(R[slot, COMPUTED] + steps) // size) - R[slot, NBLK], 0)
    return total


@inlined
def _advance(S, T, O, limit, FREES):
    C, G, R, RUN = S[0], S[1], S[2], S[8]
    n = G[G_NRUN]
    if limit < 2 or n == 0 or n > C[C_MAXBATCH] or O[0][O_ON] != 0:
        return 0
    if G[G_WLEN] > 0 and n < C[C_MAXSEQS] and n < C[C_MAXBATCH]:
        return 0
    if not _steady(S):
        return 0
    k = min(limit, FREES.size)
    for i in range(n):                                # stop before anybody finishes
        slot = RUN[i]
        left = min(R[slot, MAXTOK] + R[slot, NPROMPT], C[C_MAXLEN]) - R[slot, NTOK] - 1
        if left < k:
            if left < 2:
                return 0
            k = left
    if _allocations(S, k) > G[G_NFREE]:               # the largest k whose blocks exist
        low, high = 0, k
        while low < high:
            mid = (low + high + 1) // 2
            if _allocations(S, mid) <= G[G_NFREE]:
                low = mid
            else:
                high = mid - 1
        if low < 2:
            return 0
        k = low
    for j in range(k):
        engine_step(S, T, O)
        FREES[j] = S[16][X_FREE]
    return k


@inlined
def _run_until(S, T, O, until, model, coef, STEPS, DUR, L, NOW):
    C, G, EV = S[0], S[1], S[15]
    now = NOW[0]
    O[1][F_NEXTARR] = until                           # the caller's next event
    room = 2 * C[C_MAXE] + 2
    while now < until and (G[G_NRUN] > 0 or G[G_WLEN] > 0 or G[G_FIN] != 0
                           or G[G_QLEN] > 0 or O[0][O_KLEN] > 0 or O[0][O_JLEN] > 0):
        if L[L_ROWS] >= STEPS.shape[0] or G[G_NEV] + room > EV.shape[0]:
            NOW[0] = now
            return FULL
        now = _execute(S, T, O, np.bool_(True), model, coef, STEPS, DUR, L, now)
        if now < 0:
            NOW[0] = -now - 1.0
            return STUCK
    NOW[0] = now
    return DONE


OP_STEP, OP_ADVANCE, OP_UNTIL, OP_LOOP = range(4)


@kernel
def _engine(op, S, T, O, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L, NOW,
            until, limit, FREES):
    """The one compiled entry point (``op`` says which): one kernel, so the scheduler's
    code is compiled once into it, not once per entry point."""
    if op == OP_STEP:
        scheduled = engine_step(S, T, O)
        if scheduled != 0:
            NOW[0] = _record_row(S, T, O, STEPS, 0)
        return scheduled
    if op == OP_ADVANCE:
        return _advance(S, T, O, limit, FREES)
    if op == OP_UNTIL:
        return _run_until(S, T, O, until, model, coef, STEPS, DUR, L, NOW)
    return _run_loop(S, T, O, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L,
                     NOW)


# placeholders for the arguments an operation does not use (the types of the real ones)
_F1, _F2 = np.zeros(1, np.float64), np.zeros((1, 2), np.float64)
_I1, _I2 = np.zeros(1, np.int64), np.zeros((1, 8), np.int64)


def run_loop(S, T, O, due: np.ndarray, arrival: np.ndarray, timed: bool, concurrency: int,
             model: int, coef: np.ndarray, STEPS: np.ndarray, DUR: np.ndarray,
             L: np.ndarray, NOW: np.ndarray) -> int:
    """Run the requests (slots 0..n-1 in input order, ``due`` their arrival step or ms)
    until done (DONE), the step buffer is full (FULL) or the engine is stuck (STUCK)."""
    return _engine(OP_LOOP, S, T, O, due, arrival, timed, concurrency, model, coef, STEPS, DUR,
                   L, NOW, 0.0, 0, _I1)


def run_until(S, T, O, until: float, model: int, coef: np.ndarray, STEPS: np.ndarray,
              DUR: np.ndarray, L: np.ndarray, NOW: np.ndarray) -> int:
    """Step (no arrivals) while the engine has work and its clock ``NOW[0]`` is before
    ``until``: each executed batch a row of ``STEPS`` and (start, duration) of ``DUR``,
    the outputs processed in EV. DONE, FULL (a buffer is full: drain and call again) or
    STUCK."""
    return _engine(OP_UNTIL, S, T, O, _F1, _F1, True, 0, model, coef, STEPS, DUR, L, NOW,
                   until, 0, _I1)


def advance(S, T, O, limit: int, FREES: np.ndarray) -> int:
    """Up to ``limit`` steps where each is a pure decode step (every running request
    decoding one token, none finishing, every new block available, the waiting queue
    unable to move), run one by one; free blocks after each into FREES. Returns how many
    (0: the next step is not such a step, nothing done)."""
    return _engine(OP_ADVANCE, S, T, O, _F1, _F1, False, 0, 0, _F1, _I2, _F2, _I1, _F1, 0.0,
                   limit, FREES)


def step_once(S, T, O, STEPS: np.ndarray, NOW: np.ndarray) -> int:
    """``engine_step`` for a Python caller (``EngineSim.step``): a batch it executed is row 0
    of ``STEPS`` (``_record_row``), its tier stack's load ms ``NOW[0]`` (< 0: none)."""
    return _engine(OP_STEP, S, T, O, _F1, _F1, False, 0, 0, _F1, STEPS, _F2, _I1, NOW, 0.0, 0,
                   _I1)
