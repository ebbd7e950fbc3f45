"""``random``: SGLang router's ``random`` policy, seeded.

Source: sgl-project/sglang ``sgl-router/src/policies/random.rs`` (commit b4ea46f):
``rng.random_range(0..healthy_workers.len())``, uniform over instances. Here the generator
is numpy's PCG64 seeded by ``--seed`` (SGLang uses an unseeded thread RNG), so a run repeats.
"""

from __future__ import annotations

from pipeline.fleet.routers.base import InstanceView, RouteRequest, Router, rng_for


class RandomChoice(Router):
    NAME = "random"
    LIST_HASHES = False
    OBLIVIOUS = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rng = rng_for(self.seed, self.NAME)

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        return int(self.rng.integers(self.num_instances)), "random"


ROUTER = RandomChoice
