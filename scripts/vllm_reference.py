"""Cross-check the ``vllm`` GPU model against vLLM's own v1 allocator (optional, never in CI).

Downloads the vLLM wheel of ``--version`` with pip (``--no-deps``, about 330 MB, once, into
``--cache``), extracts only its Python files there, imports ``vllm.v1.core.kv_cache_manager``
with every unavailable dependency (torch, pydantic, ...) replaced by an inert stub and vLLM's
package ``__init__`` files not run, and drives ``KVCacheManager`` request by request like the
scheduler at concurrency 1 (``get_computed_blocks`` -> ``allocate_slots`` -> decode steps
-> ``free``). Then it compares every request's GPU hit with
``pipeline.components.vllm_gpu.replay_vllm`` (the engine's compiled pool at concurrency 1)
on the lab's workload, on random prompts with
shared prefixes (one output length), and on as many random chats (``random_chats``: a
max_tokens per prompt, some replies given as sampled ids and re-sent by a later turn; the
model runs them with ``output_tokens="trace"``; 2026-12-01: 140 + 140 cases, no mismatch). Nothing of vLLM is copied into this repository.

    .venv/bin/python scripts/vllm_reference.py --version 0.33.0
    .venv/bin/python scripts/vllm_reference.py --version 0.11.0 --random 200

Prints JSON; exit status 1 on any mismatch. Seen 2026-11-30 (400 random workloads each):
0.33.0 and 0.24.0 give the lab's figures (0 / 18,880 / 28,960 / 49,920 at 30000 / 47000 /
48000 / 50110 tokens, 49,920 for 5008-token documents at 50110), 0.23.0 and 0.11.0 give 0 /
17,600 / 27,680 / 48,640 (empty tail slots appended), and every request's hit equals the
model's. Random workloads keep every request within the pool, as vLLM itself requires
(it refuses a max_model_len the KV cache cannot hold).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from stub_importer import install_importer, vllm_sources  # noqa: E402


def load_vllm(source: Path):
    """vLLM's KVCacheManager and the config classes it takes."""
    install_importer(source)
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    return KVCacheManager, FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec


# --------------------------------------------------------------------------- the driver

class Prompt:
    """The few Request attributes the v1 KV cache manager reads."""

    def __init__(self, request_id: str, tokens: list[int], block_size: int) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(tokens)
        self.all_token_ids = list(tokens)
        self.num_prompt_tokens = len(tokens)
        self.num_computed_tokens = 0
        self.block_size = block_size
        self.block_hashes: list[bytes] = []
        self.lora_request = self.cache_salt = self.sampling_params = None
        self.pooling_params = self.status = None
        self.mm_features: list = []
        self.spec_token_ids: list = []
        self.skip_reading_prefix_cache = False
        self.num_preemptions = self.num_in_flight_tokens = self.num_output_placeholders = 0
        self.shared_prefix_boundary = 0
        self.hash_blocks()

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def hash_blocks(self) -> None:
        """Chained hashes of the full blocks (vLLM's hash function does not matter here)."""
        parent = self.block_hashes[-1] if self.block_hashes else b""
        while (len(self.block_hashes) + 1) * self.block_size <= len(self.all_token_ids):
            index = len(self.block_hashes)
            block = self.all_token_ids[index * self.block_size:(index + 1) * self.block_size]
            parent = hashlib.sha256(parent + repr(block).encode()).digest()
            self.block_hashes.append(parent)


def _per_request(output_tokens: int | list[int], prompts: list[list[int]]) -> list[int]:
    return list(output_tokens) if isinstance(output_tokens, (list, tuple)) \
        else [output_tokens] * len(prompts)


def vllm_hits(classes, prompts: list[list[int]], logged_tokens: int, block_size: int,
              output_tokens: int | list[int],
              sampled: list[list[int] | None] | None = None) -> list[int]:
    """GPU hit tokens per prompt from vLLM's own KVCacheManager (``output_tokens`` one
    number or one per prompt, its max_tokens; ``sampled``: a prompt's sampled ids, which
    its decode steps feed back, else placeholders no prompt holds)."""
    manager_class, spec_class, config_class, group_class = classes
    spec = spec_class(block_size=block_size, num_kv_heads=1, head_size=1, dtype="float32")
    config = config_class(num_blocks=logged_tokens // block_size, kv_cache_tensors=[],
                          kv_cache_groups=[group_class(["layer.0"], spec)])
    accepted = inspect.signature(manager_class.__init__).parameters
    extra = {k: block_size for k in ("scheduler_block_size", "hash_block_size")
             if k in accepted}
    manager = manager_class(config, max_model_len=10**7, **extra)
    hits = []
    outputs = _per_request(output_tokens, prompts)
    for number, tokens in enumerate(prompts):
        output_tokens = outputs[number]
        ids = sampled[number] if sampled else None
        request = Prompt(f"r{number}", tokens, block_size)
        blocks, computed = manager.get_computed_blocks(request)[:2]
        hits.append(computed)
        if manager.allocate_slots(request, request.num_tokens - computed, computed,
                                  blocks) is None:
            continue                                    # never scheduled
        request.num_computed_tokens = request.num_tokens
        for step in range(output_tokens - 1):           # decode: feed back each sampled token
            request.all_token_ids.append(ids[step] if ids else -1 - number * 100_000 - step)
            request.hash_blocks()
            manager.allocate_slots(request, 1)
            request.num_computed_tokens += 1
        manager.free(request)
    return hits


def model_hits(prompts: list[list[int]], logged_tokens: int, block_size: int,
               output_tokens: int | list[int], version: str,
               sampled: list[list[int] | None] | None = None, replay=None) -> list[int]:
    """The same from ``pipeline.components.vllm_gpu.replay_vllm``, or ``replay`` with its
    signature (the tests' plain-Python oracle) (prompts as a block frame; per-prompt outputs
    and sampled ids as a trace's ``Workload`` gives them, run with ``"trace"``)."""
    import numpy as np
    import polars as pl

    from pipeline.components.vllm_gpu import replay_vllm
    replay = replay or replay_vllm
    from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA
    from pipeline.workloads.workload import Workload
    keys: dict[tuple, int] = {}
    rows, sampled_rows = [], []
    for number, tokens in enumerate(prompts):
        for index, start in enumerate(range(0, len(tokens), block_size)):
            prefix = tuple(tokens[:start + block_size])
            rows.append((number, index, keys.setdefault(prefix, len(keys)),
                         len(prefix) - start))
    for number, tokens in enumerate(prompts):
        ids = sampled[number] if sampled else None
        if ids:                                         # full blocks of prompt + ids[:-1]
            sequence = list(tokens) + list(ids)
            for index in range(len(tokens) // block_size,
                               (len(tokens) + len(ids) - 1) // block_size):
                prefix = tuple(sequence[:(index + 1) * block_size])
                sampled_rows.append((number, keys.setdefault(prefix, len(keys))))
    none = [None] * len(prompts)
    requests = pl.DataFrame({"request": range(len(prompts)), "pass_name": none, "doc": none,
                             "prompt_tokens": [len(p) for p in prompts], "timestamp_ms": none},
                            schema=REQUEST_SCHEMA)
    per_request = isinstance(output_tokens, (list, tuple)) or bool(sampled)
    workload = Workload(
        pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row"), requests, block_size,
        output_tokens=np.array(_per_request(output_tokens, prompts)) if per_request else None,
        output_blocks=pl.DataFrame(sampled_rows, schema={"request": pl.UInt32,
                                                         "block_key": pl.UInt64},
                                   orient="row") if sampled else None)
    stream = workload.block_stream()
    return (replay(stream, logged_tokens, "trace" if per_request else output_tokens,
                   version) * block_size).tolist()


def lab_prompts(tokens: int, docs: int = 10, passes: int = 2) -> list[list[int]]:
    return [[doc * 1_000_000 + t for t in range(tokens)] for _ in range(passes)
            for doc in range(docs)]


def random_prompts(rng: random.Random, block_size: int) -> list[list[int]]:
    """Prompts drawn from a small trie of block contents: shared prefixes, partial tails,
    exact block multiples."""
    prompts = []
    for _ in range(rng.randint(1, 14)):
        path = [rng.randint(0, 2) for _ in range(rng.randint(1, 6))]
        tokens = [hash(tuple(path[:i + 1])) % 997 * 100 + t
                  for i in range(len(path)) for t in range(block_size)]
        prompts.append(tokens[:len(tokens) - rng.randint(0, block_size - 1)])
    return prompts


def random_chats(rng: random.Random, block_size: int
                 ) -> tuple[list[list[int]], list[int], list[list[int] | None]]:
    """(prompts, max_tokens per prompt, sampled ids or None per prompt): ``random_prompts``
    with an output length each, some replies given as ids and re-sent by a later turn
    (the earlier prompt + its reply + a few new tokens)."""
    prompts = random_prompts(rng, block_size)
    outputs, sampled = [], []
    for number in range(len(prompts)):
        if number and rng.random() < 0.4:               # a next turn re-sends a reply
            earlier = rng.randrange(number)
            if sampled[earlier]:
                prompts[number] = prompts[earlier] + sampled[earlier] + \
                    [rng.randint(0, 99) for _ in range(rng.randint(0, block_size))]
        ids = [900_000 + number * 100 + t for t in range(rng.randint(1, 9))] \
            if rng.random() < 0.6 else None
        sampled.append(ids)
        outputs.append(len(ids) if ids else rng.randint(1, 9))
    return prompts, outputs, sampled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.33.0")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kvlab")
    parser.add_argument("--random", type=int, default=100, help="random workloads to compare")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    classes = load_vllm(vllm_sources(args.version, args.cache))
    report = {"version": args.version, "lab": {}, "mismatches": []}
    for tokens, capacities in ((5011, (30000, 47000, 48000, 50110)), (5008, (50110,))):
        prompts = lab_prompts(tokens)
        for capacity in capacities:
            theirs = vllm_hits(classes, prompts, capacity, 16, 1)
            ours = model_hits(prompts, capacity, 16, 1, args.version)
            report["lab"][f"{tokens}@{capacity}"] = sum(theirs[10:])
            if theirs != ours:
                report["mismatches"].append({"case": f"lab {tokens}@{capacity}"})
    rng = random.Random(args.seed)
    for case in range(args.random):
        block_size = rng.randint(1, 4)
        prompts = random_prompts(rng, block_size)
        output = rng.randint(1, 9)
        # vLLM refuses to start when a request cannot fit (max_model_len vs the KV cache), so
        # compare where every request fits: at least its slots plus the null block
        need = max(-(-(len(p) + output - 1) // block_size) for p in prompts) + 1
        capacity = rng.randint(need, need + 30) * block_size + rng.randint(0, block_size - 1)
        theirs = vllm_hits(classes, prompts, capacity, block_size, output)
        ours = model_hits(prompts, capacity, block_size, output, args.version)
        if theirs != ours:
            report["mismatches"].append({"case": case, "block_size": block_size,
                                         "capacity": capacity, "output": output,
                                         "vllm": theirs, "model": ours})
    for case in range(args.random):                     # per-request outputs, replies re-sent
        block_size = rng.randint(1, 4)
        prompts, outputs, sampled = random_chats(rng, block_size)
        need = max(-(-(len(p) + o - 1) // block_size) for p, o in zip(prompts, outputs)) + 1
        capacity = rng.randint(need, need + 30) * block_size + rng.randint(0, block_size - 1)
        theirs = vllm_hits(classes, prompts, capacity, block_size, outputs, sampled)
        ours = model_hits(prompts, capacity, block_size, outputs, args.version, sampled)
        if theirs != ours:
            report["mismatches"].append({"case": f"chat {case}", "block_size": block_size,
                                         "capacity": capacity, "outputs": outputs,
                                         "vllm": theirs, "model": ours})
    report["random_cases"] = args.random
    print(json.dumps(report, indent=2))
    return 1 if report["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
