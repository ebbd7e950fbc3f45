"""``run`` builds the report's run-independent parts once per process (pipeline.commands.run_blocks:
``reused``, ``drawn``) and builds them again when what they depend on changes."""

import argparse

import polars as pl

from pipeline.base.config import LAB_DOCS, LAB_PASSES, LAB_TOKENS
from pipeline import catalog as registry
from pipeline.commands import run_blocks as block_mode
from pipeline.commands.run_blocks import drawn, file_key, registry_key, reused
from pipeline.workloads.documents import DocumentWorkload


def test_reused_builds_again_only_for_another_key():
    built = []

    def build():
        built.append(object())
        return built[-1]

    first = reused("test: key", ("a", 1), build)
    assert reused("test: key", ("a", 1), build) is first and len(built) == 1
    second = reused("test: key", ("a", 2), build)
    assert second is not first and len(built) == 2
    assert reused("test: key", ("a", 1), build) is not first      # one value per name


def test_a_rewritten_file_has_another_key(tmp_path):
    path = tmp_path / "measured.jsonl"
    assert file_key(path) == ((str(path), None),)
    path.write_text("{}\n")
    before = file_key(path)
    path.write_text('{"ttft_ms": 1}\n')
    assert file_key(path) != before and file_key(path) == file_key(path)


def test_drawn_reuses_only_the_very_same_frames():
    frame = pl.DataFrame({"x": [1, 2]})
    first = drawn("test: drawn", list, frame, note="a")
    assert drawn("test: drawn", list, frame, note="a") is first
    assert drawn("test: drawn", list, frame.clone(), note="a") is not first    # equal, not same
    again = drawn("test: drawn", list, frame, note="a")
    assert drawn("test: drawn", list, frame, note="b") is not again


def _lab_groups(tmp_path):
    workload = DocumentWorkload(LAB_DOCS, LAB_TOKENS, tuple(LAB_PASSES))
    inputs = block_mode.report_inputs(argparse.Namespace(), workload, None, None, (),
                                      tmp_path / "index.html")
    return {heading: sections for heading, _, sections in block_mode.render_groups(inputs)}


def test_a_second_lab_report_reuses_its_sections_until_a_policy_is_registered(tmp_path):
    first = _lab_groups(tmp_path)
    again = _lab_groups(tmp_path)
    assert first.keys() == again.keys() and "Cache policies" in first
    for heading, sections in first.items():
        assert [s.key for s in again[heading]] == [s.key for s in sections]
        assert all(a is b for a, b in zip(again[heading], sections)), heading
    models = registry_key(*registry.POLICIES)
    registry.register(registry.policy_entry("toy", registry.POLICIES["fifo"], "FIFO again"))
    try:
        assert registry_key(*registry.POLICIES) != models
        toy = _lab_groups(tmp_path)
    finally:
        registry.unregister("toy")
    assert registry_key(*registry.POLICIES) == models
    assert toy["Block mode"][0] is first["Block mode"][0]         # no policy drawn there
    policies = toy["Cache policies"][0].spec
    assert any(row["policy"] == "toy" for rows in policies["datasets"].values() for row in rows)
    assert toy["Cache policies"][0] is not first["Cache policies"][0]
    without = _lab_groups(tmp_path)["Cache policies"][0].spec
    assert not any(row.get("policy") == "toy" for rows in without["datasets"].values()
                   for row in rows)
    assert without == first["Cache policies"][0].spec
