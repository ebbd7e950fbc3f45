"""scripts/compare_outputs.py: the refactor check passes on equal outputs, fails on any change."""

from __future__ import annotations

import importlib.util
import shutil

import polars as pl
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("compare_outputs",
                                               ROOT / "scripts" / "compare_outputs.py")
compare_outputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_outputs)


@pytest.fixture
def folders(tmp_path):
    before = tmp_path / "before"
    (before / "events").mkdir(parents=True)
    (before / "cliff.json").write_text('{"21520": 0}\n')
    pl.DataFrame({"a": [1, 2], "b": ["x", "y"]}).write_parquet(before / "events" / "e.parquet")
    (before / "index.html").write_text('<div id="chart-1a2b3c4d">\n  <p>hits</p></div>\n')
    after = tmp_path / "after"
    shutil.copytree(before, after)
    return before, after


def test_equal_folders_pass(folders, capsys):
    assert compare_outputs.main([str(p) for p in folders]) == 0
    assert "identical: 3 files" in capsys.readouterr().out


def test_html_may_differ_in_white_space_and_ids(folders):
    before, after = folders
    (after / "index.html").write_text('<div id="chart-9f8e7d6c"><p>hits</p></div>')
    assert compare_outputs.compare(before, after) == []


@pytest.mark.parametrize("change, problem", [
    (lambda after: (after / "cliff.json").write_text('{"21520": 0}'), "cliff.json: bytes"),
    (lambda after: pl.DataFrame({"a": [1, 3], "b": ["x", "y"]}).write_parquet(
        after / "events" / "e.parquet"), "e.parquet: frames differ"),
    (lambda after: pl.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}).write_parquet(
        after / "events" / "e.parquet"), "e.parquet: schema"),
    (lambda after: (after / "index.html").write_text("<p>misses</p>"), "index.html: HTML"),
    (lambda after: (after / "cliff.json").unlink(), "cliff.json: only in"),
])
def test_any_other_change_fails(folders, change, problem):
    before, after = folders
    change(after)
    problems = compare_outputs.compare(before, after)
    assert len(problems) == 1 and problem in problems[0]
    assert compare_outputs.main([str(before), str(after)]) == 1
