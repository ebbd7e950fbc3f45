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
from pipeline.engine.ksched import engine_step, wait_append
from pipeline.components.engine_layout import (
    B_NSAMP, B_NSCHED, BQ_NEW, BQ_START, C_ASYNC, C_BS, C_MAXBATCH, C_MAXE, C_MAXLEN,
    C_MAXSEQS, COMPUTED, G_ERROR, G_FIN, G_NEV, G_NFREE, G_NRUN, G_QHEAD, G_QLEN, G_STEP,
    G_WLEN, HOLDS, INFLIGHT, MAXTOK, NBLK, NPROMPT, NTOK, STALE, X_CONTEXT, X_DECODE, X_FREE,
    X_NFIRST, X_NRUN, X_NSCHED, X_NWAIT, X_PREFILL, X_Q, X_RELOAD, X_STEP)
from pipeline.base.fitted_step_time import TERMS
from pipeline.base.step_vectors import Rates

__all__ = ["run_loop", "run_until", "advance", "step_once", "step_time", "MODEL_NONE",
           "MODEL_LINEAR", "MODEL_ROOFLINE", "DONE", "FULL", "STUCK", "STEP_FIELDS"]

MODEL_NONE, MODEL_LINEAR, MODEL_ROOFLINE = 0, 1, 2
#: the step quantities ``step_time`` passes ``linear_ms``, in this order
QUANTITIES = ("one", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
              "attention_pairs")
_TERM_AT = tuple(QUANTITIES.index(quantity) for _, quantity in TERMS)
#: where each of the roofline's ``Rates`` sits in its coefficient vector
(_OVERHEAD, _PER_TOKEN, _PER_SAMPLE, _PER_PAIR, _WEIGHTS, _PER_CONTEXT, _PER_RELOAD,
 _PER_COMM) = (Rates._fields.index(name) for name in (
    "overhead_ms", "per_token", "per_sample", "per_pair", "weights", "per_context",
    "per_reload", "per_comm"))
DONE, FULL, STUCK = 0, 1, 2
#: Engine calls in a row that execute nothing before the run is declared stuck.
STUCK_CALLS = 64
#: loop state L: next request, idle calls, rows written
L_POINTER, L_IDLE, L_ROWS = 0, 1, 2
STEP_FIELDS = (X_STEP, X_PREFILL, X_DECODE, X_CONTEXT, X_RELOAD, X_NRUN, X_NWAIT, X_FREE)


@helper
def step_time(S, model, coef):
    """Milliseconds of the batch just scheduled (``REC``), as the model's ``step_ms``."""
    REC, BQ = S[16], S[10]
    prefill, decodes, context, reload = REC[X_PREFILL], REC[X_DECODE], REC[X_CONTEXT], \
        REC[X_RELOAD]
    if prefill:
        q, pairs = REC[X_Q], 0
        for e in range(REC[X_NSCHED]):
            new, before = BQ[q, e, BQ_NEW], BQ[q, e, BQ_START]
            pairs += new * before + new * (new + 1) // 2
    else:
        pairs = context                               # decodes only: one query each
    if model == MODEL_LINEAR:
        return linear_ms(coef, (1, prefill, decodes, context, reload, pairs))
    tokens = prefill + decodes
    if tokens == 0 and reload == 0:
        return coef[_OVERHEAD]
    compute = (coef[_PER_TOKEN] * tokens + coef[_PER_SAMPLE] * (decodes + REC[X_NFIRST])
               + coef[_PER_PAIR] * pairs)
    memory = coef[_WEIGHTS] + coef[_PER_CONTEXT] * context
    return (coef[_OVERHEAD] + max(compute, memory) + coef[_PER_RELOAD] * reload
            + coef[_PER_COMM] * tokens)


@helper
def linear_ms(coef, quantities):
    """The linear form: ``coef`` in ``TERMS`` order times the step's ``QUANTITIES``
    (``_TERM_AT`` says where each term's quantity sits), summed in that order."""
    ms = 0.0
    for j in range(len(_TERM_AT)):
        ms += coef[j] * quantities[_TERM_AT[j]]
    return ms


@inlined
def _execute(S, T, timed, model, coef, STEPS, DUR, L, now):
    """One engine call; a batch it executed is the next row (priced when ``timed``).
    Returns the clock after it, or ``-1 - now`` when the engine is stuck."""
    if engine_step(S, T) == 0:
        L[L_IDLE] += 1
        if L[L_IDLE] > STUCK_CALLS or S[1][G_ERROR] != 0:
            return -1.0 - now
        return now
    L[L_IDLE] = 0
    row = L[L_ROWS]
    REC = S[16]
    for j in range(8):
        STEPS[row, j] = REC[STEP_FIELDS[j]]
    if timed:
        duration = step_time(S, model, coef)
        DUR[row, 0] = now
        DUR[row, 1] = duration
        now += duration
    L[L_ROWS] = row + 1
    return now


@inlined
def _run_loop(S, T, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L, NOW):
    G = S[1]
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
            while p < n and G[G_NRUN] + G[G_WLEN] < concurrency:
                arrival[p] = clock
                wait_append(G, S[9], p)
                p += 1
        L[L_POINTER] = p
        if not (G[G_NRUN] > 0 or G[G_WLEN] > 0 or G[G_FIN] != 0 or G[G_QLEN] > 0):
            if p == n:
                NOW[0] = now
                return DONE
            if timed:
                now = max(now, due[p])
            else:
                G[G_STEP] = max(G[G_STEP], np.int64(due[p]))
            continue
        now = _execute(S, T, timed, model, coef, STEPS, DUR, L, now)
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
def _advance(S, T, limit, FREES):
    C, G, R, RUN = S[0], S[1], S[2], S[8]
    n = G[G_NRUN]
    if limit < 2 or n == 0 or n > C[C_MAXBATCH]:
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
        engine_step(S, T)
        FREES[j] = S[16][X_FREE]
    return k


@inlined
def _run_until(S, T, until, model, coef, STEPS, DUR, L, NOW):
    C, G, EV = S[0], S[1], S[15]
    now = NOW[0]
    room = 2 * C[C_MAXE] + 2
    while now < until and (G[G_NRUN] > 0 or G[G_WLEN] > 0 or G[G_FIN] != 0
                           or G[G_QLEN] > 0):
        if L[L_ROWS] >= STEPS.shape[0] or G[G_NEV] + room > EV.shape[0]:
            NOW[0] = now
            return FULL
        now = _execute(S, T, np.bool_(True), model, coef, STEPS, DUR, L, now)
        if now < 0:
            NOW[0] = -now - 1.0
            return STUCK
    NOW[0] = now
    return DONE


OP_STEP, OP_ADVANCE, OP_UNTIL, OP_LOOP = range(4)


@kernel
def _engine(op, S, T, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L, NOW,
            until, limit, FREES):
    """The one compiled entry point (``op`` says which): one kernel, so the scheduler's
    code is compiled once into it, not once per entry point."""
    if op == OP_STEP:
        return engine_step(S, T)
    if op == OP_ADVANCE:
        return _advance(S, T, limit, FREES)
    if op == OP_UNTIL:
        return _run_until(S, T, until, model, coef, STEPS, DUR, L, NOW)
    return _run_loop(S, T, due, arrival, timed, concurrency, model, coef, STEPS, DUR, L, NOW)


# placeholders for the arguments an operation does not use (the types of the real ones)
_F1, _F2 = np.zeros(1, np.float64), np.zeros((1, 2), np.float64)
_I1, _I2 = np.zeros(1, np.int64), np.zeros((1, 8), np.int64)


def run_loop(S, T, due: np.ndarray, arrival: np.ndarray, timed: bool, concurrency: int,
             model: int, coef: np.ndarray, STEPS: np.ndarray, DUR: np.ndarray,
             L: np.ndarray, NOW: np.ndarray) -> int:
    """Run the requests (slots 0..n-1 in input order, ``due`` their arrival step or ms)
    until done (DONE), the step buffer is full (FULL) or the engine is stuck (STUCK)."""
    return _engine(OP_LOOP, S, T, due, arrival, timed, concurrency, model, coef, STEPS, DUR,
                   L, NOW, 0.0, 0, _I1)


def run_until(S, T, until: float, model: int, coef: np.ndarray, STEPS: np.ndarray,
              DUR: np.ndarray, L: np.ndarray, NOW: np.ndarray) -> int:
    """Step (no arrivals) while the engine has work and its clock ``NOW[0]`` is before
    ``until``: each executed batch a row of ``STEPS`` and (start, duration) of ``DUR``,
    the outputs processed in EV. DONE, FULL (a buffer is full: drain and call again) or
    STUCK."""
    return _engine(OP_UNTIL, S, T, _F1, _F1, True, 0, model, coef, STEPS, DUR, L, NOW,
                   until, 0, _I1)


def advance(S, T, limit: int, FREES: np.ndarray) -> int:
    """Up to ``limit`` steps where each is a pure decode step (every running request
    decoding one token, none finishing, every new block available, the waiting queue
    unable to move), run one by one; free blocks after each into FREES. Returns how many
    (0: the next step is not such a step, nothing done)."""
    return _engine(OP_ADVANCE, S, T, _F1, _F1, False, 0, 0, _F1, _I2, _F2, _I1, _F1, 0.0,
                   limit, FREES)


def step_once(S, T) -> int:
    """``engine_step`` for a Python caller (``EngineSim.step``)."""
    return _engine(OP_STEP, S, T, _F1, _F1, False, 0, 0, _F1, _I2, _F2, _I1, _F1, 0.0, 0, _I1)
