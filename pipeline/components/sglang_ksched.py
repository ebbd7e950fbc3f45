"""SGLang 0.5.23's scheduler loop over its radix cache, compiled (numba, flat arrays).

The rules of ``tests/oracles/sglang_sched.py`` (the plain-Python transcription that the
equality tests prove equal to SGLang's own ``SchedulePolicy``, ``PrefillAdder``,
``PrefillBudget`` and ``RadixCache`` in the batch loop; docs/sglang.md cites the lines),
over ``sglang_kradix``'s tree (with HiCache ``sglang_khiradix``'s, through
``sglang_ktree``). The state ``S``, its columns and the memory helpers are
``sglang_kstate``'s; the policy and admission ``sglang_kadmit``'s; decode, retraction and
result processing ``sglang_kbatch``'s; this module is the loop's turns and entry points.

``step`` is one turn of ``event_loop_normal``; ``run_steps`` a whole run on the step clock
(arrivals by step, the idle jump), writing each step's row, batch rows and events.

With ``G_OVERLAP`` set the turns are ``event_loop_overlap``'s (the oracle's ``overlap``):
``QB`` is the result queue (the requests of the batch launched last turn, ``G_QN`` of them,
``G_QEXT``, ``G_QSTEP``; ``R_QUEUED`` marks them), processed after the next batch is
scheduled. ``BF`` / ``BX`` then hold the launched batch's own samplers and finishes, known
at launch (``launch_outputs``: what the GPU samples, the records' and events' lists; a
request retracted in the next turn has its first token discarded by SGLang, then sampled
again); the requests' outcomes in ``R`` are the processed results. ``R_RETRACTED`` is
``is_retracted``.
"""

from __future__ import annotations

from pipeline.components.kjit import helper, kernel
from pipeline.components.sglang_kadmit import available, new_prefill_batch
from pipeline.components.sglang_kbatch import process, update_running_batch
from pipeline.components.sglang_kradix import find_child, match_len
from pipeline.components.sglang_kradix_layout import N_KL
from pipeline.components.sglang_kstate import (
    DONE, FAILED, FULL, G_BLOCK, G_CHUNKED, G_ERROR, G_EXTEND, G_FULL, G_LASTRAN, G_LOADMARK,
    G_MAXRUN, G_NB, G_NF, G_NLAST, G_NRUN, G_NWAIT, G_NX, G_OVERLAP, G_POLICY, G_POPPED,
    G_QEXT, G_QHAS, G_QN, G_QSTEP, G_STEP, G_WRITEMARK, R_EXT, R_FIN, R_FTOK, R_MAXNEW, R_MID,
    R_OUT, R_PREFIX, R_QUEUED, SMALL_TREE, S_COLUMNS, S_CONTEXT, S_DECODE, S_FREE, S_LOADED,
    S_NRUN, S_NWAIT, S_PREFILL, S_RELOAD, S_STEP, S_WRITTEN, checkpoint)
from pipeline.components.sglang_ktree import t_check_events, t_moved
from pipeline.components.sglang_kstate import (  # noqa: F401 (the engine's, tests' K.*)
    G_FREE, G_NDONE, G_NREQ, R_FINSTEP, R_FSCHED, R_HIT, R_HLOADED, R_INDEX, R_N, R_RETR,
    SGLangState)

__all__ = ["SGLangState", "step", "run_steps", "peek"]


# --------------------------------------------------------------------------- turns

@helper
def next_batch(S):
    """``get_next_batch_to_run``: the batch's size in ``BQ`` (0: none)."""
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    t_check_events(S[7])                            # _process_hicache_events
    c = SG[G_CHUNKED]
    if c >= 0 and R[c, R_EXT] > R[c, R_PREFIX]:
        checkpoint(S, c, R[c, R_EXT])               # stash_chunked_request
        R[c, R_PREFIX] = R[c, R_EXT]
    nl = SG[G_NLAST]
    if nl > 0:
        kept = 0
        for i in range(nl):
            r = LB[i]
            if not R[r, R_FIN] and r != c:
                LB[kept] = r
                kept += 1
        if kept < nl:
            SG[G_FULL] = 0
        SG[G_NLAST] = kept
        if kept > 0:
            if SG[G_NRUN] == 0:
                SG[G_FULL] = 0
            for i in range(kept):
                RUN[SG[G_NRUN]] = LB[i]
                SG[G_NRUN] += 1
    kept = 0
    for i in range(SG[G_NRUN]):
        r = RUN[i]
        if not R[r, R_FIN]:
            RUN[kept] = r
            kept += 1
    if kept < SG[G_NRUN]:
        SG[G_FULL] = 0
    SG[G_NRUN] = kept
    count = new_prefill_batch(S)
    if count > 0:
        return count
    if SG[G_NRUN] > 0:
        return update_running_batch(S)
    return 0


@helper
def iterate(S):
    """One turn of ``event_loop_normal`` (or ``event_loop_overlap``): the batch's size (0:
    none; -1: out of memory)."""
    SG = S[5]
    if SG[G_OVERLAP]:
        return iterate_overlap(S)
    count = next_batch(S)
    if SG[G_ERROR]:
        return -1
    SG[G_NF] = SG[G_NX] = 0
    if count > 0:
        process(S, S[12][:, 0], count, SG[G_EXTEND], SG[G_STEP])
        SG[G_STEP] += 1
    keep_last_batch(S, count)
    return count


@helper
def keep_last_batch(S, count):
    """The batch of ``count`` just scheduled as the last batch (``LB``, ``G_NLAST``) if a
    prefill, else none."""
    SG = S[5]
    if count > 0 and SG[G_EXTEND]:
        LB, BQ = S[4], S[12]
        for i in range(count):
            LB[i] = BQ[i, 0]
        SG[G_NLAST] = count
    else:
        SG[G_NLAST] = 0


@helper
def launch_outputs(S, count):
    """The launched batch's first tokens (``BF``) and finishes (``BX``), once the last
    result is processed: its rows past their last chunk, a first token where none was
    sampled yet, a finish where the next output reaches ``max_new_tokens``."""
    R, SG, BQ, BF, BX = S[1], S[5], S[12], S[13], S[14]
    SG[G_NF] = SG[G_NX] = 0
    for i in range(count):
        r = BQ[i, 0]
        if SG[G_EXTEND] and R[r, R_MID] > 0:
            continue
        if R[r, R_FTOK] < 0:
            BF[SG[G_NF]] = r
            SG[G_NF] += 1
        if R[r, R_OUT] + 1 >= R[r, R_MAXNEW]:
            BX[SG[G_NX]] = r
            SG[G_NX] += 1


@helper
def iterate_overlap(S):
    """One turn of ``event_loop_overlap``: schedule and launch (queue) a batch, then
    process the last one's result (``G_POPPED``); the batch's size (0: none; -1: out of
    memory)."""
    R, SG, BQ, QB = S[1], S[5], S[12], S[15]
    count = next_batch(S)
    if SG[G_ERROR]:
        return -1
    SG[G_POPPED] = SG[G_LASTRAN]
    SG[G_NF] = SG[G_NX] = 0                         # (the processed lists: not kept)
    if SG[G_POPPED]:                                # pop_and_process
        process(S, QB, SG[G_QN], SG[G_QEXT], SG[G_QSTEP])
        for i in range(SG[G_QN]):
            R[QB[i], R_QUEUED] = 0
    launch_outputs(S, count)
    SG[G_QHAS] = count > 0
    if count > 0:                                   # the queue: a copy of the batch
        for i in range(count):
            QB[i] = BQ[i, 0]
            R[QB[i], R_QUEUED] = 1
        SG[G_QN], SG[G_QEXT], SG[G_QSTEP] = count, SG[G_EXTEND], SG[G_STEP]
        SG[G_STEP] += 1
    else:
        SG[G_QN] = 0
    SG[G_LASTRAN] = count > 0
    keep_last_batch(S, count)
    return count


@helper
def has_work(S):
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    if SG[G_NWAIT] > 0 or SG[G_CHUNKED] >= 0 or SG[G_QHAS]:
        return True
    for i in range(SG[G_NRUN]):
        if not R[RUN[i], R_FIN]:
            return True
    for i in range(SG[G_NLAST]):
        if not R[LB[i], R_FIN]:
            return True
    return False


@helper
def num_running(S):
    R, RUN, LB, SG = S[1], S[3], S[4], S[5]
    count = 0
    for i in range(SG[G_NRUN]):
        count += 1 - R[RUN[i], R_FIN]
    for i in range(SG[G_NLAST]):
        count += 1 - R[LB[i], R_FIN]
    return count


@helper
def step_row(S, row):
    """The executed batch's ``loop.STEP_COLUMNS`` row (after ``iterate``)."""
    R, SG, BQ = S[1], S[5], S[12]
    prefill, context = 0, 0
    for i in range(SG[G_NB]):
        prefill += BQ[i, 1]
        context += BQ[i, 1] + BQ[i, 2]
    row[S_STEP] = SG[G_STEP] - 1
    row[S_PREFILL] = prefill if SG[G_EXTEND] else 0
    row[S_DECODE] = 0 if SG[G_EXTEND] else SG[G_NB]
    row[S_CONTEXT], row[S_RELOAD] = context, 0
    row[S_NRUN], row[S_NWAIT] = num_running(S), SG[G_NWAIT]
    row[S_FREE] = available(S) // SG[G_BLOCK]
    loaded, written = t_moved(S[7])
    row[S_RELOAD] = row[S_LOADED] = loaded - SG[G_LOADMARK]
    row[S_WRITTEN] = written - SG[G_WRITEMARK]
    SG[G_LOADMARK], SG[G_WRITEMARK] = loaded, written

# --------------------------------------------------------------------------- entries

@helper
def batch_tree_fits(S):
    """Room in the in-batch tree for every waiting request (a match may split a node, an
    insert split one and add a leaf)."""
    policy = S[5][G_POLICY]
    if policy != 1 and policy != 2:
        return True
    return 3 * S[5][G_NWAIT] + 8 <= S[8][0].shape[0]


@kernel
def step(S, row):
    """One loop turn from Python: the batch size (0 idle, -1 out of memory, -2 the in-batch
    tree is too small: grow it and call again, -3 no work: nothing done); ``row`` gets the step's ``STEP_COLUMNS``
    when a batch ran."""
    if not has_work(S):
        return -3
    if not batch_tree_fits(S):
        return -2
    count = iterate(S)
    if count == 0 and S[5][G_POPPED]:              # processed only: took no step
        if not has_work(S):
            return -3
        if not batch_tree_fits(S):
            return -2
        count = iterate(S)
    if count > 0:
        step_row(S, row)
    return count


@kernel
def run_steps(S, due, L, STEPS, SCHED, EVENTS):
    """A whole run on the step clock: requests ``L[0]``.. added when ``due`` (arrival
    steps, the idle jump as ``loop.simulate``), steps until done or a buffer is full.
    ``L``: next request, rows of STEPS / SCHED / EVENTS written, the clock, the events'
    count, whether to write SCHED. ``STEPS`` rows ``S_COLUMNS`` + the first SCHED row;
    SCHED (request, new, cached); EVENTS (step, 0 first token / 1 finished, request). DONE, FULL (grow the buffers and call again), SMALL_TREE (grow
    the in-batch tree: ``SGLangState.grow_batch_tree``) or FAILED."""
    SG, BQ, BF, BX = S[5], S[12], S[13], S[14]
    WQ = S[2]
    n = due.shape[0]
    room = SG[G_MAXRUN] + 2
    while True:
        now = L[3]
        while L[0] < n and due[L[0]] <= now:
            WQ[SG[G_NWAIT]] = L[0]
            SG[G_NWAIT] += 1
            L[0] += 1
        if not has_work(S):
            if L[0] >= n:
                return DONE
            L[3] = max(now, due[L[0]])
            continue
        if L[1] >= STEPS.shape[0] or (L[5] and L[2] + room > SCHED.shape[0]) or \
                L[4] + 2 * room > EVENTS.shape[0]:
            return FULL
        if not batch_tree_fits(S):
            return SMALL_TREE
        count = iterate(S)
        if count < 0:
            return FAILED
        if count == 0:
            if SG[G_POPPED]:
                continue                            # overlap: processed only
            return FAILED                           # stuck: work but no batch
        row = STEPS[L[1]]
        step_row(S, row)
        row[S_COLUMNS] = L[2]
        if L[5]:
            for i in range(count):
                SCHED[L[2], 0], SCHED[L[2], 1], SCHED[L[2], 2] = BQ[i, 0], BQ[i, 1], BQ[i, 2]
                L[2] += 1
        for i in range(SG[G_NF]):
            EVENTS[L[4], 0], EVENTS[L[4], 1], EVENTS[L[4], 2] = row[0], 0, BF[i]
            L[4] += 1
        for i in range(SG[G_NX]):
            EVENTS[L[4], 0], EVENTS[L[4], 1], EVENTS[L[4], 2] = row[0], 1, BX[i]
            L[4] += 1
        L[1] += 1
        L[3] = now + 1


@kernel
def has_work_py(S):
    return has_work(S)


@kernel
def num_running_py(S):
    return num_running(S)


@kernel
def peek(NI, TG, TOK, Q, DEV):
    """The cached prefix of ``Q`` (whole pages), touching nothing (a router's look); with
    HiCache (``DEV``: the nodes' device flags, else empty) the device prefix."""
    page = TG[7]
    length = Q.shape[0] // page * page
    node, offset = 0, 0
    while offset < length:
        c = find_child(NI, TOK, page, node, Q, offset)
        if c < 0 or (DEV.shape[0] > 0 and not DEV[c]):
            break
        m = match_len(NI, TOK, page, c, Q, offset, length - offset)
        offset += m
        if m < NI[c, N_KL]:
            break
        node = c
    return offset
