"""LMCache's own tier stack driven on CPU: its ``StorageManager`` over its ``LocalCPUBackend``,
``LocalDiskBackend`` and ``RemoteBackend`` with the ``MockConnector``'s store (``AsyncLRU``),
as LMCache's vLLM v1 connector drives them at concurrency 1; used by
``scripts/lmcache_reference.py --stack``.

The StorageManager's and the backends' methods are LMCache's code, unmodified; stubbed
around them: torch (``inference_mode`` an identity decorator), the token-counting memory
allocator of ``lmcache_reference``, file reads and writes (no-ops: only the bookkeeping is
compared), the disk worker (a write runs at once: the model's "writes complete at once"),
the MockConnector's I/O pressure (none) and the objects' constructors (attributes set as
``__init__`` sets them, minus threads, files and metrics). The remote store runs on a real
asyncio loop in a thread, as LMCache's does. The connector's calls per request, read from
``cache_engine.py`` and ``integration/vllm/vllm_v1_adapter.py``: ``lookup`` =
``batched_contains(pin=True)`` + ``touch_cache``; when vLLM loads anything (c - g > 0),
``retrieve`` = the block mapping (the lookup's one location, else ``get_block_mapping``) and
``batched_get`` per location from chunk ``g // chunk``, references dropped after; then
``lookup_unpin``; ``store`` = ``allocate`` (no busy loop) from LMCache's hit and
``batched_put``. A retrieval that would make LMCache wait for CPU memory forever (its busy
loop) raises ``WouldWait`` and the case is skipped (counted).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import types
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import stub_importer
from lmcache_reference import Allocator, Config, MemoryObj

__all__ = ["WouldWait", "LMCacheStackDriver", "install_torch_stub"]


class WouldWait(Exception):
    """LMCache would busy-loop here (no CPU memory to allocate, nothing evictable)."""


def install_torch_stub() -> None:
    """A torch stub whose ``inference_mode()`` / ``no_grad()`` leave functions as they are."""
    if "torch" not in sys.modules:
        torch = stub_importer._StubModule("torch")
        torch.__path__ = []
        torch.inference_mode = torch.no_grad = lambda *args, **kwargs: (lambda f: f)
        sys.modules["torch"] = torch


class Key:
    """A CacheEngineKey stand-in: a hashable chunk hash with ``to_string``."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other) -> bool:
        return isinstance(other, Key) and other.value == self.value

    def to_string(self) -> str:
        return f"chunk{self.value}"

    @property
    def chunk_hash(self):
        return self.value


class StoredObj(MemoryObj):
    """``lmcache_reference.MemoryObj`` with what the disk and remote backends read."""

    def __init__(self, allocator: Allocator, tokens: int) -> None:
        super().__init__(allocator, tokens)
        self.tensor, self.byte_array = object(), b""
        self.metadata = types.SimpleNamespace(shape=tokens, dtype="bfloat16", fmt=None,
                                              cached_positions=None)

    def get_physical_size(self):
        return self.tokens


class _Anything:
    """Metrics and message senders: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class _SyncDiskWorker:
    def submit_task(self, name, function, **kwargs):
        function(**kwargs)                               # the write completes at once

    def try_insert_put_task(self, key):
        return True

    def remove_put_task(self, key):
        pass

    def exists_in_put_tasks(self, key):
        return False


class _NoPressure:
    async def on_exists(self):
        pass

    async def on_put(self, obj):
        pass

    async def on_get(self, obj):
        pass

    async def on_batched_get(self, objs):
        pass


class _Identity:
    def serialize(self, obj):
        return obj

    def deserialize(self, obj):
        return obj


def _classes():
    """LMCache's classes (imported once, through ``lmcache_reference.load_backend``)."""
    from importlib import import_module                 # (``from package import module``
    utils = import_module("lmcache.utils")               # finds a stub: packages are bare)
    utils._lmcache_nvtx_annotate = lambda func, domain="lmcache": func
    cpu_module = import_module("lmcache.v1.storage_backend.local_cpu_backend")
    disk_module = import_module("lmcache.v1.storage_backend.local_disk_backend")
    get_cache_policy = import_module("lmcache.v1.storage_backend.cache_policy").get_cache_policy
    mock_connector = import_module("lmcache.v1.storage_backend.connector.mock_connector")
    RemoteBackend = import_module("lmcache.v1.storage_backend.remote_backend").RemoteBackend
    StorageManager = import_module("lmcache.v1.storage_backend.storage_manager").StorageManager

    def would_wait(seconds):
        raise WouldWait()
    cpu_module.time = types.SimpleNamespace(sleep=would_wait, time=lambda: 0.0,
                                            perf_counter=lambda: 0.0)
    disk_module.asyncio = types.SimpleNamespace(run_coroutine_threadsafe=lambda c, loop: None)
    disk_module.os = types.SimpleNamespace(path=os.path, remove=lambda path: None)
    mock_connector.MockMemoryObj.from_tensor_memory_obj = staticmethod(
        lambda obj: mock_connector.MockMemoryObj(metadata=obj.metadata, num_bytes=obj.tokens))
    return (StorageManager, disk_module.LocalDiskBackend, RemoteBackend, mock_connector,
            get_cache_policy)


class LMCacheStackDriver:
    """LMCache's StorageManager over a CPU backend of ``cpu`` tokens, a disk of ``disk`` and
    a remote store of ``remote`` tokens (0: none), chunks of ``chunk`` tokens, the CPU and
    disk tiers' ``cache_policy`` ``policy`` (LRU, FIFO, MRU, LFU)."""

    def __init__(self, cpu_class, cpu: int, disk: int, remote: int, chunk: int,
                 loop: asyncio.AbstractEventLoop, policy: str = "LRU") -> None:
        StorageManager, Disk, Remote, mock, get_cache_policy = _classes()
        self.chunk = chunk
        config = Config()
        config.cache_policy = policy                     # the CPU and disk tiers'
        self.cpu = cpu_class(config, metadata=None, dst_device="cpu",
                             memory_allocator=Allocator(cpu, StoredObj))
        backends = OrderedDict([("LocalCPUBackend", self.cpu)])
        self.disk = self.remote_lru = None
        if disk:
            d = object.__new__(Disk)
            d.cache_policy = get_cache_policy(policy)
            d.dict = d.cache_policy.init_mutable_mapping()
            d.dst_device, d.local_cpu_backend, d.disk_lock = "cpu", self.cpu, threading.Lock()
            d.path, d.loop, d.use_local_cpu, d.os_disk_bs, d.use_odirect = \
                "/nonexistent", loop, True, 4096, False
            d.disk_worker, d._read_thread_pool = _SyncDiskWorker(), ThreadPoolExecutor(2)
            d.max_cache_size, d.current_cache_size, d.keys_in_request = disk, 0.0, []
            d.lmcache_worker, d.instance_id, d.stats_monitor = None, "reference", _Anything()
            d.usage, d.batched_msg_sender = 0, None
            d.write_file = lambda buffer, path: None
            d.read_file = lambda key, buffer, path: None
            backends["LocalDiskBackend"] = self.disk = d
        if remote:
            connector = object.__new__(mock.MockConnector)
            connector.lru_store = mock.AsyncLRU(0)
            connector.lru_store.capacity = remote
            connector.pressure_manager, connector.local_cpu_backend = _NoPressure(), self.cpu
            connector.loop = loop
            connector.exists, connector.put = connector._exists, connector._put
            connector.batched_get = connector._batched_get
            r = object.__new__(Remote)
            r.put_tasks, r.lock, r.local_cpu_backend, r.loop = set(), threading.Lock(), \
                self.cpu, loop
            r.config, r.connection, r._mla_worker_id_as0_mode = Config(), connector, False
            r.serializer = r.deserializer = _Identity()
            r.stats_monitor, r._get_blocking_failed_count = _Anything(), 0
            backends["RemoteBackend"], self.remote_lru = r, connector.lru_store
        self.loop = loop
        sm = object.__new__(StorageManager)
        sm.storage_backends, sm.allocator_backend, sm.local_cpu_backend = backends, self.cpu, \
            self.cpu
        sm._freeze, sm._freeze_lock = False, threading.RLock()
        sm._bypassed_backends, sm._bypass_lock = set(), threading.RLock()
        sm.internal_copy_stream, sm.manager_lock = None, threading.Lock()
        self.manager = sm

    def _settle(self) -> None:
        """Wait for the remote store's puts scheduled so far (each runs in one step)."""
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop).result()

    def lookup(self, values) -> tuple[tuple[int, int, int], dict]:
        keys = [Key(v) for v in values]
        _, mapping = self.manager.batched_contains(keys, None, True)
        self.manager.touch_cache()
        split = tuple(len(mapping.get(name, ())) for name in
                      ("LocalCPUBackend", "LocalDiskBackend", "RemoteBackend"))
        return split, mapping

    def retrieve(self, values, split, mapping: dict, gpu: int, prompt: int) -> None:
        """The worker's retrieve (when vLLM loads anything), then lookup_unpin."""
        keys = [Key(v) for v in values]
        hit = sum(split)
        tokens = hit * self.chunk
        try:
            if tokens - gpu - (tokens == prompt) > 0:
                infos = [(keys[j], j * self.chunk, (j + 1) * self.chunk)
                         for j in range(gpu // self.chunk, hit)]
                blocks = ({next(iter(mapping)): infos} if len(mapping) == 1
                          else self.manager.get_block_mapping(infos))
                held = []
                for location, chunk_infos in blocks.items():
                    objs = self.manager.batched_get(keys=[k for k, _, _ in chunk_infos],
                                                    location=location)
                    held += [obj for obj in objs if obj is not None]
                    if None in objs:
                        raise WouldWait()
                for obj in held:
                    obj.ref_count_down()
        finally:
            for location, located in mapping.items():
                self.manager.batched_unpin(located, [location])

    def store(self, values, prompt: int, hit_tokens: int) -> None:
        keys = [Key(v) for v in values]
        chunk = self.chunk
        if hit_tokens > 0 and prompt < -(-(hit_tokens + 1) // chunk) * chunk:
            return
        stored, objs = [], []
        for key in keys[hit_tokens // chunk:]:
            obj = self.manager.allocate(chunk, None, busy_loop=False)
            if obj is None:
                break
            stored.append(key)
            objs.append(obj)
        if objs:
            self.manager.batched_put(stored, objs)
        self._settle()

    @staticmethod
    def _order(backend, mapping) -> list:
        """A tier's keys in its policy's order: the mapping's (LRU, FIFO, MRU), or LFU's
        eviction order (its buckets by frequency, each in arrival order)."""
        buckets = getattr(backend.cache_policy, "freq_to_keys", None)
        keys = mapping if buckets is None else [k for bucket in buckets.values()
                                                for k in bucket]
        assert buckets is None or sorted(repr(k.value) for k in keys) == sorted(
            repr(k.value) for k in mapping)             # the policy knows the tier's keys
        return [k.value for k in keys]

    def state(self) -> dict[str, list]:
        self._settle()
        return {"cpu": self._order(self.cpu, self.cpu.hot_cache),
                "disk": self._order(self.disk, self.disk.dict) if self.disk else [],
                "remote": [k.value for k in self.remote_lru.dict] if self.remote_lru else []}
