"""The array layout of the compiled engine state (column numbers, compile-time constants).

Requests are rows of one int64 table (struct of arrays by column), block tables and block
keys flat arrays with per-request offsets; the block pool a table of reference counts, hash
flags and the free queue and hash-holder lists as prev/next indices; the hash -> blocks map
an open-addressing table. ``NONE`` (-1) stands for Python's None.
"""

from __future__ import annotations

NONE = -1

# request table R (int64), one row per request slot
(INDEX, NPROMPT, MAXTOK, NTOK, LIMIT, KOFF, NKEYS, BOFF, NBLK, BCAP, NCACHED, COMPUTED,
 HOLDS, INFLIGHT, STALE, STATUS, PREEMPT, GPUHIT, CPUHIT, FSCHED, FTOK, FIN, STORED,
 CPUSTATE, STALEF) = range(25)
# a tier stack's (``pipeline.components.kstack``): tokens loaded from disk / remote, load ns
DISKHIT, REMOTEHIT, LOADNS = range(25, 28)
R_COLUMNS = 28

WAITING, RUNNING, PREEMPTED, FINISHED = range(4)

# block pool P (int64), one row per block plus the free queue's sentinel row (last)
REF, HASHED, FPREV, FNEXT, HPREV, HNEXT = range(6)
P_COLUMNS = 6

# configuration C (int64)
(C_BS, C_NBLOCKS, C_MAXSEQS, C_MAXBATCH, C_MAXLEN, C_CHUNKED, C_THRESH, C_ASYNC, C_HMASK,
 C_MAXE) = range(10)
C_SIZE = 10

# mutable engine scalars G (int64)
(G_STEP, G_NFREE, G_NRUN, G_WHEAD, G_WLEN, G_FIN, G_QHEAD, G_QLEN, G_NEV, G_EVON,
 G_ERROR) = range(11)
G_SIZE = 11

# the last schedule's record REC (int64)
(X_HAS, X_STEP, X_PREFILL, X_DECODE, X_CONTEXT, X_RELOAD, X_NRUN, X_NWAIT, X_FREE, X_NSCHED,
 X_NFIRST, X_Q) = range(12)
X_SIZE = 12

# batch metadata BMETA[q] (int64); batch entries BQ[q, e] = (slot, new tokens, computed before)
B_STEP, B_NSCHED, B_NSAMP, B_HASREC = range(4)
BQ_SLOT, BQ_NEW, BQ_START = range(3)

# CPU tier scalars (int64); T_HANDLE: a Python tier's handle (``kgeneric.register``), 0 for
# LMCache's compiled tier
(T_ON, T_CAPACITY, T_CHUNK, T_PER, T_MASK, T_USED, T_FREE_TOP, T_COUNT, T_HANDLE,
 T_POLICY, T_BTOP) = range(11)
T_SIZE = 11
# T_POLICY: LMCache's cache_policy of a ``ktier`` list (the tier stack's CPU and disk tiers);
# T_BTOP: LFU's stack of free frequency buckets (``ktier.lfu_tier``)
POLICY_LRU, POLICY_FIFO, POLICY_MRU, POLICY_LFU = range(4)

# engine errors (G_ERROR)
ERR_BLOCKS = 1          # a request's block table overflowed (a bug)

# vLLM's native offloading (``pipeline.engine.knative``): the state tuple O =
# (OC int64 scalars, OF float64 scalars, M the CPU manager's arrays
# (``vllm_offload_policies``), CROW chunk key rows, CFL chunk flags (uint8), CJOB each
# chunk's store job, RQ the manager's per-request state, RX per-request connector state,
# RF per-request load times, JOB / JT the transfer jobs (a ring), KQ the requests holding
# KV while waiting (vLLM's kv_holding_waiting), FINQ requests finished since the last
# schedule, CBL keys being loaded, SCR scratch rows)
(O_ON, O_TPC, O_BPC, O_BS, O_SYNC_BUDGET, O_SYNC_USED, O_KVBPT, O_CHUNK_BYTES, O_TIMED,
 O_JHEAD, O_JLEN, O_JNEXT, O_KLEN, O_NFIN, O_LOADB, O_STOREB, O_DONE, O_MODEL,
 O_ERROR, O_STOREFROM) = range(20)
# async scheduling's defer_block_free: on, the non-empty steps scheduled / processed
# (sched_step_seq, processed_step_seq); the worker's step starts (the step clock)
(O_DEFER, O_SSEQ, O_PSEQ, O_WSEQ) = range(20, 24)
OC_SIZE = 24
# OF: the clock at the step's start, the link's free time, bytes per ms, latency ms, the
# next arrival (ms), the end of each batch slot (2), then the step model's coefficients
(F_NOW, F_FREE, F_RATE, F_LATENCY, F_NEXTARR, F_END0, F_END1, F_COEF) = range(8)
OF_SIZE = F_COEF + 8
# RX columns: chunk rows offset, next chunk to store, in-flight jobs, load state, in the
# in-flight prefills, the step of the first load, the step its completion was processed,
# 1 + the most chunks it can ever offer (0: not known yet), the step it was last scheduled
# in (vLLM's last_sched_seq)
(X_COFF, X_NEXT, X_JOBS, X_LOAD, X_INFL, X_LSTEP, X_LDONE, X_SCAP, X_LSEQ) = range(9)
RX_COLUMNS = 9
LOAD_NONE, LOAD_FLIGHT, LOAD_DONE = range(3)
# RF columns: the first load's submission, start and end on the link (ms)
RF_SUBMIT, RF_START, RF_END = range(3)
# JOB columns (JT: start, end ms)
(J_SLOT, J_KIND, J_A, J_B, J_ID, J_SUB, J_CHUNKS) = range(7)
J_COLUMNS = 7
JOB_ASYNC, JOB_SYNC, JOB_STORE = range(3)
ERR_JOBS = 1            # the transfer-job ring overflowed
