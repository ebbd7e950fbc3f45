"""SGLang 0.5.23's own ``RadixCache`` on CPU, unmodified, and a driver for it (never in CI).

The sources come from ``scripts/ensure_sglang_sources.sh`` (the wheel's .py files in
``~/.cache/kvlab/sglang-0.5.23``). ``load_sglang`` imports ``sglang.srt.mem_cache.radix_cache``
through ``stub_importer.Importer`` with torch (not installed) and the modules the tree does not
use (memory pools, allocators, KV events, metrics, environment, kernels, distributed) replaced
by inert stubs; ``radix_cache.py``, ``base_prefix_cache.py``, ``evict_policy.py`` and
``mem_cache/utils.py`` run as shipped. Two things are set from outside, none edited:

* KV values: a list-backed ``Values`` (slicing, ``len``, ``clone``) stands for the int64
  tensors of slot ids, and ``FakeAllocator.free_segment`` counts the slots eviction frees.
* the clock: ``radix_cache.time`` (the module's binding of ``time``) is replaced by a counter
  whose ``monotonic()`` returns 1.0, 2.0, ...; with the real clock two readings may be equal,
  and then the eviction heap order depends on set iteration (object ids), i.e. on the run.

``SGLangTree`` drives it with the operations of ``pipeline.components.sglang_radix``
(match_prefix, insert, inc/dec_lock_ref, evict) and ``snapshot`` returns the tree in a
canonical form, so the test compares the two trees after every operation.

    .venv/bin/python scripts/sglang_reference.py      # a small self-check; prints JSON
"""

from __future__ import annotations

import importlib.abc
import json
import os
import sys
import time
import types
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from stub_importer import Importer  # noqa: E402

VERSION = "0.5.23"
#: Where ensure_sglang_sources.sh extracts them: $KVLAB_CACHE, default ~/.cache/kvlab.
CACHE = Path(os.environ.get("KVLAB_CACHE", Path.home() / ".cache" / "kvlab"))
SOURCES = CACHE / f"sglang-{VERSION}"
MARKER = Path("sglang") / "srt" / "mem_cache" / "radix_cache.py"

#: SGLang modules replaced by stubs: everything radix_cache.py imports but the tree never runs.
STUBBED = ("sglang.kernels", "sglang.srt.observability", "sglang.srt.disaggregation",
           "sglang.srt.environ", "sglang.srt.mem_cache.memory_pool",
           "sglang.srt.mem_cache.allocator", "sglang.srt.mem_cache.events",
           "sglang.srt.mem_cache.unified_cache", "sglang.srt.runtime_context",
           "sglang.srt.utils", "sglang.srt.mem_cache.cpp_utils", "sglang.srt.configs",
           "sglang.srt.distributed")


def sources_present(source: Path = SOURCES) -> bool:
    return (source / MARKER).is_file()


class _SGLangFinder(importlib.abc.MetaPathFinder):
    """``Importer`` for the sglang package, wrapped so that it is no ``Importer`` instance:
    stub_importer.install_importer (vLLM's) installs itself only when no Importer is on
    sys.meta_path, and both must coexist in one test process. A guard stops the recursion
    of Importer's look-up through sys.meta_path back into this finder."""

    def __init__(self, source: Path) -> None:
        self.inner = Importer(source, top="sglang", stubbed=STUBBED)
        self.busy = False

    def find_spec(self, fullname, path, target=None):
        if self.busy:
            return None
        self.busy = True
        try:
            return self.inner.find_spec(fullname, path, target)
        finally:
            self.busy = False


class _Clock:
    """Stands for the ``time`` module inside radix_cache.py: monotonic() is a counter."""

    def __init__(self) -> None:
        self.now = 0.0
        self.perf_counter = time.perf_counter

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


def load_sglang(source: Path = SOURCES) -> types.ModuleType:
    """SGLang's radix_cache module, imported once per process from ``source``."""
    if not sources_present(source):
        raise FileNotFoundError(f"SGLang {VERSION} sources absent from {source}: "
                                "run scripts/ensure_sglang_sources.sh")
    if not any(isinstance(f, _SGLangFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SGLangFinder(source))
    import sglang.srt.mem_cache.radix_cache as radix_cache
    return radix_cache


class Values(list):
    """A list of slot ids standing for a 1-D int64 tensor (what the tree does with it)."""

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Values(item) if isinstance(index, slice) else item

    def clone(self) -> Values:
        return Values(self)


class EnvValue:
    """One of ``sglang.srt.environ.envs``' values: ``get()`` gives it."""

    def __init__(self, value) -> None:
        self.value = value

    def get(self):
        return self.value


class Envs:
    """``sglang.srt.environ.envs``: each name's value from ``DEFAULTS`` (False when absent)."""

    DEFAULTS: dict = {}

    def __getattr__(self, name):
        return EnvValue(self.DEFAULTS.get(name, False))


class FakeAllocator:
    """The token-to-KV pool allocator as the tree sees it: counts freed slots."""

    device = "cpu"

    def __init__(self) -> None:
        self.freed = 0

    def free_segment(self, indices, start_pos=0) -> None:
        self.freed += len(indices)


class SGLangTree:
    """SGLang's RadixCache with a counter clock, driven by token lists."""

    def __init__(self, page_size: int = 1, policy: str = "lru",
                 source: Path = SOURCES) -> None:
        self.rc = load_sglang(source)
        self.clock = _Clock()
        self.rc.time = self.clock        # the module global radix_cache.py reads time from
        # (each operation below sets it again, so several trees can live in one process)
        self.allocator = FakeAllocator()
        params = self.rc.CacheInitParams(disable=False, req_to_token_pool=None,
                                         token_to_kv_pool_allocator=self.allocator,
                                         page_size=page_size, eviction_policy=policy)
        self.cache = self.rc.RadixCache(params)
        self.next_slot = 0

    def key(self, tokens):
        return self.rc.RadixKey(token_ids=array("q", tokens))

    def match_prefix(self, tokens):
        self.rc.time = self.clock
        result = self.cache.match_prefix(self.rc.MatchPrefixParams(key=self.key(tokens)))
        return result.device_prefix_len, result.last_device_node

    def insert(self, tokens, priority: int = 0, inserted_len: int = 0):
        self.rc.time = self.clock
        values = Values(range(self.next_slot, self.next_slot + len(tokens)))
        self.next_slot += len(tokens)
        result = self.cache.insert(self.rc.InsertParams(
            key=self.key(tokens), value=values, priority=priority, inserted_len=inserted_len))
        return result.prefix_len, result.last_device_node

    def inc_lock_ref(self, node) -> int:
        self.rc.time = self.clock
        return self.cache.inc_lock_ref(node).delta

    def dec_lock_ref(self, node) -> int:
        self.rc.time = self.clock
        return self.cache.dec_lock_ref(node).delta

    def evict(self, num_tokens: int) -> int:
        self.rc.time = self.clock
        before = self.allocator.freed
        evicted = self.cache.evict(self.rc.EvictParams(num_tokens=num_tokens)).num_tokens_evicted
        assert self.allocator.freed - before == evicted
        return evicted

    @property
    def evictable_size(self) -> int:
        return self.cache.evictable_size()

    @property
    def protected_size(self) -> int:
        return self.cache.protected_size()

    def total_size(self) -> int:
        return self.cache.total_size()

    def evictable_leaf_paths(self) -> list:
        return sorted(path_of(node, self.cache.root_node) for node in self.cache.evictable_leaves)

    def snapshot(self) -> list:
        return snapshot(self.cache.root_node, lambda node: tuple(node.key.token_ids))


def path_of(node, root) -> tuple:
    """The tokens from the root to the end of ``node``."""
    parts = []
    while node is not root:
        parts.append(tuple(node.key.token_ids) if hasattr(node.key, "token_ids")
                     else tuple(node.key))
        node = node.parent
    return tuple(t for part in reversed(parts) for t in part)


def snapshot(root, key_of) -> list:
    """Every node as (path tokens, lock_ref, last access, creation, hits, priority), sorted."""
    rows, stack = [], [((), root)]
    while stack:
        prefix, node = stack.pop()
        path = prefix + key_of(node)
        rows.append((path, node.lock_ref, node.last_access_time, node.creation_time,
                     node.hit_count, node.priority))
        stack.extend((path, child) for child in node.children.values())
    return sorted(rows)


def main() -> int:
    tree = SGLangTree()
    steps = [("insert", tree.insert([1, 2, 3])[0]), ("insert", tree.insert([1, 2, 4, 5])[0]),
             ("match", tree.match_prefix([1, 2, 4, 9])[0])]
    _, node = tree.match_prefix([1, 2, 3])
    steps.append(("lock", tree.inc_lock_ref(node)))
    steps.append(("evict", tree.evict(10)))
    steps.append(("unlock", tree.dec_lock_ref(node)))
    print(json.dumps({"steps": steps, "evictable": tree.evictable_size,
                      "protected": tree.protected_size, "total": tree.total_size()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
