"""A disaggregated fleet: P prefill engines, D decode engines, and the KV moved between
them (``fleet --prefill-instances P --decode-instances D --kv-transfer GB/s[:MS]``).

As llm-d and vLLM's P/D connectors run it: a prefill engine runs the request with
``max_tokens`` 1 (its prompt and first token, chunked prefill and prefix cache as any vLLM
engine); the prompt's KV then moves over the prefill instance's link to a decode engine,
one transfer at a time per link in the order the prefills finish (time = bytes / GB/s +
latency); the decode engine admits the request with every prompt token but the last
already computed (vLLM's decode side loads them through its connector and recomputes the
last one to sample), and decodes. TTFT is the prefill side's first token (what llm-d and
Dynamo return to the client first); TPOT the decode side's: (finish - its first token) /
(output tokens - 1).

Bytes moved are the blocks the decode engine lacks: vLLM 0.33.0's NIXL connector
(``nixl/pull_scheduler.py``, ``get_num_new_matched_tokens``) loads the prompt beyond the
decode side's local prefix hit, and its worker reads only the blocks allocated past that
hit (``update_state_after_alloc``: ``get_unhashed_block_ids_all_groups``;
``nixl/base_worker.py`` ``_apply_prefix_caching`` end-trims the prefill side's list). So
bytes = (the prompt's blocks, a partial last one included, - the decode side's hit in
blocks at admission) x block size x KV bytes per token. That hit is known only once the
decode side has run, and it decides when the request arrives there: the decode side is run
again with the transfers its hits give until the hits reproduce (``MAX_PASSES``); a request
whose transfer still differs from its hit then is ``kv_settled`` False. A P/D decider
(``pipeline.fleet.deciders``) that reads the decode side's hits decides again the same way.

The prefill side may keep a CPU tier (LMCache's CPU backend or stack, or vLLM's native
offloading; ``Side.cpu_tiers``): vLLM runs it beside the P/D connector in its
``MultiConnector`` (vLLM 0.33.0 ``kv_connector/v1/multi_connector.py``: a request loads from
the first connector that reports tokens, and saves to every one). On the prefill side NIXL
reports none for a request it will hand to a decode engine (``get_num_new_matched_tokens``
counts tokens only for ``do_remote_prefill``, or with the decode side's block ids, which
the proxies of llm-d and vLLM do not send), so the tier's hit is what loads, and the tier
stores the prompt as it does in an aggregated engine: the prefill engines are the
aggregated engine with its tier, run with ``max_tokens`` 1. The decode side takes no tier.

The two sides run one after the other (``simulate_fleet`` each, with its own router): a
prefill engine does not wait for the decode side, which holds in this model because the
prefill side's blocks are freed when its request finishes (vLLM's P side keeps them until
the decode side has read them: a pool under pressure would admit later than here).
"""

from __future__ import annotations

import argparse
import copy
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from pipeline.base.fitted_step_time import TERMS
from pipeline.base.step_vectors import Rates
from pipeline.components.engine_layout import INDEX, NPROMPT, PREEMPT, T_CAPACITY, T_CHUNK, \
    T_HANDLE, T_ON, T_PER
from pipeline.components.kgeneric import register
from pipeline.components.ktier import no_tier
from pipeline.engine.request import SimRequest
from pipeline.fleet.deciders import Decider, make_decider
from pipeline.fleet.loop import FleetResult, simulate_fleet
from pipeline.fleet.routers.base import Router

__all__ = ["Link", "parse_link", "RemotePrefill", "WithoutReload", "Side",
           "simulate_disaggregated", "kv_bytes", "MAX_PASSES"]

#: decode-side runs at most, to settle the bytes moved against the decode side's hits
MAX_PASSES = 3

_LINK = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(GB/s|GBps|Gb/s|Gbps)\s*"
                   r"(?::\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(ms|us|s))?\s*$", re.I)


@dataclass(frozen=True)
class Link:
    """One prefill instance's link to the decode side: GB/s (10^9 bytes/s; ``inf``: no
    transfer time) and a latency per transfer."""

    gbps: float
    latency_ms: float = 0.0

    def ms(self, nbytes: float) -> float:
        """Milliseconds to move ``nbytes``."""
        seconds = 0.0 if math.isinf(self.gbps) else nbytes / (self.gbps * 1e9)
        return seconds * 1e3 + self.latency_ms

    def describe(self) -> str:
        return f"{self.gbps:g} GB/s + {self.latency_ms:g} ms per transfer"


def parse_link(text: str) -> Link:
    """argparse type: ``25GB/s``, ``200Gb/s:0.5ms`` (bytes or bits per second, a latency in
    ms, us or s); a bandwidth without its unit is refused."""
    found = _LINK.match(text)
    if not found:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a bandwidth with its unit and an optional latency, as "
            f"25GB/s, 200Gb/s or 25GB/s:0.5ms")
    value, unit, latency, lunit = found.groups()
    gbps = float(value) / (8.0 if unit[1] == "b" else 1.0)     # Gb/s: bits
    if gbps <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the bandwidth must be > 0")
    ms = 0.0 if latency is None else float(latency) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[
        lunit.lower()]
    return Link(gbps, ms)


class RemotePrefill:
    """The decode engine's KV connector as its CPU-tier call points: at admission every
    prompt token but the last of a remotely prefilled request is there to load (counted
    from the request's first token, as ``pipeline.components.kgeneric`` asks); a request
    prefilled here (``remote[index]`` False) loads nothing, nor one preempted after its
    load (vLLM's connector loads once: ``update_state_after_alloc`` clears
    ``do_remote_prefill``, so a preempted request recomputes); nothing is stored."""

    def __init__(self, remote: np.ndarray | None = None) -> None:
        self.remote = remote
        self.arrays = no_tier()
        self.arrays[0][[T_ON, T_CAPACITY, T_CHUNK, T_PER, T_HANDLE]] = \
            1, 1 << 62, 1, 1, register(self)

    def lookup(self, R: np.ndarray, KEYS: np.ndarray, slot: int, local: int) -> int:
        if self.remote is not None and not self.remote[int(R[slot, INDEX])]:
            return 0
        if R[slot, PREEMPT] > 0:
            return 0
        return int(R[slot, NPROMPT]) - 1

    def store(self, R: np.ndarray, KEYS: np.ndarray, slot: int) -> None:
        return None


class _NoReload:
    """A batch record that reads ``reload_tokens`` as 0."""

    __slots__ = ("_record",)

    def __init__(self, record: Any) -> None:
        self._record = record

    reload_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._record, name)


class WithoutReload:
    """A step-time model whose batches load nothing: the decode side's KV arrived over the
    P/D link before the request was admitted, so its connector's loads cost no step time."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.label = getattr(model, "label", "")
        self.provenance = getattr(model, "provenance", "")

    def step_ms(self, record: Any) -> float:
        return float(self.model.step_ms(_NoReload(record)))

    def kernel_coefficients(self) -> tuple[str, tuple[float, ...]]:
        kind, values = self.model.kernel_coefficients()
        values = list(values)
        if kind == "roofline":
            values[Rates._fields.index("per_reload")] = 0.0
        else:
            values[[quantity for _, quantity in TERMS].index("reload_tokens")] = 0.0
        return kind, tuple(values)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


@dataclass(frozen=True)
class Side:
    """One side of the fleet: its scheduler config, router, step-time model and engine;
    ``cpu_tiers`` (the prefill side's): fresh CPU tiers, one per engine, for each run
    (None: no tier)."""

    config: Any
    router: Router
    step_model: Any
    engine: type | None = None
    cpu_tiers: Callable[[], Sequence] | None = None


def kv_bytes(prompt_tokens: np.ndarray, block_size: int, kv_bytes_per_token: int,
             cached_tokens: np.ndarray | int = 0) -> np.ndarray:
    """Bytes moved per request: the prompt's blocks (a partial last one included) beyond
    the decode side's ``cached_tokens`` (its prefix hit, whole blocks)."""
    blocks = (-(-np.asarray(prompt_tokens, np.int64) // block_size)
              - np.asarray(cached_tokens, np.int64) // block_size)
    return blocks * block_size * kv_bytes_per_token


def _transfers(done_ms: np.ndarray, link_of: np.ndarray, nbytes: np.ndarray,
               remote: np.ndarray, link: Link) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each ``remote`` request's transfer (NaN elsewhere): per link one at
    a time, in the order the prefills finish (ties: lower request first)."""
    start, end = np.full(done_ms.size, np.nan), np.full(done_ms.size, np.nan)
    free: dict[int, float] = {}
    at = np.flatnonzero(remote)
    for i in at[np.lexsort((at, done_ms[at]))].tolist():
        begin = max(float(done_ms[i]), free.get(int(link_of[i]), 0.0))
        start[i], end[i] = begin, begin + link.ms(float(nbytes[i]))
        free[int(link_of[i])] = float(end[i])
    return start, end


def simulate_disaggregated(requests: Sequence[SimRequest], prefill: Side, decode: Side,
                           link: Link, kv_bytes_per_token: int,
                           max_local_prefill_length: int | None = None,
                           decider: Decider | None = None) -> FleetResult:
    """Every request through a prefill engine, the link and a decode engine (see the module
    docstring); ``requests`` numbered 0..n-1 with non-decreasing ``arrival_s``. The request
    rows carry ``instance`` (the prefill engine), ``decode_instance``, the prefill side's
    columns (its TTFT), ``kv_bytes``, ``kv_settled``, ``transfer_start_ms`` /
    ``transfer_end_ms``, the decode side's ``decode_first_token_ms`` and ``finish_ms``,
    ``tpot_ms``; the steps carry ``side`` (prefill or decode) and are the last run's.
    ``decider`` (``pipeline.fleet.deciders``; default ``make_decider``'s: every prompt,
    or Dynamo's ``max_local_prefill_length``) decides which requests skip the prefill side
    and are prefilled by their decode engine (``remote_prefill`` False, ``instance`` -1;
    TTFT then the decode side's); one deciding on the decode side's hits decides again
    with each run's, as the bytes are settled."""
    n = len(requests)
    prompts = np.array([len(r.prompt_token_ids) for r in requests], np.int64)
    arrival = np.array([(r.arrival_s or 0.0) * 1e3 for r in requests])
    block_size = (prefill.config[0] if isinstance(prefill.config, Sequence)
                  else prefill.config).block_size
    decider = make_decider(decider, max_local_prefill_length)

    def wanted(hits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        remote = decider.remote(prompts, hits)
        return remote, np.where(remote, kv_bytes(prompts, block_size, kv_bytes_per_token,
                                                 hits), 0)

    remote, nbytes = wanted(np.zeros(n, np.int64))       # no decode-side hit known yet
    ran = None
    for passes in range(1, MAX_PASSES + 1):
        if ran is None or not np.array_equal(ran[0], remote):
            ran = (remote, *_prefill_side(requests, prefill, remote))
        _, p, pre, done, links = ran
        start, end = _transfers(done, links, nbytes, remote, link)
        d, dec = _decode_side(requests, decode, remote, np.where(remote, end, arrival))
        again, moved = wanted(dec["decode_gpu_hit_tokens"].to_numpy())
        settled = (again == remote) & (moved == nbytes)
        if settled.all() or passes == MAX_PASSES:
            break
        if np.array_equal(again, remote):
            start2, end2 = _transfers(done, links, moved, remote, link)
            if np.array_equal(end2[remote], end[remote]):   # the same arrivals: the same run
                nbytes, start, settled[:] = moved, start2, True
                break
        remote, nbytes = again, moved
    out = _rows(requests, remote, dec, pre).with_columns(
        kv_bytes=pl.Series(nbytes), kv_settled=pl.Series(settled),
        transfer_start_ms=pl.Series(start).fill_nan(None),
        transfer_end_ms=pl.Series(end).fill_nan(None))
    steps = [d.steps.with_columns(side=pl.lit("decode"))]
    if p is not None:
        steps.insert(0, p.steps.with_columns(side=pl.lit("prefill")))
    steps = pl.concat(steps, how="diagonal_relaxed")
    return FleetResult(out, steps.select("side", pl.exclude("side")))


def _prefill_side(requests: Sequence[SimRequest], prefill: Side, remote: np.ndarray
                  ) -> tuple[FleetResult | None, pl.DataFrame | None, np.ndarray, np.ndarray]:
    """The prefill engines' run of the ``remote`` requests cut to their first token: the
    run, its rows (``request`` the input index), and per request (input order) when its
    prefill finished (ms; NaN where local) and on which instance (-1)."""
    n = len(requests)
    done, links = np.full(n, np.nan), np.full(n, -1, np.int64)
    remote_at = np.flatnonzero(remote)
    if not remote_at.size:
        return None, None, done, links
    first = [replace(requests[int(i)], index=k, max_tokens=1,
                     output_token_ids=None if requests[int(i)].output_token_ids is None
                     else list(requests[int(i)].output_token_ids[:1]))
             for k, i in enumerate(remote_at.tolist())]
    p = simulate_fleet(first, prefill.config, copy.deepcopy(prefill.router),
                       prefill.step_model.step_ms,
                       cpu_tiers=None if prefill.cpu_tiers is None else prefill.cpu_tiers(),
                       decode_run_ms=getattr(prefill.step_model, "decode_run_ms", None),
                       engine=prefill.engine)
    pre = p.requests.sort("request").with_columns(request=pl.Series(remote_at, dtype=pl.Int64))
    done[remote_at], links[remote_at] = pre["finish_ms"].to_numpy(), pre["instance"].to_numpy()
    return p, pre, done, links


def _decode_side(requests: Sequence[SimRequest], decode: Side, remote: np.ndarray,
                 ready: np.ndarray) -> tuple[FleetResult, pl.DataFrame]:
    """The decode engines' run, each request arriving at ``ready`` (ms), behind a fresh
    copy of the decode router: the run and its request rows in input order (``request``
    the input index)."""
    order = np.lexsort((np.arange(len(requests)), ready))   # decode arrivals in time order
    moved = [replace(requests[int(i)], index=k, arrival_s=float(ready[i]) / 1e3)
             for k, i in enumerate(order.tolist())]
    model = WithoutReload(decode.step_model)
    router = copy.deepcopy(decode.router)
    d = simulate_fleet(moved, decode.config, router, model.step_ms,
                       cpu_tiers=[RemotePrefill(remote[order])
                                  for _ in range(router.num_instances)],
                       decode_run_ms=getattr(decode.step_model, "decode_run_ms", None),
                       engine=decode.engine)
    dec = d.requests.with_columns(request=pl.Series(order, dtype=pl.Int64)).sort("request")
    return d, dec.rename({"gpu_hit_tokens": "decode_gpu_hit_tokens"})


def _rows(requests: Sequence[SimRequest], remote: np.ndarray, dec: pl.DataFrame,
          pre: pl.DataFrame | None) -> pl.DataFrame:
    """Per request (input order): the prefill side's columns where it prefilled there, else
    the decode side's; the decode side's ``decode_*`` figures, finish and TPOT."""
    arrival = pl.Series([(r.arrival_s or 0.0) * 1e3 for r in requests])
    decode_side = dec.select(
        "request", "decode_gpu_hit_tokens", decode_instance="instance",
        decode_first_token_ms="first_token_ms", decode_finish_ms="finish_ms",
        decode_preemptions="preemptions")
    # the prefill side's rows, or (prefilled locally) the decode side's own, the instance
    # then -1: no prefill engine
    local = dec.filter(~pl.Series(remote)).rename(
        {"decode_gpu_hit_tokens": "gpu_hit_tokens"}).with_columns(
        instance=pl.lit(-1, pl.Int64))
    parts = [local] if pre is None else [pre, local]
    first = (pl.concat(parts, how="diagonal_relaxed").sort("request")
             .drop("finish_ms", "e2e_ms", "arrival_ms", "ttft_ms", "queue_ms"))
    return (first.join(decode_side, on="request").with_columns(
        arrival_ms=arrival, remote_prefill=pl.Series(remote),
        output_tokens=pl.Series([r.max_tokens for r in requests], dtype=pl.Int64),
        finish_ms=pl.col("decode_finish_ms"))
        .with_columns(ttft_ms=pl.col("first_token_ms") - pl.col("arrival_ms"),
                      queue_ms=pl.col("first_scheduled_ms") - pl.col("arrival_ms"),
                      e2e_ms=pl.col("finish_ms") - pl.col("arrival_ms"),
                      prefill_finish_ms=pl.when(pl.col("remote_prefill"))
                      .then(pl.col("first_token_ms")),
                      tpot_ms=pl.when(pl.col("output_tokens") > 1).then(
                          (pl.col("decode_finish_ms") - pl.col("decode_first_token_ms"))
                          / (pl.col("output_tokens") - 1)))
        .drop("decode_finish_ms"))
