"""The compiled SGLang scheduler's running batch: the decode memory check, retraction
(``retract_decode``), ``update_running_batch``, and processing a batch's result
(``process_batch_result``), over ``sglang_kstate``'s state ``S`` (the loop is
``sglang_ksched``)."""

from __future__ import annotations

from pipeline.components.kjit import helper
from pipeline.components.sglang_kadmit import stable_sort
from pipeline.components.sglang_kstate import (
    F_DECAY, F_MIN, F_RATIO, G_ERROR, G_EXTEND, G_FREE, G_FULL, G_NB, G_NDONE, G_NF, G_NRUN,
    G_NWAIT, G_NX, G_OVERLAP, G_P, G_QHAS, R_EXT, R_FIN, R_FINSTEP, R_FTOK, R_INS, R_KV,
    R_LAST, R_MAXNEW, R_MID, R_N, R_OUT, R_PREFIX, R_PROT, R_QUEUED, R_RETR, R_RETRACTED,
    alloc, checkpoint, evict_to_free, release)
from pipeline.components.sglang_settings import RETRACT_DECODE_STEPS

__all__ = ["update_running_batch", "retract_decode", "process"]


# --------------------------------------------------------------------------- decode

@helper
def check_decode_mem(S, Q, count):
    R, SG = S[1], S[5]
    P = SG[G_P]
    num = 0
    for i in range(count):
        if R[Q[i], R_KV] % P == 0:
            num += P
    evict_to_free(S, num)
    return SG[G_FREE] >= num


@helper
def retract_decode(S):
    """``ScheduleBatch.retract_decode`` (policy ``length``): retracted go to the queue."""
    R, WQ, RUN, SG, SF, SCR = S[1], S[2], S[3], S[5], S[6], S[9]
    count = SG[G_NRUN]
    order, keys = SCR[:, 5], SCR[:, 6]
    for i in range(count):                          # sorted by (out, -n), descending:
        r = RUN[i]                                  # one key, out major
        order[i], keys[i] = r, R[r, R_OUT] * (2 ** 31) - R[r, R_N]
    stable_sort(order, count, keys, False)
    first = True
    while first or not check_decode_mem(S, order, count):
        if count == 1:
            break
        first = False
        count -= 1
        r = order[count]
        release(S, r, False)                        # release_req
        evict_to_free(S, count * RETRACT_DECODE_STEPS)
        R[r, R_PREFIX] = R[r, R_PROT] = R[r, R_INS] = R[r, R_KV] = 0
        R[r, R_LAST], R[r, R_EXT], R[r, R_MID] = -1, 0, 0
        R[r, R_RETR] += 1
        R[r, R_RETRACTED] = 1
        WQ[SG[G_NWAIT]] = r
        SG[G_NWAIT] += 1
    if count <= 1 and not check_decode_mem(S, order, count):
        SG[G_ERROR] = 1                             # SGLang aborts: out of memory
        return
    decoded, wanted = 0, 0
    for i in range(count):
        RUN[i] = order[i]
        decoded += R[order[i], R_OUT]
        wanted += R[order[i], R_MAXNEW]
    SG[G_NRUN] = count
    SF[F_RATIO] = min(1.0, (decoded + RETRACT_DECODE_STEPS * count) / (wanted + 1))


@helper
def update_running_batch(S):
    """``update_running_batch``: retract when the next decode does not fit (overlap:
    without the requests the queued result finishes, skipped when some were); the batch."""
    R, RUN, SG, SF, BQ = S[1], S[3], S[5], S[6], S[12]
    initial = SG[G_NRUN]
    finishing = 0
    if SG[G_OVERLAP] and SG[G_QHAS]:                # _reqs_finishing_inflight
        kept = 0
        for i in range(initial):
            r = RUN[i]
            if R[r, R_QUEUED] and R[r, R_OUT] + 1 >= R[r, R_MAXNEW]:
                finishing += 1
            else:
                RUN[kept] = r
                kept += 1
        SG[G_NRUN] = kept
        if kept == 0:
            SG[G_FULL] = 0
            return 0
    full = not check_decode_mem(S, RUN, SG[G_NRUN])
    if full and finishing > 0:                      # decode the rest next turn
        SG[G_FULL] = 0
        return 0
    if full:
        retract_decode(S)
        if SG[G_ERROR]:
            return 0
    else:
        SF[F_RATIO] = max(SF[F_RATIO] - SF[F_DECAY], SF[F_MIN])
    if SG[G_NRUN] < initial:
        SG[G_FULL] = 0
    bs = SG[G_NRUN]
    if bs == 0:
        return 0
    evict_to_free(S, bs * SG[G_P])
    for i in range(bs):
        r = RUN[i]
        BQ[i, 0], BQ[i, 1], BQ[i, 2] = r, 1, R[r, R_KV]
        alloc(S, r, R[r, R_KV] + 1)
    SG[G_NB], SG[G_EXTEND] = bs, 0
    return bs


# --------------------------------------------------------------------------- results

@helper
def process(S, Q, count, extend, step):
    """``process_batch_result`` of requests ``Q[:count]``: sample, finish, checkpoint; first
    tokens in ``BF``, finished in ``BX`` (appended); a request retracted since launch
    skipped."""
    R, SG, BF, BX = S[1], S[5], S[13], S[14]
    for i in range(count):
        r = Q[i]
        if R[r, R_RETRACTED] or (R[r, R_FIN] and R[r, R_MID] <= 0):
            continue
        if extend and R[r, R_MID] > 0:
            R[r, R_MID] -= 1
            continue
        R[r, R_OUT] += 1
        if R[r, R_FTOK] < 0:
            R[r, R_FTOK] = step
            BF[SG[G_NF]] = r
            SG[G_NF] += 1
        if R[r, R_OUT] >= R[r, R_MAXNEW]:
            R[r, R_FIN], R[r, R_FINSTEP] = 1, step
            SG[G_NDONE] += 1
            BX[SG[G_NX]] = r
            SG[G_NX] += 1
            release(S, r, True)
        elif extend:
            checkpoint(S, r, R[r, R_EXT])           # checkpoint_kv_cache
            R[r, R_PREFIX] = R[r, R_EXT]
