"""The tree operations the compiled scheduler (``sglang_ksched``) calls, for either tree: the
plain radix cache (``sglang_kradix``, a 3-tuple) or HiCache (``sglang_khiradix``, a longer
tuple). numba picks the implementation when it types the call (``overload`` on the tuple's
length), so a run without HiCache compiles none of HiCache's code, and a HiCache run
compiles its own specialisation of each scheduler function.

* ``t_match``: (device prefix, host hit, deepest matched node, deepest device node);
* ``t_match_prefix``: (prefix, node), the LRU touch of the waiting prefixes;
* ``t_checkpoint``: the checkpoint's tree part: (slots freed as duplicates, the key's node);
* ``t_inc_lock`` / ``t_dec_lock`` / ``t_evict``;
* ``t_load_back``: ``PrefillAdder``'s load back, (loaded, node, evicted);
* ``t_check_events``: ``check_hicache_events``; ``t_moved``: host tokens (loaded, written).
"""

from __future__ import annotations

from numba.extending import overload

from pipeline.components import sglang_khiradix as HI
from pipeline.components.sglang_khinodes import HG_LOADED, HG_WRITTEN, hi_dec_lock, \
    hi_inc_lock
from pipeline.components import sglang_kradix as KR

__all__ = ["t_match", "t_match_prefix", "t_checkpoint", "t_inc_lock", "t_dec_lock",
           "t_evict", "t_load_back", "t_check_events", "t_moved"]

OPTIONS = dict(jit_options=dict(_nrt=False, error_model="numpy"))


def _hi(T) -> bool:
    return len(T.types) > 3


def t_match(T, TOK, start, length):
    raise NotImplementedError


def t_match_prefix(T, TOK, start, length):
    raise NotImplementedError


def t_checkpoint(T, TOK, start, key_len, prompt, inserted, protected):
    raise NotImplementedError


def t_inc_lock(T, node):
    raise NotImplementedError


def t_dec_lock(T, node):
    raise NotImplementedError


def t_evict(T, num):
    raise NotImplementedError


def t_load_back(T, best, last, host_hit, available):
    raise NotImplementedError


def t_check_events(T):
    raise NotImplementedError


def t_moved(T):
    raise NotImplementedError


@overload(t_match, **OPTIONS)
def _match(T, TOK, start, length):
    if _hi(T):
        return lambda T, TOK, start, length: HI.hi_match(T, TOK, start, length)

    def plain(T, TOK, start, length):
        prefix, node = KR.match_prefix(T, TOK, start, length)
        return prefix, 0, node, node
    return plain


@overload(t_match_prefix, **OPTIONS)
def _match_prefix(T, TOK, start, length):
    if _hi(T):
        def hi(T, TOK, start, length):
            device, _, _, node = HI.hi_match(T, TOK, start, length)
            return device, node
        return hi
    return lambda T, TOK, start, length: KR.match_prefix(T, TOK, start, length)


@overload(t_checkpoint, **OPTIONS)
def _checkpoint(T, TOK, start, key_len, prompt, inserted, protected):
    if _hi(T):
        return lambda T, TOK, start, key_len, prompt, inserted, protected: \
            HI.hi_checkpoint(T, TOK, start, key_len, prompt, inserted, protected)

    def plain(T, TOK, start, key_len, prompt, inserted, protected):
        prefix, _ = KR.insert(T, TOK, start, key_len, 0, inserted)
        if 0 < prompt < key_len:
            KR.insert(T, TOK, start, prompt, 1, prompt)
        _, node = KR.match_prefix(T, TOK, start, key_len)
        return max(prefix - protected, 0), node
    return plain


@overload(t_inc_lock, **OPTIONS)
def _inc_lock(T, node):
    if _hi(T):
        return lambda T, node: hi_inc_lock(T, node)
    return lambda T, node: KR.inc_lock(T, node)


@overload(t_dec_lock, **OPTIONS)
def _dec_lock(T, node):
    if _hi(T):
        return lambda T, node: hi_dec_lock(T, node)
    return lambda T, node: KR.dec_lock(T, node)


@overload(t_evict, **OPTIONS)
def _evict(T, num):
    if _hi(T):
        return lambda T, num: HI.hi_evict(T, num)
    return lambda T, num: KR.evict(T, num)


@overload(t_load_back, **OPTIONS)
def _load_back(T, best, last, host_hit, available):
    if _hi(T):
        return lambda T, best, last, host_hit, available: \
            HI.hi_load_back(T, best, last, host_hit, available)
    return lambda T, best, last, host_hit, available: (0, last, 0)


@overload(t_check_events, **OPTIONS)
def _check_events(T):
    if _hi(T):
        return lambda T: HI.hi_check_events(T)
    return lambda T: None


@overload(t_moved, **OPTIONS)
def _moved(T):
    if _hi(T):
        return lambda T: (T[4][HG_LOADED], T[4][HG_WRITTEN])
    return lambda T: (0, 0)
