"""``session``: session affinity by the request's session id.

As vLLM production-stack's ``SessionRouter`` (vllm-project/production-stack
``src/vllm_router/routers/routing_logic.py``, v0.1.x), which keys a consistent-hash ring by
the session header: every request of a session goes to one instance. The instance is
``blake2b(key) mod N`` (a fixed hash, so runs repeat; production-stack's ring moves fewer
keys when instances change, which a fixed fleet never does). No ties.

The key (option ``key``): ``session`` (the default) is the session id, which a trace gives
as Mooncake's ``session_id`` or ``chat_id`` / ``parent_chat_id``
(``pipeline.workloads.sessions``); a workload with a request that has none is refused
(``refusal``): hashing something every request shares would send them all to one instance.
``blocks:N`` keys a request without a session id by its first N full blocks (the chained
hash of block N, or of its last full block), else by its index.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from pipeline.fleet.routers.base import InstanceView, Parameter, RouteRequest, Router

__all__ = ["session_key", "instance_for", "affinity_key", "Session"]


def affinity_key(value: str) -> int:
    """``session.key``: 0 for ``session``, N for ``blocks:N``; ValueError otherwise."""
    if value == "session":
        return 0
    kind, _, count = value.partition(":")
    if kind == "blocks" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(f"expected session or blocks:N (N >= 1), got {value!r}")


def key_option(value: str) -> str:
    """``--router-option session.key=VALUE``, checked (``affinity_key``)."""
    affinity_key(value)
    return value


key_option.__name__ = "session or blocks:N"          # named in parse_router_options' error


def session_key(request: RouteRequest, blocks: int = 1) -> str:
    """The affinity key: the session id, else (``blocks`` >= 1) the hash of the prompt's
    first ``blocks`` full blocks, else the request index; ValueError when there is no
    session id and ``blocks`` is 0 (``session.key=session``)."""
    if request.session is not None:
        return f"session:{request.session}"
    if not blocks:
        raise ValueError(f"request {request.index} has no session id "
                         "(--router-option session.key=blocks:N keys it by its prompt)")
    if len(request.hashes):
        return f"block:{int(request.hashes[min(blocks, len(request.hashes)) - 1])!r}"
    return f"request:{request.index}"


def instance_for(key: str, num_instances: int) -> int:
    """``blake2b(key)`` (8 bytes, big-endian) mod ``num_instances``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_instances


class Session(Router):
    NAME = "session"
    PARAMETERS = {
        "key": Parameter("session", key_option, "session: the session id (required); blocks:N: "
                         "else the prompt's first N full blocks"),
    }
    LIST_HASHES = False
    OBLIVIOUS = True

    def __init__(self, num_instances: int, block_size: int, seed: int = 0, **options) -> None:
        super().__init__(num_instances, block_size, seed, **options)
        self.blocks = affinity_key(self.options["key"])

    @classmethod
    def refusal(cls, sessions: Sequence[str | None], options: dict) -> str | None:
        if affinity_key(options.get("key", "session")) or all(s is not None for s in sessions):
            return None
        missing = sum(s is None for s in sessions)
        return (f"--router session: {missing:,} of {len(sessions):,} requests have no session "
                "id (a trace's session_id, or chat_id with parent_chat_id); "
                "--router-option session.key=blocks:N routes them by their first N blocks")

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        key = session_key(request, self.blocks)
        return instance_for(key, self.num_instances), key.split(":", 1)[0]


ROUTER = Session
