"""``simulate`` and ``fleet`` with ``--simple-kv-offload`` (vLLM's SimpleCPUOffloadConnector):
the CPU and disk mediums run (the native offload's columns written: the pool's hits are
``cpu_hit_tokens`` on either medium), and bad input is one line naming the option, exit 2,
nothing written."""

from __future__ import annotations

import polars as pl
import pytest
from test_cli_bad_arguments import usage_error

from pipeline.cli import main

PATTERN = ["--pattern", "long-doc-qa", "--num-documents", "4", "--document-length", "256",
           "--gpu", "40blocks", "--model", "qwen2.5-1.5b"]
SIMPLE = ["--kv-offloading-size", "1", "--simple-kv-offload"]
DISK = [*SIMPLE, "--offload-medium", "disk", "--disk-bandwidth", "5",
        "--disk-latency-ms", "0.1"]


@pytest.mark.parametrize("command", ["simulate", "fleet"])
@pytest.mark.parametrize("argv, message", [
    (["--simple-kv-offload"], "--simple-kv-offload needs --kv-offloading-size GiB"),
    (["--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache",
      "--simple-kv-offload"],
     "--simple-kv-offload applies to --kv-offloading-backend native, not lmcache"),
    (["--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache",
      "--offload-medium", "disk"],
     "--offload-medium applies to --kv-offloading-backend native, not lmcache"),
    (["--kv-offloading-size", "1", "--offload-medium", "cpu"],
     "--offload-medium needs --simple-kv-offload"),
    ([*SIMPLE, "--offload-eviction-policy", "arc"],
     "--offload-eviction-policy applies to vLLM's OffloadingConnector, not "
     "--simple-kv-offload"),
    ([*SIMPLE, "--disk-bandwidth", "5"], "--disk-bandwidth needs --offload-medium disk"),
    (["--kv-offloading-size", "1", "--lazy-offload"],
     "--lazy-offload needs --simple-kv-offload"),
    ([*SIMPLE, "--offload-medium", "disk", "--disk-latency-ms", "1"],
     "--offload-medium disk needs --disk-bandwidth"),
    ([*SIMPLE, "--offload-medium", "disk", "--disk-bandwidth", "5"],
     "--offload-medium disk needs --disk-latency-ms"),
    ([*DISK, "--disk-capacity", "0"], "--disk-capacity: expected a number > 0"),
    ([*DISK, "--disk-capacity", "-2"], "--disk-capacity: expected a number > 0"),
    ([*DISK[:-2], "--disk-latency-ms", "-1"], "--disk-latency-ms: expected a number >= 0"),
    ([*DISK, "--disk-buffer-slots", "0"], "--disk-buffer-slots: expected an integer >= 1"),
    ([*DISK, "--disk-capacity", "1e-9"], "--disk-capacity 1e-09: no block of 16 tokens"),
    (["--kv-offloading-size", "1e-9", "--simple-kv-offload"],
     "--kv-offloading-size 1e-09: no block of 16 tokens"),
])
def test_simple_offload_usage_errors(tmp_path, capsys, command, argv, message):
    from conftest import folder_snapshot
    usage_error(capsys, [command, *PATTERN, *argv, "--out", str(tmp_path / "out")], message)
    assert folder_snapshot(tmp_path) == {}


def test_cpu_and_disk_mediums_run(tmp_path, capsys):
    """The CPU pool (1 GiB / (16 x 28 KiB) = 2,340 slots) and a disk pool hit the same
    blocks on the step clock (the pool, not its speed, decides what hits); the columns are
    the native offload's."""
    out = tmp_path / "cpu"
    assert main(["simulate", *PATTERN, *SIMPLE, "--out", str(out)]) == 0
    assert "2,339 cpu slots of 16 tokens" in capsys.readouterr().out
    requests = pl.read_parquet(out / "requests.parquet")
    steps = pl.read_parquet(out / "steps.parquet")
    assert requests["cpu_hit_tokens"].sum() > 0
    assert {"load_step", "load_done_step"} <= set(requests.columns)
    assert steps["cpu_load_bytes"].sum() == requests["cpu_hit_tokens"].sum() * 28672
    disk = tmp_path / "disk"
    assert main(["simulate", *PATTERN, *DISK, "--disk-capacity", "1", "--out",
                 str(disk)]) == 0
    assert "disk slots" in capsys.readouterr().out
    assert pl.read_parquet(disk / "requests.parquet").equals(requests)


def test_lazy_offload_runs(tmp_path, capsys):
    """``--lazy-offload``: stores as the GPU needs room (tests/test_engine_simple_offload.py
    proves the rule equal to vLLM's); named in the models line."""
    out = tmp_path / "lazy"
    assert main(["simulate", *PATTERN, *SIMPLE, "--lazy-offload", "--out", str(out)]) == 0
    assert "lazy stores" in capsys.readouterr().out
    assert pl.read_parquet(out / "steps.parquet")["cpu_store_bytes"].sum() > 0


def test_simple_offload_runs_in_a_fleet(tmp_path):
    out = tmp_path / "fleet"
    assert main(["fleet", *PATTERN, *SIMPLE, "--instances", "2", "--out", str(out)]) == 0
