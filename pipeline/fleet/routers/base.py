"""What every router gets: the request as the router sees it, a view of the instances, and
the options it declares.

A router is a class with ``NAME``, ``PARAMETERS`` (option name -> ``Parameter``, with the
project's default) and ``route(request, view) -> (instance, decision)``; ``decision`` is a
short label of the rule that chose (``"cache-hit"``, ``"balance"``, ...), kept per request.
Routers that keep router-side state hear ``on_first_token`` and ``on_finish``.

The view (``InstanceView``) answers what a deployed router can know: its own count of the
requests it routed and that have not finished (``routed_outstanding``, always fresh: the
router owns it), and engine-side state (waiting/running counts, KV usage, which prefix
blocks an instance holds), which a stale view answers as of its last refresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, Sequence

import numpy as np

__all__ = ["Parameter", "RouteRequest", "InstanceView", "Router", "rng_for", "max_score_pick",
           "leading_run"]


@dataclass(frozen=True)
class Parameter:
    """One router option: its default (the project's), type and one line of help."""

    default: Any
    kind: Callable[[str], Any]
    help: str


@dataclass(frozen=True)
class RouteRequest:
    """A request as the router sees it: ``hashes`` = the full-block hashes of its prompt,
    computed as the engine computes them (what llm-d's and Dynamo's routers hash). They
    are chained: two prompts share the hash at position k iff they share blocks 0..k."""

    index: int
    hashes: Sequence[Any]
    prompt_tokens: int
    arrival_ms: float
    session: str | None = None


class InstanceView(Protocol):
    """What a router may read about the instances."""

    num_instances: int
    block_size: int

    def routed_outstanding(self, instance: int) -> int: ...
    def num_waiting(self, instance: int) -> int: ...
    def num_running(self, instance: int) -> int: ...
    def kv_usage(self, instance: int) -> float: ...
    def cached_blocks(self, instance: int, hashes: Sequence[Any]) -> int: ...
    def cached_block_count(self, instance: int) -> int: ...
    def gpu_blocks(self, instance: int) -> int: ...


class Router:
    """Base class: options checked against ``PARAMETERS`` and filled with the defaults."""

    NAME: ClassVar[str] = ""
    PARAMETERS: ClassVar[dict[str, Parameter]] = {}
    #: False: the router reads no more of ``request.hashes`` than a few items or its
    #: length, so the fleet may pass them as a numpy array instead of a list of ints
    LIST_HASHES: ClassVar[bool] = True
    #: True: ``route`` reads neither the view nor the callbacks (its decisions depend on
    #: the requests alone), so the fleet may route everything first and run each
    #: instance alone
    OBLIVIOUS: ClassVar[bool] = False
    #: how slow a point of this router is, roughly (a sweep starts the slowest first;
    #: an oblivious router counts 0)
    COST: ClassVar[int] = 1

    def __init__(self, num_instances: int, block_size: int, seed: int = 0,
                 **options: Any) -> None:
        if num_instances < 1:
            raise ValueError(f"need at least 1 instance, got {num_instances}")
        unknown = sorted(set(options) - set(self.PARAMETERS))
        if unknown:
            raise ValueError(f"router {self.NAME} has no option {unknown[0]!r} "
                             f"(options: {', '.join(self.PARAMETERS) or 'none'})")
        self.num_instances = num_instances
        self.block_size = block_size
        self.seed = seed
        self.options = {name: options.get(name, parameter.default)
                        for name, parameter in self.PARAMETERS.items()}

    @classmethod
    def refusal(cls, sessions: Sequence[str | None], options: dict) -> str | None:
        """Why this router, with ``options``, cannot route a workload whose requests have
        these session ids (one line naming the option to change), else None: checked
        before a sweep runs."""
        return None

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        raise NotImplementedError

    def on_first_token(self, instance: int, request: RouteRequest) -> None:
        """The request's first token was sampled (its prefill is done)."""

    def on_finish(self, instance: int, request: RouteRequest) -> None:
        """The request finished on ``instance``."""


def max_score_pick(scores: Sequence[float], rng: np.random.Generator) -> int:
    """llm-d's max-score picker (``picker/maxscore/picker.go``): shuffle the endpoints, sort
    them stably by score, take the first: the best score, ties at random."""
    best = max(scores)
    return next(int(i) for i in rng.permutation(len(scores)) if scores[i] == best)


def leading_run(container, hashes: Sequence[Any]) -> int:
    """How many leading ``hashes`` are in ``container``, for a container that is
    prefix-closed over chained hashes (holding a prompt's hash k means holding its hashes
    0..k-1): a binary search, O(log n) lookups."""
    low, high = 0, len(hashes)                # hashes[:low] are in, hashes[high:] are not
    while low < high:
        mid = (low + high + 1) // 2
        if hashes[mid - 1] in container:
            low = mid
        else:
            high = mid - 1
    return low


def rng_for(seed: int, name: str) -> np.random.Generator:
    """A router's own generator: the same seed gives each router its own stream."""
    return np.random.default_rng([seed, sum(name.encode())])
