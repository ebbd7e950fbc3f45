"""Drive vLLM 0.33.0's own native offloading manager (``CPUOffloadingManager`` with its
``lru`` and ``arc`` policies, vllm/v1/kv_offload/cpu/) unmodified on CPU, and compare it
call by call with ``pipeline.components.vllm_offload.NativeOffload``.

vLLM's files are imported from the extracted wheel (scripts/ensure_vllm_sources.sh) through
``stub_importer`` (torch and the metrics' dependencies stubbed; the manager uses neither).
``RealOffload`` has ``NativeOffload``'s calls: integer keys become vLLM ``OffloadKey``s
(group 0), a request becomes a ``ReqContext`` with each chunk's end-token position, as the
connector's scheduler records them (``RequestOffloadState.update_offload_keys``).

    .venv/bin/python scripts/vllm_offload_reference.py --random 300

Prints JSON (cases, operations, mismatches); exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from stub_importer import install_importer  # noqa: E402

DEFAULT_VERSION = "0.33.0"


def source_dir(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path:
    return (cache or Path.home() / ".cache" / "kvlab") / f"vllm-{version}"


def have_sources(version: str = DEFAULT_VERSION, cache: Path | None = None) -> bool:
    return (source_dir(version, cache) / "vllm" / "v1" / "kv_offload" / "cpu"
            / "manager.py").is_file()


def load(version: str = DEFAULT_VERSION, cache: Path | None = None):
    """vLLM's CPUOffloadingManager module and its base module (ReqContext, keys)."""
    install_importer(source_dir(version, cache))
    import importlib
    return (importlib.import_module("vllm.v1.kv_offload.cpu.manager"),
            importlib.import_module("vllm.v1.kv_offload.base"))


class RealRequest:
    """A request's ReqContext and its chunk keys (vLLM's bytes keys, prefix order)."""

    def __init__(self, base, name: str, keys: list[int], offload_keys: list[bytes],
                 tokens_per_chunk: int) -> None:
        self.keys, self.offload_keys = list(keys), offload_keys
        self.context = base.ReqContext(req_id=name)
        for index, key in enumerate(offload_keys):
            self.context.set_offload_key_position(key, (index + 1) * tokens_per_chunk)


class RealOffload:
    """vLLM's own ``CPUOffloadingManager`` behind ``NativeOffload``'s calls."""

    def __init__(self, num_chunks: int, policy: str = "lru", store_threshold: int = 0,
                 max_tracker_size: int = 64_000, tokens_per_chunk: int = 16) -> None:
        self.manager_module, self.base = load()
        self.manager = self.manager_module.CPUOffloadingManager(
            num_chunks=num_chunks, cache_policy=policy, store_threshold=store_threshold,
            max_tracker_size=max_tracker_size)
        self.policy, self.tokens_per_chunk, self._names = policy, tokens_per_chunk, 0
        self._key_of: dict[bytes, int] = {}

    def key(self, key: int) -> bytes:
        offload_key = self.base.make_offload_key(key.to_bytes(8, "big"), 0)
        self._key_of[offload_key] = key
        return offload_key

    def new_request(self, keys: list[int]) -> RealRequest:
        self._names += 1
        request = RealRequest(self.base, f"r{self._names}", keys,
                              [self.key(k) for k in keys], self.tokens_per_chunk)
        self.manager.on_new_request(request.context)
        return request

    def lookup(self, key: int) -> int:
        result = self.manager.lookup(self.key(key), None)
        return {"MISS": 0, "HIT": 1, "HIT_PENDING": 2}[result.name]

    def prepare_load(self, request: RealRequest, chunks) -> None:
        self.manager.prepare_load([request.offload_keys[i] for i in chunks], request.context)

    def complete_load(self, keys) -> None:
        self.manager.complete_load([self.key(k) for k in keys], None)

    def touch(self, keys) -> None:
        self.manager.touch([self.key(k) for k in keys], None)

    def prepare_store(self, request: RealRequest, chunks):
        output = self.manager.prepare_store([request.offload_keys[i] for i in chunks],
                                            request.context)
        if output is None:
            return None
        return ([self._key_of[k] for k in output.keys_to_store],
                [self._key_of[k] for k in output.evicted_keys])

    def complete_store(self, keys, success: bool = True) -> None:
        self.manager.complete_store([self.key(k) for k in keys], None, success)

    def request_finished(self, request: RealRequest) -> None:
        self.manager.on_request_finished(request.context)

    def reset(self) -> None:
        self.manager.reset_cache()

    def snapshot(self) -> dict:
        """The manager's and its policy's state, in ``NativeOffload.snapshot``'s terms."""
        m, policy, name = self.manager, self.manager._policy, self._key_of.__getitem__
        if self.policy == "lru":
            resident = policy.chunks
        else:
            resident = {**policy.t1, **policy.t2}
        state = {"chunks": {name(k): (c.ref_cnt, c.chunk_id) for k, c in resident.items()},
                 "allocated": m._num_allocated_chunks, "free": list(m._free_list),
                 "evictable": m._num_evictable_cache_chunks,
                 "pending": m._num_write_pending_chunks,
                 "tracker": [(name(k), n) for k, n in (m.counts or {}).items()],
                 "skipped": m.stores_skipped_in_current_batch}
        if self.policy == "lru":
            state["ranks"] = {name(k): rank for k, rank in policy._ranks.items()}
            state["lru_evictable"] = sorted(name(k) for k in policy._evictable)
            state["next_rank"] = policy._next_rank
        else:
            state["t1"], state["t2"] = [name(k) for k in policy.t1], [name(k) for k in policy.t2]
            state["b1"], state["b2"] = [name(k) for k in policy.b1], [name(k) for k in policy.b2]
            state["target_t1_size"] = float(policy.target_t1_size)
        return state


# --------------------------------------------------------------------------- random runs

#: How often each call is drawn: stores and their completions dominate, so tiny caches
#: fill, evict and refuse; resets are rare.
WEIGHTS = {"new": 10, "store": 30, "complete_store": 25, "load": 8, "complete_load": 8,
           "touch": 5, "finish": 8, "lookup": 3, "reset": 1}


#: A mix for reuse: loads, their completions and finished requests promote ARC's chunks.
REUSE_WEIGHTS = {"new": 10, "store": 25, "complete_store": 20, "load": 15,
                 "complete_load": 15, "touch": 15, "finish": 15, "lookup": 2, "reset": 0}


def random_operations(rng: random.Random, steps: int = 40,
                      weights: dict[str, int] = WEIGHTS) -> list[tuple]:
    """A random sequence of calls as the connector could make them: requests are paths of
    a small key trie (shared prefixes), stores of chunk ranges, completions (some failed),
    loads of stored prefixes, touches, finished requests, rare resets."""
    names, counts = list(weights), list(weights.values())
    return [(rng.choices(names, counts)[0], rng.random(), rng.random(), rng.random(),
             rng.random()) for _ in range(steps)]


def run_operations(manager, ops: list[tuple], trie_width: int = 3, depth: int = 6):
    """Apply ``ops`` (each: a name and four uniform numbers that pick its arguments) and
    yield (operation, result, snapshot) after each call; identical on both managers.

    As the connector's scheduler does: a request offers its chunks for storing in order from
    a cursor (``next_stored_chunk_idx``: advanced unless vLLM refused, restarted at 0 now and
    then as after a preemption); a load takes the run of HITs from a GPU hit on (nothing
    while one of them is HIT_PENDING: the lookup is deferred) and moves the cursor past it.
    """
    requests, pending_stores, pending_loads = [], [], []
    for name, a, b, c, d in ops:
        result = "-"                                    # no call made
        if name == "new" or not requests:
            length = 1 + int(a * depth)
            path = [int(b * 97 + j * 7) % trie_width for j in range(length)]
            keys = [hash_path(path[:j + 1]) for j in range(length)]
            requests.append([manager.new_request(keys), False, 0])
            result = keys
        else:
            entry = requests[int(a * len(requests))]
            request, finished, cursor = entry
            count = len(request.keys)
            if name == "store" and not finished:
                if cursor == count or d < 0.05:
                    cursor = 0
                chunks = list(range(cursor, min(cursor + 1 + int(c * 3), count)))
                result = manager.prepare_store(request, chunks)
                if result is not None:
                    entry[2] = chunks[-1] + 1
                    if result[0] and b < 0.5:           # the transfer ends within the step
                        manager.complete_store(result[0], success=b > 0.03)
                    elif result[0]:
                        pending_stores.append(result[0])
            elif name == "complete_store" and pending_stores:
                keys = pending_stores.pop(int(b * len(pending_stores)))
                manager.complete_store(keys, success=c > 0.1)
            elif name == "load" and not finished:
                start = int(b * count)
                run = [manager.lookup(k) for k in request.keys[start:]]
                run = run[:run.index(0)] if 0 in run else run
                if run and 2 not in run:
                    hits = list(range(start, start + len(run)))
                    manager.prepare_load(request, hits)
                    pending_loads.append([request.keys[i] for i in hits])
                    entry[2] = max(cursor, hits[-1] + 1)
                    result = hits
            elif name == "complete_load" and pending_loads:
                manager.complete_load(pending_loads.pop(int(b * len(pending_loads))))
            elif name == "touch":
                start = int(b * count)
                manager.touch(request.keys[start:start + 1 + int(c * count)])
            elif name == "finish" and not finished:
                manager.request_finished(request)
                entry[1] = True
            elif name == "lookup":
                result = [manager.lookup(k) for k in request.keys]
            elif name == "reset":
                manager.reset()                     # no completion reaches it after
                pending_stores.clear()
                pending_loads.clear()
        yield name, result, manager.snapshot()


def hash_path(path: list[int]) -> int:
    """A key per trie path: equal paths, equal keys (a chained block hash in miniature)."""
    value = 0
    for step in path:
        value = value * 4 + step + 1
    return value


def compare(config: dict, ops: list[tuple]) -> str | None:
    """None when vLLM's manager and NativeOffload agree after every call, else the first
    difference."""
    from pipeline.components.vllm_offload import NativeOffload
    real, model = RealOffload(**config), NativeOffload(**config)
    for number, (left, right) in enumerate(zip(run_operations(real, ops),
                                               run_operations(model, ops))):
        if left != right:
            return f"call {number} ({left[0]}): vLLM {left[1:]} != model {right[1:]}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=200, help="random cases to run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng, mismatches, calls = random.Random(args.seed), [], 0
    for case in range(args.random):
        config = {"num_chunks": rng.choice([0, 1, 2, 3, 4, 6, 10]),
                  "policy": rng.choice(["lru", "arc"]), "store_threshold": rng.choice([0, 1, 2, 3]),
                  "max_tracker_size": rng.choice([2, 5, 64_000])}
        ops = random_operations(rng, rng.randint(5, 60))
        calls += len(ops)
        difference = compare(config, ops)
        if difference:
            mismatches.append({"case": case, "config": config, "difference": difference})
    print(json.dumps({"version": DEFAULT_VERSION, "cases": args.random, "calls": calls,
                      "mismatches": mismatches[:5], "mismatch_count": len(mismatches)},
                     indent=1))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
