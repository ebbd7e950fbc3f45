"""``session``: session affinity, by session id or else by the prompt's first block.

As vLLM production-stack's ``SessionRouter`` (vllm-project/production-stack
``src/vllm_router/routers/routing_logic.py``, v0.1.x), which keys a consistent-hash ring by
the session header: every request of a session goes to one instance. The key is the session
id when the request has one, else its first full-block hash (else its request index). The
instance is ``blake2b(key) mod N`` (a fixed hash, so runs repeat; production-stack's ring
moves fewer keys when instances change, which a fixed fleet never does). No ties.
"""

from __future__ import annotations

import hashlib

from pipeline.fleet.routers.base import InstanceView, RouteRequest, Router


def session_key(request: RouteRequest) -> str:
    """The affinity key: session id, else first block hash, else the request index."""
    if request.session is not None:
        return f"session:{request.session}"
    if len(request.hashes):
        return f"block:{int(request.hashes[0])!r}"
    return f"request:{request.index}"


def instance_for(key: str, num_instances: int) -> int:
    """``blake2b(key)`` (8 bytes, big-endian) mod ``num_instances``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_instances


class Session(Router):
    NAME = "session"
    LIST_HASHES = False
    OBLIVIOUS = True

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        key = session_key(request)
        return instance_for(key, self.num_instances), key.split(":", 1)[0]


ROUTER = Session
