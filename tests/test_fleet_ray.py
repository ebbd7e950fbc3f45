"""The Ray executor (one local 2-CPU Ray for the module): results equal the process
pool's row for row; a point whose worker dies is retried by Ray."""

import json

import polars as pl
import pyarrow.dataset as ds
import pytest

from pipeline.cli import main
from test_fleet_command import BASE, KillOnce

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def compiled_kernels(tmp_path_factory):
    """One sweep runs here first, so the engine's kernel (and the prefix router's lookups)
    is compiled once, in this process, and the process pool's two workers and Ray's load it
    from numba's cache (on a clean checkout they compiled it side by side)."""
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["fleet", *BASE, "--router", "round-robin,prefix-precise", "--instances",
                     "2", "--gpu", "40blocks", "--out",
                     str(tmp_path_factory.mktemp("warm") / "out")]) == 0


@pytest.fixture(scope="module", autouse=True)
def local_ray(compiled_kernels):
    import oracles.lmcache_cpu
    ray.cloudpickle.register_pickle_by_value(oracles.lmcache_cpu)   # conftest registers it
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def dataset(folder, order):
    table = ds.dataset(folder, format="parquet", partitioning="hive").to_table()
    return pl.from_arrow(table).sort("point", *order)


def test_ray_and_local_results_are_identical(tmp_path, capsys):
    argv = [*BASE, "--router", "round-robin,prefix-precise,random", "--instances", "2",
            "--gpu", "40blocks,80blocks", "--speed", "1,2", "--json"]
    outputs = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        assert main(["fleet", *argv, "--executor", executor, "--jobs", "2",
                     "--out", str(out)]) == 0
        outputs[executor] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert outputs["local"] == outputs["ray"] and len(outputs["ray"]) == 12
    for table, order in (("requests", ["request"]), ("steps", ["instance", "step"])):
        local = dataset(tmp_path / "local" / table, order)
        remote = dataset(tmp_path / "ray" / table, order)
        assert local.height > 0 and local.equals(remote)


def test_ray_retries_a_point_whose_worker_died(tmp_path):
    import test_fleet_command
    from test_fleet_command import killed_worker_inputs

    from pipeline.fleet import sweep
    from pipeline.fleet.sweep_point import point_path

    ray.cloudpickle.register_pickle_by_value(test_fleet_command)   # workers lack tests/

    settings, points, workload = killed_worker_inputs(tmp_path)
    failed = sweep.run_sweep(settings, points, workload, tmp_path / "out", executor="ray",
                             retries=1)
    assert failed == {} and (tmp_path / "killed").exists()
    assert all(point_path(tmp_path / "out", "requests", p).exists() for p in points)


def test_ray_workers_run_a_cpu_tier_registered_in_the_driver(tmp_path, capsys):
    """A policy registered at run time in the driver reaches Ray's workers with the sweep
    (their answers are the process pool's)."""
    import test_toy_tier_commands as toy

    from pipeline import catalog as registry

    ray.cloudpickle.register_pickle_by_value(toy)                  # workers lack tests/
    registry.register(registry.policy_entry("newest-out", toy.NewestOut, "newest out"))
    try:
        outputs = {}
        for executor in ("local", "ray"):
            assert main(["fleet", *BASE, "--instances", "2", "--gpu", "14blocks", "--cpu",
                         "1000", "--cpu-model", "newest-out", "--executor", executor,
                         "--jobs", "2", "--json", "--out", str(tmp_path / executor)]) == 0
            outputs[executor] = [json.loads(line)
                                 for line in capsys.readouterr().out.splitlines()]
    finally:
        registry.unregister("newest-out")
    assert outputs["local"] == outputs["ray"]
    assert {row["models"]["cpu"] for row in outputs["ray"]} == {"newest-out"}
    assert any(row["cpu_hit_tokens"] for row in outputs["ray"])
