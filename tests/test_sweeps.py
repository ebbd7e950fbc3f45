"""pipeline.sweeps: grids, Parquet schema, aggregates equal to kvlab's scenario."""

import polars as pl
import pyarrow.parquet as pq
import pytest

from kvlab.make_exports import CPU_CLIFF_CAPACITIES, GPU_CLIFF_CAPACITIES
from kvlab.scenario import run as run_scenario
from pipeline import sweeps
from pipeline.onepass.events import RESULT_SCHEMA
from pipeline.workloads.documents import ACCESS_SCHEMA, DocumentWorkload

WORKLOAD = DocumentWorkload()


def run_sweeps(workload, plan, events_dir):
    """Every sweep's ``<sweep>.parquet`` and ``aggregates.parquet`` written; the aggregates."""
    events, result = sweeps.sweep_frames(workload, plan, "onepass")
    for name, frame in events.items():
        sweeps.write_parquet_atomic(frame, events_dir / f"{name}.parquet")
    sweeps.write_parquet_atomic(result, events_dir / "aggregates.parquet")
    return result


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("events")
    plan = sweeps.default_sweeps(WORKLOAD, GPU_CLIFF_CAPACITIES, CPU_CLIFF_CAPACITIES, 21520,
                                 points=16, grid_steps=5)
    return out, plan, run_sweeps(WORKLOAD, plan, out)


def test_cliff_grid_has_every_edge_and_spec_point():
    grid = sweeps.cliff_capacities(WORKLOAD, GPU_CLIFF_CAPACITIES, points=32)
    assert grid[0] == 0 and grid[-1] >= 1.25 * WORKLOAD.working_set
    for k in range(1, 11):
        assert k * 5011 - 1 in grid and k * 5011 in grid
    assert set(GPU_CLIFF_CAPACITIES) <= set(grid)
    # fewer points than edges: the edges give way, the spec points stay (bounded grid)
    small = sweeps.cliff_capacities(WORKLOAD, GPU_CLIFF_CAPACITIES, points=8)
    assert set(GPU_CLIFF_CAPACITIES) <= set(small) and len(small) <= 8 + 6


def test_aggregates_equal_kvlab_scenario_at_every_point(swept):
    _, plan, aggregates = swept
    for sweep in plan:
        rows = aggregates.filter(pl.col("sweep") == sweep.name)
        assert rows.height == sweep.pairs * len(WORKLOAD.passes)
        for row in rows.filter(pl.col("pass_index") == 1).iter_rows(named=True):
            expected = run_scenario(gpu=row["gpu_capacity"], cpu=row["cpu_capacity"])["passes"]
            for index, entry in enumerate(expected):
                got = rows.filter(pl.col("gpu_capacity") == row["gpu_capacity"],
                                  pl.col("cpu_capacity") == row["cpu_capacity"],
                                  pl.col("pass_index") == index).row(0, named=True)
                assert (got["gpu_hits"], got["cpu_hits"], got["misses"]) == (
                    entry["gpu_hits"], entry["cpu_hits"], entry["misses"])


def test_cliff_exports_from_aggregates_equal_the_committed_contract(swept):
    import json

    from conftest import KVLAB
    _, _, aggregates = swept
    assert sweeps.cliff_export(aggregates, GPU_CLIFF_CAPACITIES) == json.loads(
        (KVLAB / "cliff.json").read_text())
    assert sweeps.cpu_cliff_export(aggregates, CPU_CLIFF_CAPACITIES) == json.loads(
        (KVLAB / "cpu_cliff.json").read_text())


def test_parquet_schema_is_what_the_schemas_page_documents(swept):
    out, plan, _ = swept
    from conftest import ROOT
    readme = (ROOT / "docs" / "schemas.md").read_text()
    for sweep in plan:
        path = out / f"{sweep.name}.parquet"
        schema = pq.read_schema(path)
        assert schema.names == ["sweep", *ACCESS_SCHEMA.names(), *RESULT_SCHEMA.names()]
        for name in schema.names:
            assert f"`{name}`" in readme, name
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"
        frame = pl.read_parquet(path)
        assert frame["tier"].cast(pl.String).is_in(["gpu", "cpu", "miss"]).all()
        assert str(schema.field("tier").type).startswith("dictionary")
        assert schema.field("gpu_used").type == "int64"
        assert schema.field("pass_index").type == "int16"
    aggregates = pq.read_schema(out / "aggregates.parquet")
    assert aggregates.names == list(sweeps.AGGREGATE_SCHEMA)


def test_events_are_compact(swept):
    out, plan, _ = swept
    import os
    events = sum(pl.read_parquet(out / f"{s.name}.parquet").height for s in plan)
    size = sum(os.path.getsize(out / f"{s.name}.parquet") for s in plan)
    assert size / events <= 8


def test_no_temporary_files_left(swept):
    out, _, _ = swept
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]


def test_unwritable_folder_leaves_nothing(tmp_path):
    frame = pl.DataFrame({"a": [1]})
    with pytest.raises(OSError):
        sweeps.write_parquet_atomic(frame, tmp_path / "missing" / "x.parquet")
    assert list(tmp_path.iterdir()) == []


def test_hit_curve_from_the_stack_distance_column_equals_the_sweep(swept):
    from pipeline.onepass.events import with_stack_distances
    _, plan, aggregates = swept
    accesses = with_stack_distances(WORKLOAD.accesses())
    gpu_cliff = aggregates.filter(pl.col("sweep") == "gpu_cliff",
                                  pl.col("gpu_capacity") >= WORKLOAD.tokens)
    capacities = gpu_cliff["gpu_capacity"].unique().sort().to_list()
    curve = sweeps.hits_at(accesses, capacities)
    expected = gpu_cliff.select("pass_index", pl.col("gpu_capacity").alias("capacity"),
                                pl.col("gpu_hits").cast(pl.Int64).alias("hits"))
    assert curve.sort("pass_index", "capacity").rows() == expected.sort(
        "pass_index", "capacity").rows()
    # The whole step function: second-pass hits jump from 0 to 10 at exactly 50110.
    steps = sweeps.hit_steps(accesses).filter(pl.col("pass_index") == 1)
    assert steps.rows() == [(1, 50110, 10)]
    with pytest.raises(ValueError, match="below the largest item"):
        sweeps.hits_at(accesses, [5010])


def test_cliff_exports_equal_what_scenario_py_prints(swept):
    import json
    import subprocess
    import sys

    from conftest import KVLAB
    _, _, aggregates = swept

    def printed_second_pass(*args):
        out = subprocess.run([sys.executable, "-S", str(KVLAB / "scenario.py"), *args,
                              "--passes", "fwd,fwd"], capture_output=True, text=True,
                             check=True).stdout
        return json.loads(out)["passes"][1]

    gpu = {str(c): (lambda p: p["gpu_hits"] + p["cpu_hits"])(printed_second_pass("--gpu", str(c)))
           for c in GPU_CLIFF_CAPACITIES}
    cpu = {str(c): printed_second_pass("--gpu", "21520", "--cpu", str(c))["misses"]
           for c in CPU_CLIFF_CAPACITIES}
    assert sweeps.cliff_export(aggregates, GPU_CLIFF_CAPACITIES) == gpu
    assert sweeps.cpu_cliff_export(aggregates, CPU_CLIFF_CAPACITIES) == cpu
