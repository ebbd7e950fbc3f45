"""``kv-cost``: Dynamo's KV router (cost = blocks to prefill and active decode blocks).

Sources (ai-dynamo/dynamo): ``lib/kv-router/src/scheduling/selector.rs`` (commit ccd1706,
``DefaultWorkerSelector::select_worker`` and ``softmax_sample``) and the router's
``ActiveSequences`` (``lib/llm/src/kv_router/sequence.rs``: ``potential_blocks_and_tokens``,
``new_tokens``, ``mark_prefill_completed``); defaults from the router's CLI docs
(``docs/router/kv_cache_routing.md``): ``--kv-overlap-score-weight 1``,
``--router-temperature 0``.

Per instance, with ``overlap`` = its cached leading blocks of the prompt (the KvIndexer fed
by KV events: GPU tier, delayed by ``--staleness-ms``):

* ``prefill_tokens`` = the prefill tokens of requests routed there whose first token has not
  come yet + ``max(prompt_tokens - overlap * block_size, 0)``;
* ``decode_blocks`` = the distinct blocks of the requests routed there and not finished +
  the prompt's blocks among none of them;
* ``logit = overlap_weight * prefill_tokens / block_size + decode_blocks``.

Temperature 0: the lowest logit; ties go to the instance whose index holds the fewest
blocks (Dynamo's tree size; here its cached block count), and if those tie too, a random
one of them. Temperature T > 0: softmax sampling of ``-logit / (max - min) / T`` (uniform
when all logits are equal) with one uniform draw against the cumulative sum in instance
order. Random draws use numpy's generator seeded by ``--seed``.
"""

from __future__ import annotations

import math
from collections import deque
from itertools import repeat

from pipeline.fleet.routers.base import InstanceView, Parameter, RouteRequest, Router, \
    leading_run, rng_for


class ActiveSequences:
    """Dynamo's router-side record of one worker's in-flight requests.

    The held blocks are whole prompts' chained hashes, so along one prompt the number of
    requests holding its k-th block never grows with k: the blocks a new prompt shares
    are a leading run, and the blocks only a finishing request holds are a trailing run
    of its own (both found by binary search, then updated in bulk)."""

    def __init__(self) -> None:
        self.blocks: dict[int, list] = {}          # request -> its block hashes
        self.unique: dict = {}                      # hash -> requests holding it
        self.prefill: dict[int, int] = {}           # request -> prefill tokens pending
        self.active_tokens = 0

    def new_blocks(self, hashes) -> int:
        """The prompt's blocks no in-flight request holds."""
        return len(hashes) - leading_run(self.unique, hashes)

    def add(self, request: int, hashes, prefill_tokens: int) -> None:
        unique = self.unique
        shared = leading_run(unique, hashes)
        unique.update({block: unique[block] + 1 for block in hashes[:shared]})
        unique.update(zip(hashes[shared:], repeat(1)))
        self.blocks[request] = hashes
        self.prefill[request] = prefill_tokens
        self.active_tokens += prefill_tokens

    def prefill_done(self, request: int) -> None:
        self.active_tokens -= self.prefill.pop(request, 0)

    def free(self, request: int) -> None:
        self.prefill_done(request)
        hashes = self.blocks.pop(request, ())
        unique = self.unique
        low, high = 0, len(hashes)                  # the first block only it holds
        while low < high:
            mid = (low + high) // 2
            if unique[hashes[mid]] > 1:
                low = mid + 1
            else:
                high = mid
        unique.update({block: unique[block] - 1 for block in hashes[:low]})
        deque(map(unique.__delitem__, hashes[low:]), maxlen=0)


def softmax_pick(logits: list[float], temperature: float, sample: float) -> int:
    """Dynamo's ``softmax_sample`` for T > 0: the index the uniform ``sample`` lands on."""
    low, high = min(logits), max(logits)
    if low == high:
        probabilities = [1.0 / len(logits)] * len(logits)
    else:
        scaled = [-(value / (high - low)) / temperature for value in logits]
        top = max(scaled)
        weights = [math.exp(value - top) for value in scaled]
        total = sum(weights)
        probabilities = [weight / total for weight in weights]
    cumulative = 0.0
    for index, probability in enumerate(probabilities):
        cumulative += probability
        if sample <= cumulative:
            return index
    return len(logits) - 1


class KvCost(Router):
    NAME = "kv-cost"
    COST = 2
    PARAMETERS = {
        "overlap_weight": Parameter(1.0, float, "weight of prefill blocks in the cost"),
        "temperature": Parameter(0.0, float, "softmax temperature (0: lowest cost)"),
    }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.active = [ActiveSequences() for _ in range(self.num_instances)]
        self.rng = rng_for(self.seed, self.NAME)

    def costs(self, request: RouteRequest, view: InstanceView) -> tuple[list[float], list[int]]:
        """(logit, new prefill tokens) per instance."""
        weight, size = self.options["overlap_weight"], self.block_size
        logits, added = [], []
        for i, active in enumerate(self.active):
            overlap = view.cached_blocks(i, request.hashes)
            new_tokens = max(request.prompt_tokens - overlap * size, 0)
            prefill = active.active_tokens + new_tokens
            decode = len(active.unique) + active.new_blocks(request.hashes)
            logits.append(weight * prefill / size + decode)
            added.append(new_tokens)
        return logits, added

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        logits, added = self.costs(request, view)
        temperature = self.options["temperature"]
        if temperature == 0.0:
            best = min(logits)
            tied = [i for i, logit in enumerate(logits) if logit == best]
            if len(tied) > 1:
                sizes = [view.cached_block_count(i) for i in tied]
                if all(size == sizes[0] for size in sizes):
                    choice = tied[int(self.rng.integers(len(tied)))]
                else:
                    choice = tied[sizes.index(min(sizes))]
            else:
                choice = tied[0]
        else:
            choice = softmax_pick(logits, temperature, float(self.rng.random()))
        self.active[choice].add(request.index, request.hashes, added[choice])
        hit = added[choice] < request.prompt_tokens
        return choice, "cache-hit" if hit else "load"

    def on_first_token(self, instance: int, request: RouteRequest) -> None:
        self.active[instance].prefill_done(request.index)

    def on_finish(self, instance: int, request: RouteRequest) -> None:
        self.active[instance].free(request.index)


ROUTER = KvCost
