"""A measured file's sidecar names a cache model per config (``pipeline.ttft.configs``):
the real llama.cpp measurement is attributed exactly (90/90 against the engine's own log),
plain LRU next to it; kvlab's two-tier model by name; bad sidecars are one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT

from pipeline.ttft.attribution import attribute_tiers
from pipeline.cli import main
from pipeline.ttft.measured_setup import resolve_setup
from pipeline.workloads.measured_file import load_measured

LLAMA = ROOT / "data" / "measured" / "llamacpp_lab.jsonl"
SYNTHETIC = ROOT / "data" / "ttft.jsonl"


def _attributed(path: Path) -> pl.DataFrame:
    setup = resolve_setup(str(path), False)
    return attribute_tiers(load_measured(str(path)), setup.gpu, setup.cpu, setup.tokens,
                           setup.configs, str(path))


def test_llamacpp_model_equals_the_engine_on_every_request():
    attributed = _attributed(LLAMA)
    server = pl.read_ndjson(LLAMA, infer_schema_length=None)["server_tier"]
    assert attributed.height == 90 and attributed["tier"].null_count() == 0
    assert (attributed["tier"].cast(pl.String) == server).all()
    lru_right = (attributed["lru_tier"].cast(pl.String) == server)
    wrong = attributed.filter(~lru_right)
    # plain LRU misses llama.cpp's any-length prefix refresh: only in the 4.5-document cache
    assert wrong.height == 3 and set(wrong["config"]) == {"cache-4.5"}


def test_measured_prints_every_config_and_the_agreement(capsys):
    assert main(["measured", str(LLAMA)]) == 0
    out = capsys.readouterr().out
    assert "not attributed" not in out
    assert "cache-4.5: llama.cpp prompt cache (RAM cache 46,573,024 B): the engine's own tier " \
           "on 30/30 requests (plain LRU: 27/30)" in out
    assert "cache: llama.cpp prompt cache (RAM cache 108,670,390 B): the engine's own tier " \
           "on 30/30 requests (plain LRU: 30/30)" in out
    for config in ("baseline", "cache-4.5", "cache"):        # ratios of every config
        assert f"│ {config.ljust(9)} ┆ pass3-reverse" in out


def test_plan_fits_the_llamacpp_measurement(capsys):
    assert main(["plan", "--target-hit-ratio", "0.5", "--measured", str(LLAMA), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document["models"]) == {"baseline", "lmcache"}   # the sidecar's roles
    assert document["answer"]["cpu"]["tokens"] == 50_110


def _copy(tmp_path: Path, sidecar: dict | None, edit=None) -> Path:
    target = tmp_path / "m.jsonl"
    lines = LLAMA.read_text().splitlines()
    if edit:
        lines = edit(lines)
    target.write_text("\n".join(lines) + "\n")
    shutil.copy(LLAMA.with_suffix(".provenance.json"), tmp_path / "m.provenance.json")
    if sidecar is not None:
        (tmp_path / "m.setup.json").write_text(json.dumps(sidecar))
    return target


def _one_line_error(capsys, argv, *expected) -> None:
    assert main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and captured.out == "", err
    for text in expected:
        assert text in err, err


def test_a_request_the_workload_did_not_send_is_file_and_line(tmp_path, capsys):
    def swap(lines):
        row = json.loads(lines[4])
        row["doc"] = 9
        return [*lines[:4], json.dumps(row), *lines[5:]]
    sidecar = json.loads(LLAMA.with_suffix(".setup.json").read_text())
    path = _copy(tmp_path, sidecar, swap)
    _one_line_error(capsys, ["measured", str(path)], f"{path}:5:", "baseline request 4",
                    "pass1-cold doc 4")


@pytest.mark.parametrize("configs, expected", [
    ({"baseline": {"model": "vllm"}}, "configs.baseline.model"),
    ({"baseline": {"model": "llamacpp"}}, "needs ram_bytes"),
    ({"baseline": {"model": "llamacpp", "ram_bytes": -1}}, "configs.baseline.ram_bytes"),
    ({"baseline": {"model": "two-tier", "ram_bytes": 5}}, "unknown field 'ram_bytes'"),
    ({"a": {"model": "two-tier", "role": "offload"},
      "b": {"model": "two-tier", "role": "offload"}}, "configs.b.role"),
    ([], "configs must be a non-empty object"),
])
def test_bad_sidecar_configs_are_one_line(tmp_path, capsys, configs, expected):
    path = _copy(tmp_path, {"configs": configs})
    _one_line_error(capsys, ["measured", str(path)], "m.setup.json", expected)


def test_llamacpp_model_needs_the_provenance(tmp_path, capsys):
    path = _copy(tmp_path, {"configs": {"cache": {"model": "llamacpp", "ram_bytes": 10**8}}})
    (tmp_path / "m.provenance.json").unlink()
    _one_line_error(capsys, ["measured", str(path)], "m.provenance.json", "llamacpp model")


def test_two_tier_by_name_equals_kvlab_attribution(tmp_path):
    """The synthetic lab file with its configs renamed, modelled by the sidecar, is
    attributed exactly as kvlab attributes the original (baseline, lmcache)."""
    original = load_measured(str(SYNTHETIC))
    expected = attribute_tiers(original)
    renamed = tmp_path / "r.jsonl"
    names = {"baseline": "gpu-only", "lmcache": "offload"}
    renamed.write_text("".join(
        json.dumps({**row, "config": names[row["config"]]}) + "\n"
        for row in map(json.loads, SYNTHETIC.read_text().splitlines())))
    (tmp_path / "r.setup.json").write_text(json.dumps({"configs": {
        "gpu-only": {"model": "two-tier", "gpu": 21520, "cpu": 0},
        "offload": {"model": "two-tier", "gpu": 21520, "cpu": 56000}}}))
    got = _attributed(renamed)
    assert got["tier"].to_list() == expected["tier"].to_list()
    assert got["config"].to_list() == [names[c] for c in expected["config"]]


def test_every_config_json_has_ratios_to_baseline(tmp_path, capsys):
    out = tmp_path / "every.json"
    assert main(["measured", str(LLAMA), "--every-config", str(out)]) == 0
    capsys.readouterr()
    document = json.loads(out.read_text())
    assert list(document) == ["baseline", "cache-4.5", "cache"]
    rows = pl.read_ndjson(LLAMA, infer_schema_length=None)

    def p50(config: str, name: str) -> float:
        return rows.filter((pl.col("config") == config) & (pl.col("pass") == name))[
            "ttft_ms"].median()
    for config, passes in document.items():
        for name, stats in passes.items():
            assert stats["n"] == 10 and stats["p50_ms"] == round(p50(config, name), 1)
            assert stats["ratio_p50"] == round(p50("baseline", name) / p50(config, name), 2)


def test_every_config_unwritable_is_one_line(tmp_path, capsys):
    _one_line_error(capsys, ["measured", str(LLAMA), "--every-config",
                             str(tmp_path / "no" / "x.json")], "x.json: cannot write")
