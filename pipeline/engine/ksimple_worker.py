"""The ``SimpleCPUOffloadConnector``'s worker in the engine loop, compiled (kvlab's fake
worker: vLLM's is CUDA; docs/offloading.md, "vLLM's other native connector"): a step's load
event at its start on the load stream, its store event at its end on the store stream, each
stream FIFO, an event taking ``transfer_ms`` (no time on the step clock); and the scheduler
side's ``update_connector_output`` (``vllm/v1/simple_kv_offload/manager.py:1040-1197``): the
load events done release their slots and GPU blocks (their requests loaded, in admission
order), then each store event done registers its GPU blocks' keys on its slots and releases
both. The state is ``pipeline.engine.ksimple_offload``'s.
"""

from __future__ import annotations

import numpy as np

from pipeline.components.engine_layout import (
    F_END0, F_NEXTARR, F_NOW, G_NFREE, LOAD_DONE, LOAD_FLIGHT, NONE, O_DONE, O_KLEN, O_TIMED,
    O_WSEQ, REF, RF_END, RF_START, RF_SUBMIT, X_LDONE, X_LOAD)
from pipeline.components.kjit import helper, inlined, kernel
from pipeline.components.kpool import append_free, cache_one
from pipeline.engine.ksimple_offload import (
    E_COUNT, E_ID, E_START, E_SUB, I_CBH, I_CHT, I_CP, I_GINF, I_REG, I_RING, I_SC,
    I_SEV, I_SEVT, I_SF, I_SQ, LOAD, SC_BBYTES, SC_EH0, SC_EH1, SC_EL0, SC_EL1, SC_FREE,
    SC_LWM, SC_RHEAD, SC_RLEN, SF_DLAT, SF_DRATE, SF_FREE0, SF_LAT, SF_RATE, SF_SLOTS, SQ_LEV,
    SQ_NLOAD, SQ_OFF, STORE, free_gpu, free_slots, sync_jobs)

__all__ = ["worker_start", "any_done", "complete", "transfer_ms", "event_ms"]


@inlined
def _submit(O, stream, at):
    """Submit the stream's events not submitted yet at ``at``; returns the last end."""
    OC, SC, SEV, SEVT, SF = O[0], O[I_SC], O[I_SEV], O[I_SEVT], O[I_SF]
    cap = SEV.shape[1]
    head, length = SC[SC_EH0 + 2 * stream], SC[SC_EL0 + 2 * stream]
    for k in range(length):
        j = (head + k) % cap
        if SEV[stream, j, E_SUB] != 0:
            continue
        begin = max(at, SF[SF_FREE0 + stream])
        end = begin
        if OC[O_TIMED] != 0:
            end = begin + transfer_ms(SEV[stream, j, E_COUNT], SC[SC_BBYTES], SF)
        SF[SF_FREE0 + stream] = end
        SEV[stream, j, E_SUB] = 1
        SEVT[stream, j] = end
        if stream == LOAD:
            _load_times(O, SEV[stream, j, E_ID], at, begin, end)
    return 0


@helper
def transfer_ms(blocks, block_bytes, SF):
    """One event's time: the CPU medium ``blocks x bytes / link + latency``; the disk
    medium through its staging buffers, each block one read or write (``bytes / disk rate +
    disk latency``) and one copy over the link: pipelined over two or more buffer slots
    (``blocks x max + min`` of the two), one after the other with one; + latency."""
    copy = float(block_bytes) / SF[SF_RATE]
    if SF[SF_SLOTS] == 0:
        return blocks * copy + SF[SF_LAT]
    io = float(block_bytes) / SF[SF_DRATE] + SF[SF_DLAT]
    if SF[SF_SLOTS] >= 2:
        return blocks * max(io, copy) + min(io, copy) + SF[SF_LAT]
    return blocks * (io + copy) + SF[SF_LAT]


@kernel
def event_ms(blocks, block_bytes, SF):
    """``transfer_ms`` from Python (the tier's ``SF``)."""
    return transfer_ms(blocks, block_bytes, SF)


@helper
def _load_times(O, event, at, begin, end):
    OC, SQ, KQ, RF = O[0], O[I_SQ], O[11], O[8]
    for i in range(OC[O_KLEN]):
        slot = KQ[i]
        if SQ[slot, SQ_LEV] == event and RF[slot, RF_SUBMIT] == -1.0:
            RF[slot, RF_SUBMIT], RF[slot, RF_START], RF[slot, RF_END] = at, begin, end


@helper
def _next_end(O):
    """The earliest end of a submitted event in flight (inf: none)."""
    SC, SEV, SEVT = O[I_SC], O[I_SEV], O[I_SEVT]
    cap = SEV.shape[1]
    best = np.inf
    for stream in range(2):
        head, length = SC[SC_EH0 + 2 * stream], SC[SC_EL0 + 2 * stream]
        for k in range(length):
            j = (head + k) % cap
            if SEV[stream, j, E_SUB] != 0 and SEVT[stream, j] < best:
                best = SEVT[stream, j]
    return best


@inlined
def _unsubmitted(O, stream):
    """Whether the stream has an event not submitted (they are its queue's tail)."""
    SC, SEV = O[I_SC], O[I_SEV]
    length = SC[SC_EL0 + 2 * stream]
    if length == 0:
        return False
    return SEV[stream, (SC[SC_EH0 + 2 * stream] + length - 1) % SEV.shape[1], E_SUB] == 0


@inlined
def worker_start(O, step_ms, q, empty, in_flight):
    """The fake worker for the step in batch slot ``q``: the load event at its start, the
    store event at its end (an empty step ends at once while a batch with tokens is in
    flight, else when the next event ends or the next request arrives). Returns the
    step's end."""
    OC, OF = O[0], O[1]
    timed = OC[O_TIMED] != 0
    now = OF[F_NOW]
    if not timed:
        OC[O_WSEQ] += 1
        now = float(OC[O_WSEQ])
    if _unsubmitted(O, LOAD):
        _submit(O, LOAD, now)
    if not empty:
        end = now + step_ms
    else:
        end = now
        if timed and not in_flight:
            wake = min(_next_end(O), OF[F_NEXTARR])
            if wake < np.inf:
                end = max(now, wake)
    if _unsubmitted(O, STORE):
        _submit(O, STORE, end)
    OF[F_END0 + q] = end
    return end


@inlined
def _head_done(O, stream, end):
    """Whether the stream's first event is submitted and ends by ``end``."""
    SC, SEV, SEVT = O[I_SC], O[I_SEV], O[I_SEVT]
    if SC[SC_EL0 + 2 * stream] == 0:
        return False
    j = SC[SC_EH0 + 2 * stream] % SEV.shape[1]
    return SEV[stream, j, E_SUB] != 0 and SEVT[stream, j] <= end


@inlined
def any_done(O, q):
    """Whether ``complete`` has an event to retire by the end of batch slot ``q``'s step
    (else it changes nothing and is not called)."""
    end = O[1][F_END0 + q]
    return _head_done(O, LOAD, end) or _head_done(O, STORE, end)


@inlined
def complete(S, O, q, step):
    """``update_connector_output`` of the step in batch slot ``q``: the load events done
    by its end (their requests loaded, in admission order), then the store events."""
    OC, OF, SC, SEV, SEVT = O[0], O[1], O[I_SC], O[I_SEV], O[I_SEVT]
    end = OF[F_END0 + q]
    cap = SEV.shape[1]
    done = 0
    while SC[SC_EL0] > 0:
        j = SC[SC_EH0] % cap
        if SEV[LOAD, j, E_SUB] == 0 or SEVT[LOAD, j] > end:
            break
        SC[SC_LWM] = SEV[LOAD, j, E_ID]
        SC[SC_EH0] = (j + 1) % cap
        SC[SC_EL0] -= 1
        done += 1
    if done > 0:
        _loads_done(S, O, step)
    while SC[SC_EL1] > 0:
        j = SC[SC_EH1] % cap
        if SEV[STORE, j, E_SUB] == 0 or SEVT[STORE, j] > end:
            break
        _store_done(S, O, SEV[STORE, j, E_START], SEV[STORE, j, E_COUNT])
        SC[SC_EH1] = (j + 1) % cap
        SC[SC_EL1] -= 1
        done += 1
    OC[O_DONE] += done
    sync_jobs(O)
    return done


@helper
def _loads_done(S, O, step):
    """``_cleanup_load_request`` of each request whose load event is done."""
    OC, SQ, REG, KQ, RX = O[0], O[I_SQ], O[I_REG], O[11], O[7]
    for i in range(OC[O_KLEN]):
        slot = KQ[i]
        lev = SQ[slot, SQ_LEV]
        if RX[slot, X_LOAD] != LOAD_FLIGHT or lev < 0 or lev > O[I_SC][SC_LWM]:
            continue
        off, n = SQ[slot, SQ_OFF], SQ[slot, SQ_NLOAD]
        free_slots(O, REG[2, off:off + n], n)
        free_gpu(S, O, REG[1, off:off + n], n)
        SQ[slot, SQ_LEV] = -1
        SQ[slot, SQ_NLOAD] = 0
        RX[slot, X_LOAD] = LOAD_DONE
        if RX[slot, X_LDONE] == NONE:
            RX[slot, X_LDONE] = step


@inlined
def _store_done(S, O, start, count):
    """``_process_store_completion``: each slot takes its GPU block's key, then the slots
    and the GPU blocks are released (in the event's order). One pass: a pair's key, slot
    and GPU block touch nothing another pair's do, and every block released is hashed (a
    slot was just given its key; a GPU block in flight was hashed and held), so each goes
    to its free queue's tail in the order vLLM's batched calls give."""
    P, BH, G = S[5], S[6], S[1]
    RING, SC, GINF = O[I_RING], O[I_SC], O[I_GINF]
    CP, CHT = O[I_CP], O[I_CHT]
    mask = CHT.shape[0] - 1
    cap = RING.shape[1]
    freed_slots, freed_gpu = 0, 0
    for i in range(count):
        j = (start + i) % cap
        gpu, slot = RING[0, j], RING[1, j]
        cache_one(CP, O[I_CBH], CHT, mask, slot, BH[gpu])
        CP[slot, REF] -= 1
        if CP[slot, REF] == 0:
            append_free(CP, slot)
            freed_slots += 1
        GINF[gpu] = 0
        P[gpu, REF] -= 1
        if P[gpu, REF] == 0:
            append_free(P, gpu)
            freed_gpu += 1
    SC[SC_FREE] += freed_slots
    G[G_NFREE] += freed_gpu
    SC[SC_RHEAD] = (start + count) % cap
    SC[SC_RLEN] -= count
