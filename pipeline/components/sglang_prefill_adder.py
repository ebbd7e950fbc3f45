"""SGLang 0.5.23's ``PrefillAdder`` with the base ``PrefillBudget`` (one token pool), in
plain Python for ``sglang_sched``'s loop: which waiting requests (and the chunked one) a
prefill batch admits against the KV budget (available + evictable - the running requests'
remaining outputs x new-token ratio), the prefill token budget and the chunk
(``managers/schedule_policy.py``, ``mem_cache/prefill_budget.py``). ``add_one_req``'s
verdicts: ``CONTINUE``, ``NO_TOKEN``, ``OTHER``."""

from __future__ import annotations

from pipeline.components.sglang_batch import Batch, Req
from pipeline.components.sglang_settings import CLIP_MAX_NEW_TOKENS

__all__ = ["CONTINUE", "NO_TOKEN", "OTHER", "Adder"]

CONTINUE, NO_TOKEN, OTHER = "continue", "no_token", "other"


class Adder:
    """``PrefillAdder`` with the base ``PrefillBudget`` (one token pool) for ``sched``, the
    ``sglang_sched.Scheduler`` (its pool, tree, settings and new-token ratio)."""

    def __init__(self, sched, running: Batch) -> None:
        s = sched.s
        self.sched, self.P = sched, sched.P
        self.rem_input = s.max_prefill_tokens
        self.rem_chunk = s.chunked_prefill_size
        self.total_offset = sum(min(r.max_new - r.out, CLIP_MAX_NEW_TOKENS) * sched.ratio
                                for r in running.reqs)
        self.current_offset = 0
        self.can_run: list[Req] = []
        self.new_chunked: Req | None = None

    def _ceil(self, tokens: int) -> int:
        return -(-tokens // self.P) * self.P

    def _available(self) -> int:
        return self.sched.free + self.sched.tree.evictable_size

    def remaining_total(self) -> float:
        return self._available() - self.total_offset

    def budget_state(self) -> str:
        if not (self.remaining_total() > 0 and self._available() - self.current_offset > 0):
            return NO_TOKEN
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return OTHER
        return CONTINUE

    def _charge(self, extend_len: int, max_new: int) -> None:
        """``_update_prefill_budget`` + ``PrefillBudget.reserve``."""
        extend = self._ceil(extend_len)
        self.total_offset += extend + self.P + max_new
        self.current_offset += extend + self.P
        self.rem_input -= extend
        if self.rem_chunk is not None:
            self.rem_chunk -= extend

    def add_chunked_req(self, req: Req) -> Req | None:
        rem = self.rem_chunk
        available = min(rem, int(self.remaining_total()))
        rem = available if available > 0 else rem
        extend = len(req.fill()) - req.prefix_len
        truncated = extend > rem
        req.extend_end = req.prefix_len + min(extend, rem)
        self.can_run.append(req)
        self._charge(req.extend_end - req.prefix_len,
                     0 if truncated else min(req.max_new, CLIP_MAX_NEW_TOKENS))
        return req if truncated else None

    def _select(self, req: Req, total: int, host: int = 0):
        """``_select_prefill_admission``: (prefix, extend, max_new, chunked) or a verdict;
        ``host`` tokens a load back would add to the prefix (HiCache)."""
        prefix = req.prefix_len + host
        extend = len(req.fill()) - prefix
        input_tokens = self._ceil(extend)
        if not total < self.remaining_total():
            return NO_TOKEN
        if self.rem_chunk is None and self.can_run and input_tokens >= self.rem_input:
            return OTHER
        chunked, new_tokens = False, min(req.max_new, CLIP_MAX_NEW_TOKENS)
        if self.rem_chunk is not None and input_tokens > self.rem_chunk:
            end = (prefix + self.rem_chunk // self.P * self.P) // self.P * self.P
            extend = end - prefix
            if extend <= 0:
                return OTHER
            chunked, new_tokens = True, 0
        return prefix, extend, new_tokens, chunked

    def add_one_req(self, req: Req, has_chunked: bool) -> str:
        max_new = min(max(req.max_new - req.out, 0), CLIP_MAX_NEW_TOKENS)
        total = len(req.fill()) - req.prefix_len + max_new + self.P
        tree = self.sched.tree
        tree.inc_lock_ref(req.last_node)                 # _lock_node
        try:
            admission = self._select(req, total)
            if isinstance(admission, str):
                return admission
            prefix, extend, new_tokens, chunked = admission
            req.extend_end = prefix + extend               # _commit_prefill_admission
            req.lock = self.sched.lock(req.last_node)
            self.can_run.append(req)
            if chunked:
                self.new_chunked = req
            self._charge(extend, new_tokens)
        finally:
            tree.dec_lock_ref(req.last_node)
        return self.budget_state()
