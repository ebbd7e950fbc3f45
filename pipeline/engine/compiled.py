"""A whole ``simulate`` run in compiled code (``krun.run_loop``) and its frames.

The step-time models that are formulas of a step's totals offer ``kernel_coefficients()``
(``pipeline.steptime``'s fitted ``Linear`` and ``Roofline``): ``("linear", (fixed,
prefill, context, decode, reload, pair))`` or ``("roofline", (overhead, per token, per
sample, per pair, weights, per context token, per reload token))``; the kernel prices each
batch with the same arithmetic in the same order, so the times are equal bit for bit.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pipeline.components import engine_layout as L
from pipeline.components.kstack import STEP_BYTES_COLUMNS, is_stack
from pipeline.engine.krun import DONE, FULL, MODEL_LINEAR, MODEL_NONE, MODEL_ROOFLINE, run_loop

__all__ = ["compiled_model", "compiled_run", "request_table", "with_tier_columns", "with_times",
           "extra_step_names", "load_columns", "MODEL_NONE", "STUCK_MESSAGE"]

STUCK_MESSAGE = "the engine schedules nothing while requests wait (a request that can never fit)"
_KINDS = {"linear": MODEL_LINEAR, "roofline": MODEL_ROOFLINE}
_STEP_NAMES = ("step", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
               "num_running", "num_waiting", "free_blocks")


def _defining_class(cls: type, name: str) -> type | None:
    return next((c for c in cls.__mro__ if name in c.__dict__), None)


def compiled_model(step_ms) -> tuple[int, np.ndarray] | None:
    """(kind, coefficients) when ``step_ms`` is the ``step_ms`` of a model that offers
    ``kernel_coefficients`` (defined beside it, so a subclass's own ``step_ms`` is not
    mistaken for it); None otherwise."""
    owner = getattr(step_ms, "__self__", None)
    func = getattr(step_ms, "__func__", None)
    if owner is None or func is None or not hasattr(owner, "kernel_coefficients"):
        return None
    cls = type(owner)
    home = _defining_class(cls, "step_ms")
    if home is None or home.__dict__["step_ms"] is not func \
            or _defining_class(cls, "kernel_coefficients") is not home:
        return None
    kind, values = owner.kernel_coefficients()
    return _KINDS[kind], np.asarray(values, np.float64)


def compiled_run(engine, due: np.ndarray, timed: bool, concurrency: int | None,
                 model: tuple[int, np.ndarray]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Run the requests loaded in ``engine`` (rows 0..n-1, none queued) to the end in one
    compiled loop; (requests frame, steps frame) as ``simulate`` returns them."""
    n = due.size
    arrival = np.zeros(n, np.float64)
    rows = max(1024, 4 * n)
    native = engine.native is not None
    if native and timed:
        engine.native.price_with(model)
    names = _STEP_NAMES + extra_step_names(engine.T, native)
    steps = np.zeros((rows, len(names)), np.int64)
    durations = np.zeros((rows if timed else 1, 2), np.float64)
    state = np.zeros(3, np.int64)
    now = np.zeros(1, np.float64)
    engine.G[L.G_EVON] = 0
    while True:
        code = run_loop(engine.S, engine.T, engine.O, due, arrival, timed, concurrency or 0,
                        model[0], model[1], steps, durations, state, now)
        if code == DONE:
            break
        if code != FULL:
            engine.G[L.G_EVON] = 1
            engine.check_state()
            raise RuntimeError(STUCK_MESSAGE)
        steps = np.concatenate((steps, np.zeros_like(steps)))
        if timed:
            durations = np.concatenate((durations, np.zeros_like(durations)))
    engine.G[L.G_EVON] = 1
    count = int(state[2])
    table = engine.R[:n]
    frame = with_tier_columns(request_table(table, arrival, timed), table, engine.T)
    step_columns = {name: steps[:count, j] for j, name in enumerate(names)}
    step_frame = pl.DataFrame(step_columns)
    if native:
        frame = load_columns(frame, engine, np.arange(n), timed)
    if not timed:
        return frame, step_frame
    start, duration = durations[:count, 0], durations[:count, 1]
    end = start + duration
    frame = with_times(frame, arrival, start[table[:, L.FSCHED]], end[table[:, L.FTOK]],
                       end[table[:, L.FIN]])
    return frame, step_frame.with_columns(start_ms=pl.Series(start),
                                          duration_ms=pl.Series(duration))


def extra_step_names(T: tuple, native: bool) -> tuple[str, ...]:
    """The step columns after the engine's 8 (``krun.STEP_FIELDS``): a tier stack's bytes
    loaded per tier, the native offload's bytes loaded and stored, or none."""
    if is_stack(T):
        return STEP_BYTES_COLUMNS
    return ("cpu_load_bytes", "cpu_store_bytes") if native else ()


def load_columns(frame: pl.DataFrame, engine, slots: np.ndarray, timed: bool) -> pl.DataFrame:
    """The native offload's load columns of the requests in engine rows ``slots``: the step
    that admitted the first load and the step whose output reported it done; on the time
    clock its link start and end (s) and ``load_ms`` (submission to end: queueing on the
    link included); null without a load."""
    RX, RF = engine.native.RX[slots], engine.native.RF[slots]
    none = RX[:, L.X_LSTEP] == L.NONE

    def optional(values, dtype):
        return pl.Series(values, dtype=dtype).set(pl.Series(none), None)
    frame = frame.with_columns(load_step=optional(RX[:, L.X_LSTEP], pl.Int64),
                               load_done_step=optional(RX[:, L.X_LDONE], pl.Int64))
    if timed:
        frame = frame.with_columns(
            load_ms=optional(RF[:, L.RF_END] - RF[:, L.RF_SUBMIT], pl.Float64),
            load_start_s=optional(RF[:, L.RF_START] / 1000.0, pl.Float64),
            load_end_s=optional(RF[:, L.RF_END] / 1000.0, pl.Float64))
    return frame


def request_table(rows: np.ndarray, arrival: np.ndarray, timed: bool) -> pl.DataFrame:
    """``REQUEST_COLUMNS`` of the request-table rows (unset steps null)."""
    def optional(column: int) -> pl.Series:
        values = rows[:, column]
        return pl.Series(values).set(pl.Series(values == L.NONE), None) \
            if (values == L.NONE).any() else pl.Series(values)
    columns = {"request": rows[:, L.INDEX]}
    if not timed:
        columns["arrival_step"] = arrival.astype(np.int64)
    columns.update(first_scheduled_step=optional(L.FSCHED), first_token_step=optional(L.FTOK),
                   finish_step=optional(L.FIN), gpu_hit_tokens=rows[:, L.GPUHIT],
                   cpu_hit_tokens=rows[:, L.CPUHIT], prompt_tokens=rows[:, L.NPROMPT],
                   output_tokens=rows[:, L.NTOK] - rows[:, L.NPROMPT],
                   preemptions=rows[:, L.PREEMPT])
    return pl.DataFrame(columns, schema_overrides={k: pl.Int64 for k in columns})


def with_tier_columns(frame: pl.DataFrame, rows: np.ndarray, T: tuple) -> pl.DataFrame:
    """A tier stack's request columns (``pipeline.components.kstack``): the tokens loaded
    from disk and from the remote store (part of ``cpu_hit_tokens``, every token loaded
    through LMCache) and the request's load time; none for any other tier."""
    if not is_stack(T):
        return frame
    return frame.with_columns(disk_hit_tokens=pl.Series(rows[:, L.DISKHIT]),
                              remote_hit_tokens=pl.Series(rows[:, L.REMOTEHIT]),
                              load_ms=pl.Series(rows[:, L.LOADNS] / 1e6))


def with_times(frame: pl.DataFrame, arrival: np.ndarray, first_scheduled: np.ndarray,
               first_token: np.ndarray, finish: np.ndarray) -> pl.DataFrame:
    """The time clock's request columns."""
    frame = frame.with_columns(arrival_ms=pl.Series(arrival),
                               first_scheduled_ms=pl.Series(first_scheduled),
                               first_token_ms=pl.Series(first_token),
                               finish_ms=pl.Series(finish))
    return frame.with_columns(ttft_ms=pl.col("first_token_ms") - pl.col("arrival_ms"),
                              queue_ms=pl.col("first_scheduled_ms") - pl.col("arrival_ms"),
                              e2e_ms=pl.col("finish_ms") - pl.col("arrival_ms"))
