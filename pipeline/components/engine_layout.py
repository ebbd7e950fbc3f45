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
 T_POLICY) = range(10)
T_SIZE = 10
# T_POLICY: LMCache's cache_policy of a ``ktier`` list (the tier stack's CPU and disk tiers)
POLICY_LRU, POLICY_FIFO, POLICY_MRU = range(3)

# engine errors (G_ERROR)
ERR_BLOCKS = 1          # a request's block table overflowed (a bug)
