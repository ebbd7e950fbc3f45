"""Cross-check the ``lmcache`` CPU model against LMCache's own CPU backend (optional, not CI).

Downloads the lmcache wheel of ``--version`` with pip (``--no-deps``, about 18 MB, once, into
``--cache``), extracts its Python files, imports
``lmcache.v1.storage_backend.local_cpu_backend.LocalCPUBackend`` with torch and the compiled
parts stubbed (the stub machinery of ``scripts/stub_importer.py``) and a token-counting
memory allocator, and drives it like the vLLM v1 connector does at concurrency 1: lookup =
``contains(key, pin=True)`` over the leading chunks then ``touch_cache()``; the pins are
released (``unpin``) before the store, as ``wait_for_save`` calls ``lookup_unpin`` first; the
store applies the connector's skip rule (``ReqMeta.from_request_tracker``), allocates every
chunk (``allocate``: LMCache's own evict-one-at-a-time loop, no busy loop) and puts them with
``batched_submit_put_task``, then releases the store's references (``ref_count_down``, as
``LMCacheEngine.store`` relies on ``batched_put`` to do). The backend's LRU, touch order,
eviction and skip-if-present are LMCache's code; the connector's store range is this
script's reading of it (cited in ``pipeline/components/ktier.py``). Compares every request's hit
with the literal port (the test oracle ``tests/oracles/lmcache_cpu.py``) and with the compiled
model (``pipeline.components.lmcache.lmcache_hits``) on the lab's workload and on random
shared-prefix workloads; prints JSON, exit status 1 on any mismatch.

    .venv/bin/python scripts/lmcache_reference.py --version 0.5.6
    .venv/bin/python scripts/lmcache_reference.py --random 0 --stack 300

``--stack N``: N random chunk streams through LMCache's own tier stack (its StorageManager
over its CPU, disk and remote backends: ``scripts/lmcache_stack_reference.py``), the literal
port ``tests/oracles/lmcache_stack.py`` and the compiled ``pipeline.components.kstack``:
per request the chunks hit per tier, and every tier's keys in order after each call, with
the CPU and disk tiers' cache_policy LRU, FIFO, MRU or LFU (every policy of LMCache's
``cache_policy/__init__.py``).

Seen 2026-11-30 with 0.5.6: LMCache's hits per pass on the lab workload (10 x 5011, fwd,
fwd, rev) are 0 / 48,640 / 48,640 tokens at 48,640 and 56,000, 0 / 0 / 43,776 at 48,384 and
0 / 0 / 38,912 at 40,000, and every request equals the model on 300 random workloads.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stub_importer import Importer, wheel_sources  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def lmcache_sources(version: str, cache: Path) -> Path:
    """The Python files of the lmcache ``version`` wheel, downloaded and extracted once."""
    return wheel_sources("lmcache", version, cache,
                         "lmcache/v1/storage_backend/local_cpu_backend.py")


def load_backend(source: Path):
    """LMCache's LocalCPUBackend class, imported with stubs."""
    logger_module = types.ModuleType("lmcache.logging")
    logger_module.init_logger = logging.getLogger
    nvtx = types.ModuleType("nvtx")
    nvtx.annotate = lambda *args, **kwargs: (lambda function: function)
    sys.modules.update({"lmcache.logging": logger_module, "nvtx": nvtx})
    sys.meta_path.insert(0, Importer(source, "lmcache", ()))
    import importlib.util
    name = "lmcache.v1.storage_backend.cache_policy"   # run this package's __init__:
    folder = source.joinpath(*name.split("."))          # get_cache_policy lives there
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)])
    policies = importlib.util.module_from_spec(spec)
    sys.modules[name] = policies
    spec.loader.exec_module(policies)
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
    return LocalCPUBackend


class Config:
    """The LMCacheEngineConfig fields the backend reads (defaults: LRU, local CPU on)."""

    cache_policy = "LRU"
    local_cpu = True
    lmcache_instance_id = "reference"
    use_layerwise = False
    enable_blending = False

    def __getattr__(self, name):
        return None

    def get_extra_config_value(self, key, default=None):
        return default


class Allocator:
    """A memory allocator that counts tokens: an allocation fits or returns None."""

    def __init__(self, capacity: int, objects: type | None = None) -> None:
        self.capacity, self.used = capacity, 0
        self.objects = objects or MemoryObj

    def allocate(self, shapes, dtypes, fmt=None, *args, **kwargs):
        tokens = int(shapes)
        if self.used + tokens > self.capacity:
            return None
        self.used += tokens
        return self.objects(self, tokens)


class MemoryObj:
    """Pins and references as LMCache's MemoryObj keeps them (freed at reference 0)."""

    def __init__(self, allocator: Allocator, tokens: int) -> None:
        self.allocator, self.tokens, self.pins, self.refs = allocator, tokens, 0, 1

    def pin(self):
        self.pins += 1

    def unpin(self):
        self.pins -= 1

    @property
    def is_pinned(self):
        return self.pins > 0

    def ref_count_up(self):
        self.refs += 1

    def ref_count_down(self):
        self.refs -= 1
        if self.refs == 0:
            self.allocator.used -= self.tokens

    def get_ref_count(self):
        return self.refs

    @property
    def can_evict(self):
        return not self.is_pinned and self.refs == 1

    def get_size(self):
        return self.tokens


def lmcache_hits(backend_class, requests, capacity: int, chunk_size: int) -> list[int]:
    """Each request's LMCache hit tokens, driving LMCache's LocalCPUBackend."""
    backend = backend_class(Config(), metadata=None, dst_device="cpu",
                            memory_allocator=Allocator(capacity))
    hits = []
    for keys, tokens, prompt in requests:
        hit = 0
        while hit < len(keys) and backend.contains(keys[hit], pin=True):
            hit += 1
        backend.touch_cache()
        hit_tokens = sum(tokens[:hit])
        hits.append(hit_tokens)
        for key in keys[:hit]:                          # wait_for_save: lookup_unpin first
            backend.unpin(key)
        boundary = -(-(hit_tokens + 1) // chunk_size) * chunk_size
        if hit_tokens > 0 and prompt < boundary:
            continue
        first = hit_tokens // chunk_size
        stored_keys, objects = [], []
        for key, size in zip(keys[first:], tokens[first:]):
            obj = backend.allocate(size, None, busy_loop=False)
            if obj is None:
                break
            stored_keys.append(key)
            objects.append(obj)
        backend.batched_submit_put_task(stored_keys, objects)
        for obj in objects:
            obj.ref_count_down()
    return hits


def stack_case(rng: random.Random) -> tuple:
    """A random chunk stream: (chunk, (cpu, disk, remote) tokens, requests of (keys, prompt
    tokens, GPU hit tokens), the CPU and disk tiers' cache_policy) over a small trie of
    shared prefixes."""
    block = rng.randint(1, 2)
    chunk = block * rng.randint(1, 2)
    tiers = (rng.randint(1, 6) * chunk + rng.randint(0, chunk - 1),
             rng.choice([0, rng.randint(1, 8) * chunk]), rng.choice([0, rng.randint(1, 10) * chunk]))
    requests = []
    for _ in range(rng.randint(1, 25)):
        path = [rng.randint(0, 2) for _ in range(rng.randint(0, 7))]
        keys = [str(path[:i + 1]) for i in range(len(path))]
        prompt = max(len(keys) * chunk + rng.randint(0, chunk - 1), 1)
        gpu = min(rng.randint(0, prompt // block) * block, prompt - 1)
        requests.append((keys, prompt, gpu))
    return chunk, tiers, requests, rng.choice(["lru", "fifo", "mru", "lfu"])


def compare_stack(backend_class, cases: int, rng: random.Random) -> dict:
    """LMCache's stack vs the oracle vs the compiled stack on ``cases`` random streams."""
    import asyncio
    import threading

    from lmcache_stack_reference import LMCacheStackDriver, WouldWait
    from oracles.lmcache_stack import StackOracle
    from pipeline.components.lmcache_stack import LMCacheStack, Tier
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    out = {"cases": 0, "requests": 0, "disk_hits": 0, "remote_hits": 0,
           "skipped_would_wait": 0, "mismatches": []}
    for case in range(cases):
        chunk, (cpu, disk, remote), requests, policy = stack_case(rng)
        theirs = LMCacheStackDriver(backend_class, cpu, disk, remote, chunk, loop,
                                    policy.upper())
        oracle = StackOracle(cpu, disk, remote, chunk, policy)
        tiers = [Tier("cpu", cpu)] + [Tier(k, c, 1.0, 0.0) for k, c in
                                      (("disk", disk), ("remote", remote)) if c]
        compiled = LMCacheStack(tiers, chunk, 1.0, chunk, policy=policy)
        try:
            for r, (keys, prompt, gpu) in enumerate(requests):
                split, mapping = theirs.lookup(keys)
                calls = [("lookup", split, oracle.lookup(keys), compiled.lookup(keys))]
                theirs.retrieve(keys, split, mapping, gpu, prompt)
                oracle.retrieve(keys, split, gpu, prompt)
                oracle.unpin(keys, split)
                compiled.retrieve(keys, split, gpu, prompt)
                calls.append(("retrieve", None, None, None))
                for name, ours in (("oracle", oracle.state()), ("compiled", compiled.state())):
                    if theirs.state() != ours:
                        calls.append((f"{name} state after retrieve", theirs.state(), ours,
                                      ours))
                hit = sum(split) * chunk
                theirs.store(keys, prompt, hit)
                oracle.store(keys, prompt, hit)
                compiled.store(keys, prompt, hit)
                for name, ours in (("oracle", oracle.state()), ("compiled", compiled.state())):
                    if theirs.state() != ours:
                        calls.append((f"{name} state after store", theirs.state(), ours, ours))
                bad = [c for c in calls if not (c[1] == c[2] == c[3])]
                if bad:
                    out["mismatches"].append({"stack_case": case, "request": r,
                                              "calls": repr(bad)[:2000]})
                    break
                out["requests"] += 1
                out["disk_hits"] += split[1] > 0
                out["remote_hits"] += split[2] > 0
        except WouldWait:
            out["skipped_would_wait"] += 1
            continue
        out["cases"] += 1
    loop.call_soon_threadsafe(loop.stop)
    return out


def main() -> int:
    from pipeline.workloads.stream import block_stream
    from oracles.lmcache_cpu import replay_lmcache
    from pipeline.components.lmcache import lmcache_chunks
    from pipeline.components.lmcache import lmcache_hits as compiled_hits
    from pipeline.workloads.blocks import document_blocks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.5.6")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvlab")
    parser.add_argument("--random", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--stack", type=int, default=0, metavar="N",
                        help="N random streams through the tier stack (default 0)")
    args = parser.parse_args()
    from lmcache_stack_reference import install_torch_stub
    install_torch_stub()
    backend_class = load_backend(lmcache_sources(args.version, args.cache))

    def compare(stream, chunk_size, unfull, capacity, label):
        chunks = lmcache_chunks(stream, chunk_size, unfull)
        requests = []
        for r in range(stream.requests):
            span = slice(int(chunks.starts[r]), int(chunks.starts[r + 1]))
            requests.append((chunks.codes[span].tolist(), chunks.tokens[span].tolist(),
                             int(chunks.prompt_tokens[r])))
        theirs = lmcache_hits(backend_class, requests, capacity, chunk_size)
        ours = replay_lmcache(chunks, capacity).tolist()
        compiled = compiled_hits(chunks, [capacity])[0].tolist()
        return theirs, ([] if theirs == ours == compiled else [
            {"case": label, "lmcache": theirs, "oracle": ours, "model": compiled}])

    report = {"version": args.version, "lab": {}, "mismatches": []}
    order = [d for _ in range(2) for d in range(10)] + list(range(9, -1, -1))
    lab = block_stream(document_blocks(order, 5011, 16), 16)
    for capacity in (40000, 48384, 48640, 56000):
        theirs, bad = compare(lab, 256, False, capacity, f"lab@{capacity}")
        report["lab"][str(capacity)] = [sum(theirs[p * 10:(p + 1) * 10]) for p in range(3)]
        report["mismatches"] += bad
    rng = random.Random(args.seed)
    import polars as pl

    from pipeline.workloads.blocks import BLOCK_SCHEMA
    for case in range(args.random):
        block_size = rng.randint(1, 3)
        chunk_size = block_size * rng.randint(1, 3)
        keys: dict[tuple, int] = {}
        rows = []
        for request in range(rng.randint(1, 12)):
            path = [rng.randint(0, 1) for _ in range(rng.randint(1, 9))]
            partial = rng.randint(0, block_size - 1)
            for index in range(len(path)):
                tokens = partial if index == len(path) - 1 and partial else block_size
                key = keys.setdefault((tuple(path[:index + 1]), tokens), len(keys))
                rows.append((request, index, key, tokens))
        stream = block_stream(pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"),
                              block_size)
        capacity = rng.randint(0, 12) * chunk_size + rng.randint(0, chunk_size)
        report["mismatches"] += compare(stream, chunk_size, rng.random() < 0.5, capacity,
                                        case)[1]
    report["random_cases"] = args.random
    if args.stack:
        report["stack"] = compare_stack(backend_class, args.stack, rng)
        report["mismatches"] += report["stack"].pop("mismatches")
    print(json.dumps(report, indent=2))
    return 1 if report["mismatches"] else 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    sys.exit(main())
