"""The engine loop shared by the reference drivers of vLLM's scheduler with a KV connector
(``vllm_offload_engine_reference``: the ``OffloadingConnector``;
``vllm_simple_offload_reference``: the ``SimpleCPUOffloadConnector``).

vLLM's own ``Scheduler`` (or ``AsyncScheduler``) is built with the connector in the
scheduler role; each engine step is ``EngineCore.step`` (sync) or ``step_with_batch_queue``
with a queue of two (async scheduling), and feeds the fake worker's ``KVConnectorOutput``
back through ``update_from_output``. What differs between the connectors comes in as a
``Side`` (a fake worker with the connector's metadata read).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterable, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vllm_scheduler_reference as base  # noqa: E402


class Side(Protocol):
    """A connector's fake worker as the driver sees it."""

    loads: dict

    def begin(self, meta, now: float) -> tuple[Iterable[str], int, int, float]:
        """Submit a step's transfers at its start: (the requests whose loads it submits,
        the amount it loads, the amount it stores, when its forward pass may begin)."""

    def end(self, meta, end: float) -> None:
        """What the worker does at the step's end."""

    def reported(self, kv_output, loaded) -> bool:
        """Whether the step's output reported progress (for the no-progress guard)."""

    def clock(self, end: float) -> float: ...

    def next_end(self) -> float | None: ...

    def finished(self, mods, end: float): ...


def connector_vllm_config(config):
    """``vllm_scheduler_reference.vllm_config`` with a KV transfer config (both roles,
    failed loads recomputed), one worker and no prefix-cache retention."""
    vllm_config = base.vllm_config(config)
    vllm_config.kv_transfer_config = base.Strict(kv_load_failure_policy="recompute",
                                                 is_kv_consumer=True, is_kv_producer=True)
    vllm_config.cache_config.prefix_cache_retention_interval = None
    vllm_config.parallel_config.world_size = 1
    return vllm_config


def build_scheduler(v, mods, config, vllm_config, kv_config, connector):
    """vLLM's ``Scheduler`` / ``AsyncScheduler`` whose connector factory returns
    ``connector``."""
    factory = mods.core.KVConnectorFactory
    mods.core.KVConnectorFactory = SimpleNamespace(create_connector=lambda **_: connector)
    try:
        manager = base.Strict(accept_tokens=lambda request, tokens: True)
        cls = v.AsyncScheduler if config.async_scheduling else v.Scheduler
        return cls(vllm_config, kv_config, manager, block_size=config.block_size,
                   hash_block_size=config.block_size, log_stats=False)
    finally:
        mods.core.KVConnectorFactory = factory


def apply_output(scheduler, worker, mods, batch, rows, live, outputs, step):
    """One batch's result through vLLM's ``update_from_output``: the worker's report of
    finished transfers (``load_done`` of the requests whose loads ended, at ``step``), the
    step's sampled tokens, and each request's first-token and finish steps in ``rows``;
    (the worker's ``KVConnectorOutput``, the request ids whose loads finished)."""
    out, samples, this, end = batch
    kv_output, loaded = worker.finished(mods, end)
    for rid in loaded:
        if rows[int(rid)]["load_done"] is None:
            rows[int(rid)]["load_done"] = step
    base.update_from_output(scheduler, out, samples, this, outputs, live, rows, kv_output)
    return kv_output, loaded


def drive(v, mods, scheduler, worker: Side, requests, config, *,
          step_ms: Callable[[int, int], float] | None = None):
    """Run ``requests`` through ``scheduler`` beside ``worker``. ``step_ms(prefill,
    decodes)``: the time clock (arrivals by ``arrival_s``), else the step clock. Returns
    (rows, steps): request -> (first_scheduled_step, first_token_step, finish_step,
    gpu_hit_tokens, cpu_hit_tokens, preemptions, output_tokens, load_step, load_done_step)
    and per step (step, running, waiting, free blocks, amount loaded, amount stored, and on
    the time clock its start and end ms); with the time clock also request -> its first
    load's (submit, start, end) ms."""
    from pipeline.engine.request import sequence_tokens
    timed = step_ms is not None
    hasher = base._hasher(config.block_size)
    outputs = {r.index: [int(t) for t in sequence_tokens(r)[len(r.prompt_token_ids):]]
               for r in requests}
    rows = {r.index: dict(first_scheduled_step=None, first_token_step=None, finish_step=None,
                          gpu=0, cpu=0, load_step=None, load_done=None) for r in requests}
    live, steps = {}, []
    pending = sorted(requests, key=lambda r: ((r.arrival_s or 0.0) if timed
                                              else (r.arrival_step or 0), r.index))
    pointer, step, now = 0, 0, 0.0
    moved = [0, 0]                     # amounts loaded / stored since the last executed step

    def due(r):
        return (r.arrival_s or 0.0) * 1000.0 if timed else (r.arrival_step or 0)

    def add_due():
        nonlocal pointer
        clock = now if timed else step
        while pointer < len(pending) and due(pending[pointer]) <= clock:
            r = pending[pointer]
            request = v.Request(str(r.index), [int(t) for t in r.prompt_token_ids],
                                base._sampling(r.max_tokens), None,
                                arrival_time=float(r.index), block_hasher=hasher)
            request.structured_output_request = None
            request.status = v.RequestStatus.WAITING
            live[r.index] = request
            scheduler.add_request(request)
            pointer += 1

    def schedule(queue):
        """schedule(), the worker's start of the step; returns the batch in flight."""
        nonlocal step, now, moved
        out = scheduler.schedule()
        meta = out.kv_connector_metadata
        this = step if out.total_num_scheduled_tokens > 0 else None
        loading, loaded, stored, forward = worker.begin(meta, now)
        for rid in loading:
            if rows[int(rid)]["load_step"] is None:
                rows[int(rid)]["load_step"] = step
        moved[0] += loaded
        moved[1] += stored
        prefill = decodes = 0
        samples = []
        for rid, n in out.num_scheduled_tokens.items():
            request = scheduler.requests[rid]
            if n == 1 and request.num_computed_tokens - n >= request.num_prompt_tokens:
                decodes += 1
            else:
                prefill += n
            if not request.is_prefill_chunk:
                samples.append(rid)
        if this is not None:
            step += 1
            for rid in out.num_scheduled_tokens:
                row = rows[int(rid)]
                if row["first_scheduled_step"] is None:
                    row["first_scheduled_step"] = this
                    stats = live[int(rid)].prefill_stats
                    row["gpu"] = stats.num_local_cached_tokens
                    row["cpu"] = stats.num_external_cached_tokens
            running, waiting = scheduler.get_request_counts()
            end = forward + (step_ms(prefill, decodes) if timed else 0.0)
            steps.append((this, running, waiting,
                          scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
                          *moved) + ((now, end) if timed else ()))
            moved = [0, 0]
        else:
            end = forward
            if timed and not (queue and queue[-1][2] is not None):   # none in flight
                wake = [t for t in (worker.next_end(),
                                    due(pending[pointer]) if pointer < len(pending)
                                    else None) if t is not None]
                end = max(forward, min(wake)) if wake else forward
        worker.end(meta, end)
        if timed:
            now = end
        return out, samples, this, worker.clock(end)

    def process(batch) -> bool:
        """update_from_output with the step's sampled tokens and the worker's report;
        whether the worker reported progress."""
        return worker.reported(*apply_output(scheduler, worker, mods, batch, rows, live,
                                              outputs, step))

    def wait() -> bool:
        nonlocal step, now
        if pointer == len(pending):
            return False
        if timed:
            now = max(now, due(pending[pointer]))
        else:
            step = max(step, due(pending[pointer]))
        return True

    base.engine_loop(scheduler, 2 if config.async_scheduling else 1, add_due, wait,
                     schedule, process)
    result = {r.index: (rows[r.index]["first_scheduled_step"],
                        rows[r.index]["first_token_step"], rows[r.index]["finish_step"],
                        rows[r.index]["gpu"], rows[r.index]["cpu"],
                        live[r.index].num_preemptions, len(live[r.index].output_token_ids),
                        rows[r.index]["load_step"], rows[r.index]["load_done"])
              for r in requests}
    loads = {int(k): t for k, t in worker.loads.items()}
    return (result, steps, loads) if timed else (result, steps)


def model_shapes(result, unit_bytes: int, timed: bool):
    """kvlab's ``simulate`` result in ``drive``'s shapes (moved amounts in units of
    ``unit_bytes``): (rows, steps, loads)."""
    rows = {x["request"]: (x["first_scheduled_step"], x["first_token_step"], x["finish_step"],
                           x["gpu_hit_tokens"], x["cpu_hit_tokens"], x["preemptions"],
                           x["output_tokens"], x["load_step"], x["load_done_step"])
            for x in result.requests.iter_rows(named=True)}
    steps = [(x["step"], x["num_running"], x["num_waiting"], x["free_blocks"],
              x["cpu_load_bytes"] // unit_bytes, x["cpu_store_bytes"] // unit_bytes)
             + ((x["start_ms"], x["start_ms"] + x["duration_ms"]) if timed else ())
             for x in result.steps.iter_rows(named=True)]
    loads = {x["request"]: (x["load_end_s"] * 1000 - x["load_ms"], x["load_start_s"] * 1000,
                            x["load_end_s"] * 1000)
             for x in result.requests.iter_rows(named=True)
             if timed and x["load_ms"] is not None}
    return rows, steps, loads


def tight_pool(rng, requests, config):
    """Often (60 %) a GPU pool of the largest request + 1-3 blocks: CPU hits."""
    if rng.random() < 0.6:
        need = max(-(-(min(len(r.prompt_token_ids) + r.max_tokens, config.max_model_len) - 1)
                   // config.block_size) for r in requests)
        config = dataclasses.replace(config, num_gpu_blocks=need + 1 + rng.choice([0, 1, 2]))
    return config


def on_time_clock(rng, requests):
    """``requests`` moved to the time clock: arrival steps scaled to seconds by a random
    0.005, 0.02 or 0.1."""
    scale = rng.choice([0.005, 0.02, 0.1])
    return [dataclasses.replace(r, arrival_s=r.arrival_step * scale, arrival_step=None)
            for r in requests]


def agree(theirs, ours, timed: bool) -> bool:
    """Whether kvlab's run equals vLLM's: every request and step, and on the time clock the
    same requests' loads at the same times (to 1e-9 relative)."""
    return theirs[:2] == ours[:2] and (not timed or theirs[2].keys() == ours[2].keys()
                                       and all(abs(a - b) <= 1e-9 * max(1.0, abs(a))
                                               for request, times in theirs[2].items()
                                               for a, b in zip(times, ours[2][request])))


def compare_main(description: str, run_case: Callable) -> int:
    """The reference drivers' command: ``--random N`` cases from ``--seed``, each
    ``run_case(rng)`` -> (config, timed, vLLM's run, kvlab's run, fields for its line);
    a JSON line per case and a summary; exit status 1 on any difference."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--random", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261206)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    differ = 0
    for case in range(args.random):
        config, timed, theirs, ours, fields = run_case(rng)
        same = agree(theirs, ours, timed)
        differ += not same
        print(json.dumps({"case": case, "async": config.async_scheduling, "timed": timed,
                          **fields, "requests": len(theirs[0]), "steps": len(theirs[1]),
                          "cpu_hits": sum(r[4] for r in theirs[0].values()),
                          "equal": same}))
    print(json.dumps({"cases": args.random, "differ": differ}))
    return 1 if differ else 0
