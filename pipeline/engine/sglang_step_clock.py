"""The SGLang engine's step clock compiled whole (``run_on_steps``: one call of
``sglang_ksched.run_steps`` for the run, arrivals by ``arrival_step``) and the
``output_clipped`` column its frames and ``simulate``'s share (``with_clipped``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from pipeline.components import sglang_ksched as K
from pipeline.engine.compiled import STUCK_MESSAGE, request_table
from pipeline.engine.loop import STEP_COLUMNS, SimResult
from pipeline.engine.request import SimRequest
from pipeline.engine.sglang_instance import OUT_OF_MEMORY, SGLangInstance
from pipeline.engine.sglang_options import SGLangConfig

__all__ = ["run_on_steps", "with_clipped"]


def run_on_steps(requests: Sequence[SimRequest], config: SGLangConfig,
                 engine: SGLangInstance | None = None, record: bool = False) -> SimResult:
    """The step clock, compiled whole (``sglang_ksched.run_steps``): arrivals by
    ``arrival_step``, the idle jump; the frames of ``simulate``. ``engine.steps`` keeps the
    raw rows (step row + first batch row; with ``record`` every batch's (request, new,
    cached) rows; events) for the equality tests and the benchmark."""
    engine = engine if engine is not None else SGLangInstance(config, capacity=len(requests))
    engine.add_all(requests)
    due = np.array([float(r.arrival_step or 0) for r in requests], np.float64)
    n, room = len(requests), 2 * config.settings.max_running_requests + 64
    STEPS = np.zeros((2 * n + 64, K.S_COLUMNS + 1), np.int64)
    SCHED = np.zeros((min(64 * n, 1 << 24) + room if record else 0, 3), np.int64)
    EVENTS = np.zeros((2 * n + 2 * room, 3), np.int64)
    Lp = np.zeros(6, np.int64)
    Lp[5] = record
    while True:
        status = K.run_steps(engine.state.state(), due, Lp, STEPS, SCHED, EVENTS)
        if status == K.SMALL_TREE:
            engine.state.grow_batch_tree()
            continue
        if status == K.FULL:
            STEPS, SCHED, EVENTS = (_grown(A, used) for A, used in
                                    ((STEPS, Lp[1]), (SCHED, Lp[2]), (EVENTS, Lp[4])))
            continue
        if status == K.FAILED:
            raise RuntimeError(OUT_OF_MEMORY if engine.state.SG[K.G_ERROR] else STUCK_MESSAGE)
        break
    index = engine.state.R[:, K.R_INDEX]
    STEPS, SCHED, EVENTS = STEPS[:Lp[1]], SCHED[:Lp[2]], EVENTS[:Lp[4]]
    SCHED[:, 0], EVENTS[:, 2] = index[SCHED[:, 0]], index[EVENTS[:, 2]]
    engine.steps = (STEPS, SCHED, EVENTS)
    engine.step_no = int(Lp[1])
    rows = engine.request_rows(requests)
    arrival = due.copy()
    frame = with_clipped(request_table(rows, arrival, False), engine.clipped, requests)
    columns = {name: STEPS[:, j] for j, name in enumerate(STEP_COLUMNS)}
    if engine.extra_names:
        columns.update(zip(engine.extra_names, (STEPS[:, K.S_LOADED] * engine.kv_bytes,
                                                STEPS[:, K.S_WRITTEN] * engine.kv_bytes)))
    return SimResult(frame, pl.DataFrame(columns, schema={name: pl.Int64 for name in columns}))


def with_clipped(frame: pl.DataFrame, clipped: dict[int, int],
                 requests: Sequence[SimRequest]) -> pl.DataFrame:
    """``output_clipped``: the output tokens SGLang's intake cut from each request (0 where
    none), only in a run where it cut some (``sglang_intake``)."""
    if not clipped:
        return frame
    cut = [clipped.get(r.index, 0) for r in requests]
    return frame.with_columns(output_clipped=pl.Series(cut, dtype=pl.Int64))


def _grown(A: np.ndarray, used: int) -> np.ndarray:
    """``A`` twice as long (its ``used`` rows kept)."""
    grown = np.empty((2 * A.shape[0] + 64,) + A.shape[1:], A.dtype)
    grown[:used] = A[:used]
    return grown
