"""A step-time model registered from this file (one class, one registry line) is what
``simulate --latency toy`` prices every batch with, and what plan's latency paths use:
``plan --latency toy`` (each request alone) and ``plan --target-ttft-p90-ms --latency toy``
(engine runs under load)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl
import pytest

from pipeline.cli import main as cli_main
from pipeline.steptime import step_cost
from pipeline.steptime.registry import STEP_TIME_MODELS, name_of

FIXED_MS, PER_TOKEN_MS = 1.5, 0.01


@dataclass(frozen=True)
class Toy:
    """1.5 ms per step plus 0.01 ms per prefill token: nothing else costs anything."""

    label: str = "toy (1.5 ms + 0.01 ms per prefill token)"
    provenance: str = "made up by a test"
    file_kind = None

    @classmethod
    def from_args(cls, args) -> Toy:
        return cls()

    def step_ms(self, record) -> float:
        return FIXED_MS + PER_TOKEN_MS * step_cost(record).prefill_tokens


@pytest.fixture(autouse=True)
def toy(monkeypatch):
    monkeypatch.setitem(STEP_TIME_MODELS, "toy", Toy)     # the one registry line


PATTERN = ["--pattern", "long-doc-qa", "--num-documents", "2", "--document-length", "300"]


def test_the_registry_names_it():
    assert name_of(Toy()) == "toy"


def test_simulate_prices_every_step_with_it(tmp_path, capsys):
    out = tmp_path / "sim"
    assert cli_main(["simulate", *PATTERN, "--gpu", "300blocks", "--rate", "4",
                     "--latency", "toy", "--out", str(out)]) == 0
    assert Toy.label in capsys.readouterr().out
    steps = pl.read_parquet(out / "steps.parquet")
    assert steps.height > 0
    expected = FIXED_MS + PER_TOKEN_MS * steps["prefill_tokens"].cast(pl.Float64)
    assert steps["duration_ms"].to_list() == pytest.approx(expected.to_list())
    assert json.loads((out / "metrics.json").read_text())["step_time_model"] == Toy.label


def test_plan_prices_each_request_alone_with_it(capsys):
    assert cli_main(["plan", "--latency", "toy", "--docs", "2", "--tokens", "1000",
                     "--max-num-batched-tokens", "256", "--target-hit-ratio", "0.5",
                     "--model", "qwen2.5-1.5b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "ttft_withheld" not in doc
    assert doc["models"]["step time"]["label"] == Toy.label
    cold = doc["figures"][0]                   # pass 1: every 1000-token prompt recomputed
    assert cold["p50_ms"] == pytest.approx(4 * FIXED_MS + 1000 * PER_TOKEN_MS)   # 4 chunks


def test_plan_under_load_runs_the_engine_with_it(capsys):
    assert cli_main(["plan", *PATTERN, "--target-ttft-p90-ms", "1000", "--latency", "toy",
                     "--rate", "4", "--model", "qwen2.5-1.5b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step_time_model"] == Toy.label and doc["answer"]["status"] != "unreachable"
    # a cold 300-token prompt alone: one step of 300 prefill tokens at the least
    assert doc["figures"]["ttft_ms_p50"] >= FIXED_MS + 300 * PER_TOKEN_MS
