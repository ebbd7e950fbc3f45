"""SGLang 0.5.23's HiCache transfers' bookkeeping in plain Python (``HiTransfers``, a part of
``sglang_hiradix.HiRadixTree``): the write and load acks (``check_hicache_events``; each
transfer finishes at once, its ack seen at the next check), host locks and the load back
(``init_load_back``; docs/sglang.md cites the lines).

* **load_back** (``init_load_back``) brings a host run of at least ``load_back_threshold``
  (10) tokens back to the device (device eviction for room), the nodes locked until the ack.
"""

from __future__ import annotations

from pipeline.components.sglang_hinode import HiNode

__all__ = ["LOAD_BACK_THRESHOLD", "HiTransfers"]

LOAD_BACK_THRESHOLD = 10


class HiTransfers:
    """``HiRadixTree``'s acks, host locks and load back."""

    def check_write_acks(self) -> None:
        for node, locked in self.acks:
            for done in [node] + self.pending_splits.pop(node.id, []):
                if done.wt_pending == node.id:
                    done.wt_pending = None
                    self._dup_track(done)
            if locked:
                self.dec_lock_ref(node)
        self.acks = []

    def check_events(self) -> None:
        """``check_hicache_events``: every write and load acked (transfers finish at once)."""
        self.check_write_acks()
        for node, locked_host in self.load_acks:
            self.dec_lock_ref(node)
            self._release_host_lock(node, locked_host)
            walk = node
            while walk is not self.root:
                if self.write_back:
                    if walk.lb_pending == node.id:
                        walk.lb_pending = None
                        self._dup_track(walk)
                else:
                    self._dup_track(walk)
                walk = walk.parent
        self.load_acks = []

    def _host_lock(self, node: HiNode) -> int | None:
        """Host-lock ``node`` (with a host copy, or any under write_back): the receipt."""
        if not node.host and not self.write_back:
            return None
        if node.host_uuid is None:
            self.ids += 1
            node.host_uuid = self.ids
        node.host_lock_ref += 1
        return node.host_uuid

    def _release_host_lock(self, node: HiNode, uuid: int | None) -> None:
        while uuid is not None:
            if not node.host and not self.write_back:
                return
            node.host_lock_ref -= 1
            if node.host_uuid == uuid:
                return
            node = node.parent

    def load_back(self, tokens, mem_quota: int | None = None) -> int:
        """``init_load_back`` for a request of ``tokens`` (the device pool holding only the
        tree): the host tokens brought back."""
        _, host, best, last = self.match(tokens)
        return self.init_load_back(best, last, host, self.device_tokens - self.total_size(),
                                   mem_quota)[0]

    def init_load_back(self, best: HiNode, last: HiNode, host_hit: int, available: int,
                       mem_quota: int | None = None) -> tuple[int, HiNode, int]:
        """``init_load_back`` (``load_back``): (tokens loaded, the request's last node,
        device tokens evicted for room), ``available`` device tokens free before."""
        if best.device and host_hit == 0:
            return 0, last, 0
        locked_host = self._host_lock(best)
        delta = -self.inc_lock_ref(best)
        run, walk = [], best
        while not walk.device:
            run.append(walk)
            walk = walk.parent
        if any(n.lb_pending not in (None, best.id) for n in run):
            run = []                                     # pinned by another load back
        n = sum(len(node.key) for node in run)
        evicted = 0
        if n < LOAD_BACK_THRESHOLD or (mem_quota is not None and n + delta > mem_quota):
            self.dec_lock_ref(best)
            self._release_host_lock(best, locked_host)
            return 0, last, 0
        if available < n:
            evicted = self.evict(n - available)
            if available + evicted < n:
                self.dec_lock_ref(best)
                self._release_host_lock(best, locked_host)
                return 0, last, evicted
        self.loaded += n
        self.dec_lock_ref(best)
        for node in run:
            if self.write_back:
                node.lb_pending = best.id
            self._to_device(node)
        self.inc_lock_ref(best)
        self.load_acks.append((best, locked_host))
        return n, best, evicted
