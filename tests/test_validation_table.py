"""scripts/validation_table.py's arithmetic on one row: a prompt's TTFT on the roofline is the
sum of its chunks' steps, the error is (kvlab - measured) / measured, and the MFU fitted on
the 10K point reproduces that point."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import ROOT
from pipeline.steptime.efficiency import EFFICIENCY

_spec = importlib.util.spec_from_file_location("validation_table",
                                               ROOT / "scripts" / "validation_table.py")
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def _by_hand(tokens: int, mfu: float, mbu: float) -> float:
    """The roofline's TTFT of ``tokens`` computed alone, chunk by chunk, from its formula."""
    model = table.h100_roofline(mfu, mbu)
    m, gpu = model.model, model.gpu
    total, before = 0.0, 0
    while before < tokens:
        new = min(table.CHUNK, tokens - before)
        last = before + new == tokens
        flops = (2 * m.active_layer_parameters * new + 2 * m.lm_head_parameters * last
                 + 4 * m.layers * m.attention_heads * m.head_dim
                 * (new * before + new * (new + 1) // 2))
        memory = model.weight_bytes + 131072 * (before + new)
        total += table.OVERHEAD_MS + max(flops / (gpu.bf16_tflops * 1e12 * mfu),
                                         memory / (gpu.hbm_gbps * 1e9 * mbu)) * 1e3
        before += new
    return total


def test_one_row_of_the_offloading_figure():
    mfu, mbu = EFFICIENCY["h100"]
    rows = [r for r in table.offload_rows() if r["tokens"] == 50_000
            and r["figure"] == "TTFT computed (ms)" and r["factors"].startswith("vidur")]
    assert len(rows) == 1
    row = rows[0]
    assert row["kvlab"] == pytest.approx(_by_hand(50_000, mfu, mbu), rel=1e-9)
    assert row["measured"] == 2291
    assert row["error_pct"] == pytest.approx(100 * (row["kvlab"] - 2291) / 2291)


def test_the_fitted_mfu_reproduces_its_point_only():
    mbu = EFFICIENCY["h100"][1]
    mfu = table.fitted_mfu(10_000, 265.0, mbu)
    assert _by_hand(10_000, mfu, mbu) == pytest.approx(265.0, abs=0.01)
    fitted = [r for r in table.offload_rows() if r["fitted_here"]]
    assert [(r["tokens"], r["figure"]) for r in fitted] == [(10_000, "TTFT computed (ms)")]
