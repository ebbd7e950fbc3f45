"""``round-robin``: SGLang router's ``round_robin`` policy.

Source: sgl-project/sglang ``sgl-router/src/policies/round_robin.rs`` (commit 45fa65f):
``counter.fetch_add(1) % healthy_workers.len()``: request k goes to instance k mod N (every
instance is healthy here). No parameters; no ties.
"""

from __future__ import annotations

from pipeline.fleet.routers.base import InstanceView, RouteRequest, Router


class RoundRobin(Router):
    NAME = "round-robin"
    LIST_HASHES = False
    OBLIVIOUS = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.counter = 0

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        instance = self.counter % self.num_instances
        self.counter += 1
        return instance, "round-robin"


ROUTER = RoundRobin
