"""N simulated engines behind a router, on one clock (milliseconds).

Each instance is an ``EngineSim`` with its own step-time model. Events are taken in time
order: an arrival at t is routed at t (after every first-token and finish the router
should have heard of by t) and added to its instance; an instance with work schedules its
next batch at its own clock and advances it by the batch's duration. At equal times,
arrivals come before batches (as ``simulate`` adds every request due before scheduling)
and instances go in index order. An idle instance's clock jumps to the arrival that
wakes it. With one instance this is exactly ``pipeline.engine.loop.simulate`` with the
time clock.

Engine-side effects of a batch (blocks allocated and hashed, requests finished) are
visible from the batch's start, as vLLM hashes blocks when it schedules them; the router
hears a request's first token and finish at the end of the batch that sampled it.

A router that reads nothing of the instances (``Router.OBLIVIOUS``: round robin, random,
session) cannot be swayed by the order of events: every request is routed first, then each
instance runs alone over its requests in one compiled loop (unless the instances share a
CPU pool or the step times are Python's), with the same frames.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.engine.compiled import compiled_model, compiled_run
from pipeline.engine.config import SchedulerConfig
from pipeline.engine.kstep import MODEL_NONE, reload_term
from pipeline.engine.core import EngineSim, StepRecord
from pipeline.engine.hashing import flat_request_keys
from pipeline.engine.loop import STEP_COLUMNS, request_frame, step_frame, timed_run
from pipeline.engine.request import SimRequest
from pipeline.fleet.routers.base import RouteRequest, Router
from pipeline.fleet.view import FleetView

__all__ = ["FleetResult", "simulate_fleet"]

_STUCK_CALLS = 64
StepMs = Callable[[StepRecord], float]
RunMs = Callable[[int, int, int], np.ndarray]


@dataclass(frozen=True)
class FleetResult:
    """``requests``: one row per request (input order) with its ``instance`` and the
    router's ``decision``; ``steps``: one row per batch with its ``instance``."""

    requests: pl.DataFrame
    steps: pl.DataFrame


class _Instance:
    def __init__(self, index: int, engine: EngineSim, step_ms: StepMs,
                 run_ms: RunMs | None) -> None:
        self.index, self.engine, self.step_ms, self.run_ms = index, engine, step_ms, run_ms
        self.priced = compiled_model(step_ms)     # a compiled model's (kind, coefficients)
        self.now = 0.0
        self.requests: list[SimRequest] = []
        self.arrival: list[float] = []
        self.records: list[StepRecord] = []
        self.runs: list = []                  # stretches of pure decode steps (DecodeRun)
        self.starts: dict[int, float] = {}
        self.ends: dict[int, float] = {}
        self.open: list[list] = []            # [record, first tokens heard, finishes heard]
        self.idle_calls = 0
        self.timed: list = []                 # the engine's TimedSteps (run_until)


def _per_instance(value, n: int, what: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise ValueError(f"{what}: one per instance ({n}), got {len(values)}")
    return values


def simulate_fleet(requests: Sequence[SimRequest], config: SchedulerConfig | Sequence,
                   router: Router, step_ms: StepMs | Sequence[StepMs], *,
                   cpu_tiers: Sequence | None = None, staleness_ms: float = 0.0,
                   decode_run_ms: RunMs | Sequence[RunMs | None] | None = None,
                   keys: tuple[np.ndarray, np.ndarray] | None = None,
                   engine: type | None = None) -> FleetResult:
    """Route ``requests`` (numbered 0..n-1, arrivals ``arrival_s`` non-decreasing) over
    ``router.num_instances`` engines (``config`` and ``step_ms``: one, or one per
    instance; ``cpu_tiers``: one CPU-tier object per instance, or None).

    ``decode_run_ms(num_running, context_base, count)`` (a step-time model's, equal to
    ``step_ms`` of each pure decode step): an instance then runs a stretch of pure decode
    steps at once, up to the next arrival (and the stale view's next refresh); the same
    result as step by step, faster. ``keys``: ``hashing.flat_request_keys(requests,
    block_size)`` if computed already (a sweep computes them once per workload).
    ``engine``: a registered engine class (``pipeline.engine.engines``; None: vLLM's
    ``EngineSim``), whose ``instance(config, cpu_tier)`` each instance is."""
    n_inst = router.num_instances
    configs = _per_instance(config, n_inst, "config")
    models = _per_instance(step_ms, n_inst, "step_ms")
    run_models = _per_instance(decode_run_ms, n_inst, "decode_run_ms")
    tiers = list(cpu_tiers) if cpu_tiers is not None else [None] * n_inst
    if len(tiers) != n_inst:
        raise ValueError(f"cpu_tiers: one per instance ({n_inst}), got {len(tiers)}")
    if len({c.block_size for c in configs}) != 1:
        raise ValueError("every instance needs the same block size (the router hashes once)")
    if any(r.index != i for i, r in enumerate(requests)):
        raise ValueError("requests must be numbered 0..n-1 in input order")
    due = np.array([(r.arrival_s or 0.0) * 1000.0 for r in requests], dtype=np.float64)
    if due.size and np.any(np.diff(due) < 0):
        raise ValueError("arrivals must be non-decreasing in input order")
    make = EngineSim if engine is None else engine.instance
    fleet = [_Instance(i, make(configs[i], tiers[i]), models[i], run_models[i])
             for i in range(n_inst)]
    view = FleetView([inst.engine for inst in fleet], staleness_ms)
    heard: list = []                          # (time, order, kind, instance, request)
    routed: dict[int, RouteRequest] = {}
    placement = np.zeros(len(requests), dtype=np.int64)
    decisions: list[str] = [""] * len(requests)
    pointer = 0
    block_size = configs[0].block_size
    flat, counts = keys if keys is not None else flat_request_keys(requests, block_size)
    offsets = (np.cumsum(counts) - counts).tolist()       # each request hashed once
    counts = counts.tolist()
    as_list = getattr(router, "LIST_HASHES", True)

    def hear(until: float) -> None:
        while heard and heard[0][0] <= until:
            _, _, kind, instance, index = heapq.heappop(heard)
            if kind == 0:
                router.on_first_token(instance, routed[index])
            else:                             # its last event: forget it
                router.on_finish(instance, routed.pop(index))
                view.outstanding[instance] -= 1

    order = itertools.count()
    shared = tiers[0] is not None and any(                 # one pool, or one remote store
        t is tiers[0] or getattr(t, "remote_of", None) is tiers[0] for t in tiers[1:])
    compiled = engine is None or getattr(engine, "COMPILED", False)
    if compiled and getattr(router, "OBLIVIOUS", False) and not shared and \
            all(compiled_model(inst.step_ms) is not None for inst in fleet):
        return _independent(requests, fleet, router, view, due, flat, counts, offsets,
                            block_size, as_list)
    arrivals = due.tolist()
    while True:
        t_arrival = arrivals[pointer] if pointer < len(requests) else np.inf
        bound = t_arrival
        if view.stale and any(inst.engine.has_work() for inst in fleet):
            bound = min(bound, view.next_refresh)
        _advance_all(fleet, bound, shared, heard, order, view)
        if bound == np.inf:
            break
        now = float(bound)
        hear(now)
        view.advance(now, t_arrival)
        if t_arrival > now:                       # a stale view's refresh only
            continue
        sim = requests[pointer]
        prompt = len(sim.prompt_token_ids)
        start = offsets[pointer]
        own = flat[start:start + counts[pointer]]
        head = own[:prompt // block_size]
        request = RouteRequest(sim.index, head.tolist() if as_list else head, prompt, now,
                               sim.session)
        view.request_keys(request.hashes, head)
        choice, decision = router.route(request, view)
        if not 0 <= choice < n_inst:
            raise RuntimeError(f"router {router.NAME} chose instance {choice}")
        inst = fleet[choice]
        if not inst.engine.has_work():
            inst.now = max(inst.now, now)
        inst.engine.add_request(sim, own)
        view.changed(choice)
        inst.requests.append(sim)
        inst.arrival.append(now)
        routed[sim.index] = request
        placement[sim.index], decisions[sim.index] = choice, decision
        view.outstanding[choice] += 1
        pointer += 1
    return _fleet_frames(fleet, placement, decisions)


def _advance_all(fleet: list[_Instance], bound: float, shared: bool, heard: list,
                 order, view: FleetView) -> None:
    """Run every instance's batches that start before ``bound``. Instances share nothing
    between arrivals but a shared CPU pool, so each runs alone up to the bound; with a
    shared pool the batches go in time order (ties: lower instance), as the pool sees
    them."""
    if not shared:                            # run_until: no work, or the bound reached
        for inst in fleet:
            if inst.now < bound and inst.engine.has_work():
                _run(inst, bound, heard, order)
                view.changed(inst.index)
        return
    while True:
        nxt, t_step = None, bound
        for inst in fleet:                    # the earliest busy instance, lowest index
            if inst.now < t_step and inst.engine.has_work():
                nxt, t_step = inst, inst.now
        if nxt is None:
            return
        _step(nxt, bound, heard, order)
        view.changed(nxt.index)


def _run(inst: _Instance, bound: float, heard: list, order) -> None:
    """Every batch of ``inst`` that starts before ``bound``, in one engine call
    (``EngineSim.run_until``: the same batches, clock and outputs as ``_step`` one by
    one); the first tokens and finishes it processed go to ``heard``."""
    try:
        timed = inst.engine.run_until(bound, inst.now, inst.step_ms)
    except RuntimeError:
        raise RuntimeError(f"instance {inst.index} schedules nothing while requests wait "
                           "(a request that can never fit)") from None
    inst.now = timed.now_ms
    steps = timed.steps[:, 0]
    if len(steps):
        inst.timed.append(timed)
    if len(timed.events):
        ends = timed.start_ms + timed.duration_ms
        found = np.searchsorted(steps, timed.events[:, 0]).tolist()
        number, count = inst.index, len(steps)
        for (step, kind, index), at in zip(timed.events.tolist(), found):
            # a batch of this call, else (async) one of an earlier call still in flight
            when = float(ends[at]) if at < count and steps[at] == step else \
                _end_of(inst, step)
            heapq.heappush(heard, (when, next(order), kind, number, index))


def _end_of(inst: _Instance, step: int) -> float:
    """The end of an earlier batch ``step`` of ``inst`` (any run_until call)."""
    for timed in reversed(inst.timed):
        at = int(np.searchsorted(timed.steps[:, 0], step))
        if at < len(timed.steps) and timed.steps[at, 0] == step:
            return float(timed.start_ms[at] + timed.duration_ms[at])
    raise KeyError(step)


class _StepTimes:
    """step -> ms over sorted step numbers (what ``request_frame`` reads of a dict)."""

    def __init__(self, steps: np.ndarray, times: np.ndarray) -> None:
        self.steps, self.times = steps, times

    def __getitem__(self, step: int) -> float:
        at = int(np.searchsorted(self.steps, step))
        if at == len(self.steps) or self.steps[at] != step:
            raise KeyError(step)
        return float(self.times[at])


def _extra(engine) -> tuple[str, ...]:
    """The engine's step columns after ``STEP_COLUMNS`` (``EngineSim.extra_names``)."""
    return getattr(engine, "extra_names", ())


def _timed_frame(inst: _Instance) -> pl.DataFrame:
    """The batches ``_run`` executed, as ``step_frame`` frames them."""
    steps = np.concatenate([t.steps for t in inst.timed])
    names = STEP_COLUMNS + _extra(inst.engine)
    frame = pl.DataFrame({name: steps[:, j] for j, name in enumerate(names)})
    return frame.with_columns(
        start_ms=pl.Series(np.concatenate([t.start_ms for t in inst.timed])),
        duration_ms=pl.Series(np.concatenate([t.duration_ms for t in inst.timed])))


def _step(inst: _Instance, bound: float, heard: list, order) -> None:
    """One batch of ``inst`` (or a stretch of pure decode batches that start before
    ``bound``); the first tokens and finishes it processed go to ``heard`` at its end."""
    run = None
    if inst.run_ms is not None:               # pure decode steps before the next event
        run = timed_run(inst.engine, inst.run_ms, inst.now,
                        None if bound == np.inf else float(bound))
    if run is not None:
        run, durations = run
        run.durations = durations
        inst.runs.append(run)
        clock = np.cumsum([inst.now, *durations]).tolist()   # sequential: now += d
        steps = range(run.first_step, run.first_step + len(durations))
        inst.starts.update(zip(steps, clock[:-1]))
        inst.ends.update(zip(steps, clock[1:]))
        inst.now = clock[-1]
        inst.idle_calls = 0
        if run.tail is not None:              # async: the batch still in flight
            inst.open.append([run.tail, 0, 0])
    elif (record := inst.engine.step()) is None:
        inst.idle_calls += 1
        if inst.idle_calls > _STUCK_CALLS:
            raise RuntimeError(f"instance {inst.index} schedules nothing while requests "
                               "wait (a request that can never fit)")
    else:
        inst.idle_calls = 0
        inst.records.append(record)
        inst.starts[record.step] = inst.now
        duration = inst.step_ms(record)
        if record.load_ms >= 0.0:             # a tier stack's loads replace the reload term
            model = inst.priced or (MODEL_NONE, ())
            duration += record.load_ms - reload_term(*model, record.reload_tokens)
        record.duration_ms = float(duration)
        inst.now += record.duration_ms
        inst.ends[record.step] = inst.now
        inst.open.append([record, 0, 0])
    for entry in inst.open:                   # outputs processed by this call
        rec, firsts, finishes = entry
        when = inst.ends[rec.step]
        for index in rec.first_tokens[firsts:]:
            heapq.heappush(heard, (when, next(order), 0, inst.index, index))
        for index in rec.finished[finishes:]:
            heapq.heappush(heard, (when, next(order), 1, inst.index, index))
        entry[1], entry[2] = len(rec.first_tokens), len(rec.finished)
    inst.open = inst.open[-3:]


def _independent(requests: Sequence[SimRequest], fleet: list[_Instance], router: Router,
                 view: FleetView, due: np.ndarray, flat: np.ndarray, counts: list[int],
                 offsets: list[int], block_size: int, as_list: bool) -> FleetResult:
    """An oblivious router's fleet: every request routed first (the router reads neither
    the view nor any request's progress, so the order of events cannot change a
    decision), then each instance run alone over its requests in one compiled loop, as
    ``simulate`` runs one engine (the same batches, clock and outputs as the event loop,
    where instances share nothing but the router)."""
    n = len(requests)
    placement = np.zeros(n, dtype=np.int64)
    decisions: list[str] = [""] * n
    arrivals = due.tolist()
    for i, sim in enumerate(requests):
        head = flat[offsets[i]:offsets[i] + len(sim.prompt_token_ids) // block_size]
        request = RouteRequest(sim.index, head.tolist() if as_list else head,
                               len(sim.prompt_token_ids), arrivals[i], sim.session)
        choice, decisions[i] = router.route(request, view)
        if not 0 <= choice < len(fleet):
            raise RuntimeError(f"router {router.NAME} chose instance {choice}")
        placement[i] = choice
    per_block = np.repeat(placement, counts)
    parts = []
    for inst in fleet:
        mine = np.flatnonzero(placement == inst.index)
        if not mine.size:
            parts.append((None, step_frame([], [], True, {}, {}, _extra(inst.engine))))
            continue
        inst.engine.load([requests[i] for i in mine.tolist()], flat[per_block == inst.index],
                         np.asarray(counts)[mine])
        model = compiled_model(inst.step_ms)
        parts.append(compiled_run(inst.engine, due[mine], True, None, model))
    return _assemble(parts, decisions)


def _fleet_frames(fleet: list[_Instance], placement: np.ndarray,
                  decisions: list[str]) -> FleetResult:
    parts = []
    for inst in fleet:
        starts, ends = inst.starts, inst.ends
        if inst.timed:                        # run_until's batches, in step order
            numbers = np.concatenate([t.steps[:, 0] for t in inst.timed])
            begin = np.concatenate([t.start_ms for t in inst.timed])
            finish = np.concatenate([t.start_ms + t.duration_ms for t in inst.timed])
            starts, ends = _StepTimes(numbers, begin), _StepTimes(numbers, finish)
        frame = (request_frame(inst.engine, inst.requests, np.array(inst.arrival), True,
                               starts, ends) if inst.requests else None)
        parts.append((frame, _timed_frame(inst) if inst.timed else
                      step_frame(inst.records, inst.runs, True, inst.starts, inst.ends,
                                 _extra(inst.engine))))
    return _assemble(parts, decisions)


def _assemble(parts: list[tuple[pl.DataFrame | None, pl.DataFrame]],
              decisions: list[str]) -> FleetResult:
    """Per instance (its request frame or None, its step frame) -> the fleet's frames."""
    frames, steps = [], []
    for index, (frame, batches) in enumerate(parts):
        if frame is not None:
            frames.append(frame.with_columns(instance=pl.lit(index, pl.Int64)))
        steps.append(batches.with_columns(instance=pl.lit(index, pl.Int64)))
    requests = (pl.concat(frames).sort("request") if frames else pl.DataFrame())
    if frames:
        requests = requests.with_columns(
            decision=pl.Series([decisions[i] for i in requests["request"].to_list()],
                               dtype=pl.String))
        requests = requests.select("request", "instance", "decision",
                                   pl.exclude("request", "instance", "decision"))
    steps_frame = pl.concat(steps).select("instance", pl.exclude("instance"))
    return FleetResult(requests, steps_frame)
