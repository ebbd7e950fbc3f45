"""``least-loaded``: the fewest outstanding requests, or vLLM's data-parallel score.

* ``metric=outstanding`` (default): the instance with the fewest requests the router sent
  and that have not finished, as SGLang's shortest-queue fallback (sgl-project/sglang
  ``sgl-router/src/policies/cache_aware.rs``, commit b6f2064: ``min_by_key(|w| w.load())``).
  Ties: the lowest instance index (Rust's ``min_by_key`` keeps the first minimum).
* ``metric=vllm-dp``: vLLM v1's ``DPLBAsyncMPClient.get_core_engine_for_request``
  (vllm-project/vllm ``vllm/v1/engine/core_client.py``, v0.11): score
  ``waiting * 4 + running`` from the coordinator's counts, strict ``<`` scanning from index
  0 (``eng_start_index`` = 0 for one front end), so ties go to the lowest index; after each
  pick the chosen engine's local waiting count is raised by one until the next stats update
  (here: the next refresh of a stale view; a live view already counts the request).
* ``metric=queue``: llm-d's queue-depth view (fewest waiting requests), ties lowest index.
"""

from __future__ import annotations

from pipeline.fleet.routers.base import InstanceView, Parameter, RouteRequest, Router

METRICS = ("outstanding", "vllm-dp", "queue")


def _metric(value: str) -> str:
    if value not in METRICS:
        raise ValueError(value)
    return value


class LeastLoaded(Router):
    NAME = "least-loaded"
    LIST_HASHES = False
    PARAMETERS = {"metric": Parameter("outstanding", _metric,
                                      "outstanding | vllm-dp (waiting*4+running) | queue")}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.local_waiting = [0] * self.num_instances
        self.epoch: object = None

    def score(self, instance: int, view: InstanceView) -> int:
        metric = self.options["metric"]
        if metric == "outstanding":
            return view.routed_outstanding(instance)
        if metric == "queue":
            return view.num_waiting(instance)
        waiting = view.num_waiting(instance) + self.local_waiting[instance]
        return waiting * 4 + view.num_running(instance)

    def route(self, request: RouteRequest, view: InstanceView) -> tuple[int, str]:
        epoch = getattr(view, "epoch", None)
        if epoch != self.epoch:                  # fresh counts: drop the local increments
            self.epoch = epoch
            self.local_waiting = [0] * self.num_instances
        best, best_score = 0, None
        for instance in range(self.num_instances):
            score = self.score(instance, view)
            if best_score is None or score < best_score:
                best, best_score = instance, score
        if self.options["metric"] == "vllm-dp" and getattr(view, "stale", False):
            self.local_waiting[best] += 1
        return best, self.options["metric"]


ROUTER = LeastLoaded
