"""SGLang 0.5.23's own ``UnifiedRadixCache`` on CPU, unmodified, with its Python tree core
(never in CI without the sources; tests/test_sglang_unified.py runs it when they are there).

What the scheduler really builds (``mem_cache/registry.py:146``, ``create_unified_radix_cache``)
is a ``UnifiedRadixCache`` (``mem_cache/unified_radix_cache.py``) over a tree core: Rust by
default (``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND``, its source is not in the wheel), Python
(``mem_cache/unified_cache/unified_tree_core.py``) as the fallback. This loads the cache and
the Python core as shipped, with one full-attention component (``components/full.py``), and
drives them with the operations of ``sglang_reference.SGLangTree``.

Replaced, none of SGLang's files edited:

* torch: a module of a few functions over numpy int64 arrays (``tensor``, ``empty``, ``cat``,
  ``device``; ``Tensor`` is an ndarray with ``clone``/``to``): KV slot ids are all it holds.
* ``utils.rank_consensus_checker.rank_consensus``: the identity decorator (it asserts that
  tensor-parallel ranks call the same methods; one rank here).
* ``utils.common.ceil_align``, ``allocator.page_interleave.page_interleave_shard_size`` (1:
  no logical-page sharding), ``envs`` (the defaults, with the Python tree core).
* the modules these paths never run (memory pools, allocators, KV events, metrics, the
  HiCache controller and host pools, distributed, kernels): inert stubs (``stub_importer``).

The packages' ``__init__`` files are not run by ``stub_importer``; the one of
``unified_cache.components`` is (it re-exports ``ComponentType`` and the component classes).
"""

from __future__ import annotations

import importlib
import sys
import types
from array import array

import numpy as np

import sglang_reference as ref
from stub_importer import Importer

STUBBED = ("sglang.kernels", "sglang.srt.observability", "sglang.srt.disaggregation",
           "sglang.srt.mem_cache.memory_pool", "sglang.srt.mem_cache.allocator",
           "sglang.srt.mem_cache.events", "sglang.srt.runtime_context",
           "sglang.srt.mem_cache.cpp_utils", "sglang.srt.configs", "sglang.srt.distributed",
           "sglang.srt.managers.cache_controller", "sglang.srt.mem_cache.buffer_mode",
           "sglang.srt.mem_cache.hybrid_cache", "sglang.srt.mem_cache.swa_memory_pool",
           "sglang.srt.layers", "sglang.srt.managers.schedule_batch", "sglang.srt.server_args",
           "sglang.srt.model_executor", "sglang.srt.utils", "sglang.srt.environ")


class Slots(np.ndarray):
    """An int64 tensor of KV slot ids, as the tree uses one."""

    def clone(self) -> Slots:
        return self.copy()

    def to(self, *args, **kwargs) -> Slots:
        return self

    def cpu(self) -> Slots:
        return self

    def numel(self) -> int:
        return self.size


def slots(data) -> Slots:
    return np.asarray(data, dtype=np.int64).view(Slots)


class _Namespace(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


def _torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.__version__ = "2.9.0"
    torch.Tensor = Slots
    torch.int64, torch.int32, torch.bool = np.int64, np.int32, np.bool_
    torch.float32, torch.uint8 = np.float32, np.uint8
    torch.tensor = lambda data, dtype=None, device=None: slots(data)
    torch.empty = lambda shape, dtype=None, device=None: slots(np.empty(shape))
    torch.zeros = lambda shape, dtype=None, device=None: slots(np.zeros(shape))
    torch.cat = lambda parts, dim=0: slots(np.concatenate([np.asarray(p) for p in parts])
                                           if len(parts) else [])
    torch.device = lambda name: types.SimpleNamespace(type=str(name).split(":")[0])
    torch.iinfo = lambda dtype: types.SimpleNamespace(max=2 ** 63 - 1)
    for part in ("distributed", "cuda", "nn"):
        setattr(torch, part, _Namespace(f"torch.{part}"))
    torch.distributed.ReduceOp = types.SimpleNamespace(MIN="min", MAX="max", SUM="sum")
    torch.int = np.int64
    return torch


class _Envs(ref.Envs):
    """``sglang.srt.environ.envs`` at its defaults, with the Python tree core."""

    DEFAULTS = {"SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python"}


class _Finder(ref._SGLangFinder):
    def __init__(self, source) -> None:
        self.inner = Importer(source, top="sglang", stubbed=STUBBED)
        self.busy = False


def _run_init(package: str) -> None:
    module = importlib.import_module(package)
    path = ref.SOURCES.joinpath(*package.split("."), "__init__.py")
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)


def load() -> types.SimpleNamespace:
    """The modules, imported once per process (a torch stand-in goes into sys.modules:
    do not load this beside a real torch)."""
    if not ref.sources_present():
        raise FileNotFoundError(f"SGLang {ref.VERSION} sources absent from {ref.SOURCES}: "
                                "run scripts/ensure_sglang_sources.sh")
    if "sglang.srt.mem_cache.unified_radix_cache" not in sys.modules:
        real = sys.modules.get("torch")
        assert real is None or getattr(real, "Tensor", None) is Slots or \
            type(real).__name__ == "_StubModule", "a real torch is loaded"
        sys.modules["torch"] = _torch()
        for part in ("distributed", "cuda", "nn"):
            sys.modules[f"torch.{part}"] = getattr(sys.modules["torch"], part)
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder(ref.SOURCES))
        consensus = types.ModuleType("sglang.srt.utils.rank_consensus_checker")
        consensus.rank_consensus = lambda func=None, **kw: func if func else (lambda f: f)
        sys.modules[consensus.__name__] = consensus
        _run_init("sglang.srt.mem_cache.unified_cache.components")
        import sglang.srt.mem_cache.unified_radix_cache as urc
        urc.page_interleave_shard_size = lambda allocator: 1
        urc.ceil_align = lambda x, a: -(-x // a) * a
        envs = _Envs()
        for name, module in list(sys.modules.items()):
            if name.startswith("sglang.srt.") and name != "sglang.srt.environ" and \
                    "envs" in vars(module):
                module.envs = envs
    import sglang.srt.mem_cache.base_prefix_cache as bpc
    import sglang.srt.mem_cache.cache_init_params as cip
    import sglang.srt.mem_cache.radix_cache as rc
    import sglang.srt.mem_cache.unified_radix_cache as urc
    from sglang.srt.mem_cache.unified_cache.components import ComponentType
    return types.SimpleNamespace(urc=urc, bpc=bpc, cip=cip, rc=rc, FULL=ComponentType.FULL)


class Allocator:
    """The device allocator as the tree sees it: counts freed slots."""

    device = "cpu"
    page_size = 1

    def __init__(self) -> None:
        self.freed = 0

    def free(self, indices) -> None:
        self.freed += len(indices)

    def free_segment(self, indices, start_pos=0) -> None:
        self.freed += len(indices)


class UnifiedTree:
    """SGLang's UnifiedRadixCache (Python core, one full component), driven by token lists
    with ``sglang_reference.SGLangTree``'s methods; node handles are node ids."""

    def __init__(self, page_size: int = 1, policy: str = "lru") -> None:
        self.m = load()
        self.allocator = Allocator()
        self.allocator.page_size = page_size
        params = self.m.cip.CacheInitParams(
            disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=self.allocator,
            page_size=page_size, eviction_policy=policy, tree_components=(self.m.FULL,),
            tree_core_backend="python")
        self.cache = self.m.urc.UnifiedRadixCache(params)
        self.core = self.cache.tree_core
        self.next_slot = 0
        self.receipts: dict[int, list] = {}

    def key(self, tokens):
        return self.m.rc.RadixKey(token_ids=array("q", tokens))

    def match_prefix(self, tokens):
        result = self.cache.match_prefix(self.m.bpc.MatchPrefixParams(key=self.key(tokens)))
        return result.device_prefix_len, result.last_device_node

    def insert(self, tokens, priority: int = 0, inserted_len: int = 0):
        values = slots(range(self.next_slot, self.next_slot + len(tokens)))
        self.next_slot += len(tokens)
        result = self.cache.insert(self.m.bpc.InsertParams(
            key=self.key(tokens), value=values, priority=priority, inserted_len=inserted_len))
        return result.prefix_len, result.last_device_node

    def inc_lock_ref(self, node) -> int:
        """The change of the evictable size, RadixCache's sign (the unified core reports
        the protected gain, None for the root; no scheduler code reads either)."""
        result = self.cache.inc_lock_ref(node)
        self.receipts.setdefault(node, []).append(result.to_dec_params())
        return -(result.delta or 0)

    def dec_lock_ref(self, node) -> None:
        """Release one lock (the unified core reports no delta for it)."""
        self.cache.dec_lock_ref(node, self.receipts[node].pop())

    def evict(self, num_tokens: int) -> int:
        before = self.allocator.freed
        evicted = self.cache.evict(
            self.m.bpc.EvictParams(num_tokens=num_tokens)).num_tokens_evicted
        assert self.allocator.freed - before == evicted
        return evicted

    @property
    def evictable_size(self) -> int:
        return self.cache.evictable_size()

    @property
    def protected_size(self) -> int:
        return self.cache.protected_size()

    def total_size(self) -> int:
        return self.cache.total_size()[0]

    def node_rows(self, row) -> list:
        """``row(path tokens, node)`` of every node but the root, sorted."""
        rows, stack = [], [((), self.core.root_node)]
        while stack:
            prefix, node = stack.pop()
            path = prefix + (tuple(node.key.token_ids) if node.key is not None else ())
            rows.append(row(path, node))
            stack.extend((path, child) for child in node.children.values())
        return sorted(rows)[1:]

    def rows(self) -> list:
        """Every node but the root as (path tokens, lock_ref, hits, priority), sorted."""
        full = self.m.FULL
        return self.node_rows(lambda path, node: (
            path, node.component_data[full].lock_ref, node.hit_count, node.priority))


def observe(tree, rows, capacity: int, operations) -> list:
    """What ``operations`` (test_sglang_radix.py's: insert, match, unlock, evict) show on
    ``tree``: each result, then the sizes and ``rows(tree)`` after each operation, the pool
    kept to ``capacity`` by evicting the overflow after an insert."""
    seen, held = [], []
    for step in list(operations) + [("drain",)]:
        kind = step[0]
        if kind == "insert":
            _, tokens, priority, inserted, lock = step
            length, node = tree.insert(tokens, priority, inserted)
            seen.append(length)
            if lock:
                seen.append(tree.inc_lock_ref(node))
                held.append(node)
            if tree.total_size() > capacity:
                seen.append(tree.evict(tree.total_size() - capacity))
        elif kind == "match":
            _, tokens, lock = step
            length, node = tree.match_prefix(tokens)
            seen.append(length)
            if lock:
                seen.append(tree.inc_lock_ref(node))
                held.append(node)
        elif kind == "unlock" and held:
            tree.dec_lock_ref(held.pop(step[1] % len(held)))
        elif kind == "evict":
            seen.append(tree.evict(step[1]))
        elif kind == "drain":
            for node in held:
                tree.dec_lock_ref(node)
            seen.append(tree.evict(10 ** 6))
        seen.append((step, tree.evictable_size, tree.protected_size, tree.total_size(),
                     rows(tree)))
    return seen


def replay(page_size: int, policy: str, capacity: int, operations) -> list:
    """``observe`` on SGLang's unified cache (run it in a process of its own: the torch
    stand-in and the package's bare imports must not meet other loaders of SGLang)."""
    return observe(UnifiedTree(page_size, policy), UnifiedTree.rows, capacity, operations)


def split_creation_case(tree) -> list:
    """[1,2,3,4], [9,9], then [1,2,5] (splitting off [1,2]); [9,9] locked while 3 tokens
    are evicted ([3,4], [5]: [1,2] is a leaf now), unlocked, then 1 more: which paths stay.
    RadixCache gives the split-off [1,2] a fresh creation time (newer than [9,9]), the
    unified core the one of the node it was cut from (older), so fifo and filo differ."""
    tree.insert([1, 2, 3, 4])
    _, held = tree.insert([9, 9])
    tree.insert([1, 2, 5])
    tree.inc_lock_ref(held)
    tree.evict(3)
    tree.dec_lock_ref(held)
    tree.evict(1)
    return [tokens for tokens in ([1, 2], [9, 9]) if tree.match_prefix(tokens)[0] == 2]


def unified_split_creation_case(policy: str) -> list:
    return split_creation_case(UnifiedTree(1, policy))
