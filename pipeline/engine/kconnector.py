"""The engine loop's KV connector, compiled: each hook of ``pipeline.engine.ksched`` goes to
vLLM's ``OffloadingConnector`` (``pipeline.engine.knative``) or, when its arrays are on, to
the ``SimpleCPUOffloadConnector`` (``pipeline.engine.ksimple_offload``, its stores
``pipeline.engine.ksimple_stores``, its worker ``pipeline.engine.ksimple_worker``). An
engine without offloading never calls them (``O_ON`` is 0)."""

from __future__ import annotations

from pipeline.components.kjit import inlined
from pipeline.engine import knative, ksimple_offload as simple, ksimple_stores as stores, \
    ksimple_worker as worker
from pipeline.engine.knative import inflight_reserved, step_in_flight

__all__ = ["matched", "reserve_sync", "after_alloc", "inflight_reserved", "build_stores",
           "worker_start", "complete", "step_in_flight", "finished"]


@inlined
def _simple(O):
    return O[simple.I_SC][simple.SC_ON] != 0


@inlined
def matched(S, O, slot, local):
    if _simple(O):
        return simple.matched(S, O, slot, local)
    return knative.matched(S, O, slot, local)


@inlined
def reserve_sync(S, O, slot, local, hit):
    """Every load of the simple connector is asynchronous."""
    if _simple(O):
        return False
    return knative.reserve_sync(S, O, slot, local, hit)


@inlined
def after_alloc(S, O, slot, local, external, sync, step):
    if _simple(O):
        simple.after_alloc(S, O, slot, local, external, sync, step)
    else:
        knative.after_alloc(S, O, slot, local, external, sync, step)


@inlined
def build_stores(S, O, q):
    if _simple(O):
        stores.build_stores(S, O, q)
    else:
        knative.build_stores(S, O, q)


@inlined
def worker_start(O, step_ms, q, empty, in_flight):
    if _simple(O):
        return worker.worker_start(O, step_ms, q, empty, in_flight)
    return knative.worker_start(O, step_ms, q, empty, in_flight)


@inlined
def complete(S, O, q, step):
    if _simple(O):
        if not worker.any_done(O, q):
            return 0
        return worker.complete(S, O, q, step)
    return knative.complete(S, O, q, step)


@inlined
def finished(S, O, slot):
    """A finished request, before its GPU blocks are freed (the simple connector's
    ``request_finished_all_groups``; the native one waits for the next schedule)."""
    if _simple(O):
        stores.finished(S, O, slot)
