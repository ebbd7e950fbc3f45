"""LMCache 0.5.6's tier stack (local CPU, then local disk, then a remote store) under vLLM
v1, ported literally: the oracle of the compiled ``pipeline.components.kstack`` (rules and
sources in docs/tiers.md; compared with LMCache's own ``StorageManager`` and backends by
``scripts/lmcache_reference.py --stack``).

Every chunk is a full chunk of ``chunk`` tokens (the engine's keys); capacities are in
tokens, 0 for an absent disk or remote tier. One request is ``lookup`` (at admission),
``retrieve`` (the worker's load, when vLLM loads anything), ``unpin`` and ``store`` (once
the prompt is computed). Each tier is an ``OrderedDict`` key -> tokens, least recent first.
``policy`` is LMCache's ``cache_policy`` of the CPU and disk tiers (``lru``, ``fifo``: a hit
moves nothing, ``mru``: evict the most recent, ``lfu``: each tier kept in eviction order,
by hit count then arrival in that count: ``cache_policy/lfu.py``); the remote store is LRU.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence

__all__ = ["StackOracle"]


class StackOracle:
    """See the module docstring; ``pins`` counts the CPU pins (lookup) and references
    (a retrieval in flight) that make a CPU chunk unevictable."""

    def __init__(self, cpu: int, disk: int, remote: int, chunk: int,
                 policy: str = "lru") -> None:
        self.capacity = {"cpu": int(cpu), "disk": int(disk), "remote": int(remote)}
        self.chunk, self.policy = int(chunk), policy
        self.tiers = {name: OrderedDict() for name in self.capacity}
        self.pins: Counter = Counter()
        self.counts: dict[str, Counter] = {"cpu": Counter(), "disk": Counter()}

    def _lfu(self, name: str) -> bool:
        return self.policy == "lfu" and name != "remote"

    def _reorder(self, name: str) -> None:
        """LFU: a stable sort by count keeps each count's keys in arrival order."""
        tier, counts = self.tiers[name], self.counts[name]
        for key in sorted(tier, key=lambda k: counts[k]):
            tier.move_to_end(key)

    def _insert(self, name: str, key: Hashable) -> None:
        """A new chunk: the most recent end (LFU: count 1, the end of count 1)."""
        self.tiers[name][key] = self.chunk
        if self._lfu(name):
            self.counts[name][key] = 1
            self._reorder(name)

    def _remove(self, name: str, key: Hashable) -> None:
        del self.tiers[name][key]
        if self._lfu(name):
            del self.counts[name][key]

    def used(self, name: str) -> int:
        return sum(self.tiers[name].values())

    def _on(self, name: str) -> bool:
        return self.capacity[name] > 0

    def _hit(self, name: str, key: Hashable) -> None:
        """The policy's update_on_hit (the remote store: LRU)."""
        if self._lfu(name):
            self.counts[name][key] += 1
            self.tiers[name].move_to_end(key)
            self._reorder(name)
        elif name == "remote" or self.policy != "fifo":
            self.tiers[name].move_to_end(key)

    def _victim(self, name: str, evictable=lambda key: True):
        """The policy's eviction candidate (MRU: the most recent), or None."""
        order = reversed(self.tiers[name]) if self.policy == "mru" and name != "remote" \
            else iter(self.tiers[name])
        return next((key for key in order if evictable(key)), None)

    def lookup(self, keys: Sequence[Hashable]) -> tuple[int, int, int]:
        """StorageManager.batched_contains(pin=True) then touch_cache: chunks hit in the CPU,
        then the disk, then the remote tier, each a prefix of what the tier before missed."""
        split, rest = [], list(keys)
        touched: dict[str, list] = {"cpu": [], "disk": []}
        for name in ("cpu", "disk", "remote"):
            hit = 0
            if self._on(name):
                tier = self.tiers[name]
                while hit < len(rest) and rest[hit] in tier:
                    if name == "remote":
                        self._hit(name, rest[hit])       # MockConnector exists(): refresh
                    else:
                        touched[name].append(rest[hit])  # contains(pin=True)
                    hit += 1
            split.append(hit)
            rest = rest[hit:]
        for key in touched["cpu"]:
            self.pins[key] += 1
        for name in ("cpu", "disk"):                     # touch_cache: reversed
            for key in reversed(touched[name]):
                self._hit(name, key)
        return tuple(split)

    def _allocate(self, in_flight: int) -> bool:
        """LocalCPUBackend.allocate of one chunk: evict the least recent evictable chunk
        until it fits; False when none is left (LMCache would wait: busy_loop)."""
        while self.used("cpu") + in_flight + self.chunk > self.capacity["cpu"]:
            victim = self._victim("cpu", lambda key: self.pins[key] == 0)
            if victim is None:
                return False
            self._remove("cpu", victim)
        return True

    def retrieve(self, keys: Sequence[Hashable], split: tuple[int, int, int], gpu: int,
                 prompt: int) -> bool:
        """The worker's retrieve of the chunks from ``gpu // chunk`` up to the hit (vLLM asks
        only when it loads anything); returns whether every disk / remote chunk was
        promoted (False: LMCache would have waited for CPU memory)."""
        hit = sum(split)
        tokens = hit * self.chunk
        need = tokens - gpu - (tokens == prompt)
        if need <= 0:
            return True
        first = gpu // self.chunk
        bounds = (0, split[0], split[0] + split[1], hit)
        locations = [name for name, count in zip(("cpu", "disk", "remote"), split) if count]
        held: list = []
        complete, loose = True, 0                         # loose: loaded, not in the tier
        for t, name in enumerate(("cpu", "disk", "remote")):
            span = list(keys[max(bounds[t], first):bounds[t + 1]])
            if not span:
                continue
            if name == "cpu":
                held += span                              # get_blocking: a reference
                for key in span:
                    self.pins[key] += 1
                continue
            if name == "remote" and len(locations) > 1:
                for key in span:                          # get_block_mapping's exists()
                    self._hit("remote", key)
            got, in_flight = [], loose
            for key in span:
                if not self._allocate(in_flight):
                    complete = False
                    break
                got.append(key)
                in_flight += self.chunk
            if name == "disk":                            # update_on_hit of each loaded
                for key in got:
                    self._hit("disk", key)
            if name == "disk" and len(got) < len(span):
                loose += len(got) * self.chunk            # a None among them: no write-back
                continue
            for key in got:                               # write-back to the CPU tier
                if key in self.tiers["cpu"]:
                    loose += self.chunk                   # freed after the retrieve
                    continue
                self._insert("cpu", key)
                self.pins[key] += 1
                held.append(key)
        for key in held:                                  # ref_count_down after to_gpu
            self.pins[key] -= 1
        return complete

    def unpin(self, keys: Sequence[Hashable], split: tuple[int, int, int]) -> None:
        """lookup_unpin: release the lookup's CPU pins."""
        for key in keys[:split[0]]:
            self.pins[key] -= 1

    def _put(self, name: str, key: Hashable) -> None:
        """A disk / remote put: present -> most recent; else evict the least recent until
        it fits and insert it most recent (a chunk larger than the tier is not stored)."""
        tier, capacity = self.tiers[name], self.capacity[name]
        if key in tier:
            self._hit(name, key)
            return
        if self.chunk > capacity:
            return
        while self.used(name) + self.chunk > capacity:
            self._remove(name, self._victim(name))
        self._insert(name, key)

    def store(self, keys: Sequence[Hashable], prompt: int, hit_tokens: int) -> None:
        """wait_for_save -> LMCacheEngine.store from LMCache's hit: allocate every chunk in
        the CPU (the rest dropped when one does not fit), then StorageManager.batched_put:
        the CPU put (present: skipped), the disk put and the remote put of the same
        chunks."""
        chunk = self.chunk
        boundary = -(-(hit_tokens + 1) // chunk) * chunk
        if hit_tokens > 0 and prompt < boundary:
            return
        allocated, in_flight = [], 0
        for key in keys[hit_tokens // chunk:]:
            if not self._allocate(in_flight):
                break
            allocated.append(key)
            in_flight += chunk
        for key in allocated:
            if key not in self.tiers["cpu"]:
                self._insert("cpu", key)
        for name in ("disk", "remote"):
            if self._on(name):
                for key in allocated:
                    self._put(name, key)

    def state(self) -> dict[str, list]:
        """Each tier's keys, least recent first."""
        return {name: list(tier) for name, tier in self.tiers.items()}
