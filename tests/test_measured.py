"""The measured file: loading (pipeline.workloads.measured_file) and exact equality of its
summary and tables (pipeline.ttft.summary) with kvlab's summary."""

import json
import math
import re
import statistics
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conftest import ROOT
from kvlab.summarize import InputError, read_records, summarize
from pipeline.ttft.attribution import attribute_tiers
from pipeline.ttft.summary import stats_table, summary, tier_table
from pipeline.ttft.verdicts import separation_notes
from pipeline.workloads.measured_file import RECORD_SCHEMA, load_measured, records_frame

from measured_records import assert_same, record, write_lines

DATA = ROOT / "data" / "ttft.jsonl"

# --- exact equality with kvlab.summarize.summarize -----------------------------------------

def nudge(value_and_ulps):
    value, ulps = value_and_ulps
    for _ in range(abs(ulps)):
        value = math.nextafter(value, math.inf if ulps > 0 else 0.0)
    return value


half_way = st.integers(0, 40_000).map(lambda k: k / 20)           # x.x5: rounding ties
ttfts = st.one_of(
    st.integers(0, 2000), st.floats(0, 2000), st.just(0), st.just(-0.0),
    st.tuples(half_way, st.integers(-2, 2)).map(nudge),            # 1-2 ulps off a tie
    st.floats(0, 1e-300), st.floats(0, math.inf, allow_infinity=False),   # subnormal .. max
    st.integers(0, 2**53), st.integers(0, 2**10).map(lambda k: k << 60),  # exact big ints
)
one_record = st.fixed_dictionaries({
    "config": st.sampled_from(["baseline", "lmcache", "lmcache", "baseline", "other"]),
    "pass": st.sampled_from(["pass1-cold", "pass2-replay", "pass3-reverse", "x"]),
    "doc": st.integers(0, 12), "doc_tokens": st.just(4864), "ttft_ms": ttfts,
    "total_ms": st.one_of(st.just(1.0), st.integers(0, 10))})
# Two records of one group around a rounding tie: their median is within an ulp of x.x5.
tie_pair = st.tuples(one_record, half_way, st.integers(1, 100_000).map(lambda m: m / 1000)).map(
    lambda t: [dict(t[0], ttft_ms=max(t[1] - t[2], 0.0)), dict(t[0], ttft_ms=t[1] + t[2])])
rows = st.lists(st.one_of(one_record.map(lambda r: [r]), tie_pair), max_size=25).map(
    lambda groups: [r for group in groups for r in group])


@given(rows, st.lists(st.sampled_from(["", "  ", "\t"]), max_size=5), st.randoms())
@example([record("baseline", "a", 0, 1.04), record("lmcache", "a", 0, 0.96),
          record("baseline", "b", 0, 3.0), record("lmcache", "b", 0, 0)], [], None)
@example([record("lmcache", "p", 0, 1e308), record("lmcache", "p", 1, 1e308),
          record("baseline", "p", 0, 1e308), record("baseline", "p", 1, 1.7e308)], [], None)
@example([record("baseline", "p", i, v) for i, v in enumerate([34.57, 21.88, 95.2])], [], None)
@example([record("lmcache", "p", 0, 31.26), record("lmcache", "p", 1, 76.84)], [], None)
def test_summary_equals_kvlab_summarize(records, blanks, rng):
    lines = [json.dumps(r) for r in records] + blanks
    if rng is not None:
        rng.shuffle(lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_lines(Path(tmp) / "in.jsonl", lines)
        want = summarize(read_records(path))
        got = summary(load_measured(path))
    assert_same(got, want)


def same_float(got, want):
    return got == want or (math.isnan(got) and math.isnan(want))


@given(rows)
def test_stats_table_statistics_are_bit_identical_to_python_s(records):
    """Unrounded: a 1-ulp difference fails here even when no rounding would flip."""
    groups = {}
    for r in records:
        groups.setdefault((r["config"], r["pass"]), []).append(r["ttft_ms"])
    table = stats_table(records_frame(records))
    assert table.height == len(groups)
    for row in table.iter_rows(named=True):
        values = groups[(row["config"], row["pass"])]
        assert row["n"] == len(values)
        assert row["p50_ms"] == float(statistics.median(values)), (values, row)
        assert row["mean_ms"] == float(statistics.mean(values)), (values, row)
        assert row["min_ms"] == min(values) and row["max_ms"] == max(values)
        base = groups.get(("baseline", row["pass"]))
        for stat, column in ((statistics.median, "ratio_p50"), (statistics.mean, "ratio_mean")):
            mine = float(stat(values))
            want = None if base is None or mine == 0 else float(stat(base)) / mine
            assert (row[column] is None) == (want is None) and (
                want is None or same_float(row[column], want)), (row, column)


def test_polars_built_ins_would_not_do():
    """Why the module does not use polars' mean / median / round: they differ here."""
    mean_case, median_case = [34.57, 21.88, 95.2], [22.4, 1.6]
    assert round(pl.Series(mean_case).mean(), 1) == 50.6       # float sum: 50.550000000000004
    assert pl.Series(median_case).median() != 12.0             # 11.999999999999998
    assert pl.Series([0.15]).round(1).item() == 0.2 != round(0.15, 1)
    records = ([record("baseline", "m", i, v) for i, v in enumerate(mean_case)]
               + [record("lmcache", "m", i, v) for i, v in enumerate(median_case)])
    got = summary(records_frame(records))
    assert got == summarize(records)
    assert got["baseline"]["m"]["mean_ms"] == 50.5 and got["lmcache"]["m"]["p50_ms"] == 12.0


# --- loading -------------------------------------------------------------------------------

def test_load_schema_lines_and_request_order(tmp_path):
    lines = [json.dumps(record("lmcache", "p2", 5, 10)), "",
             json.dumps(record("baseline", "p1", 1, 2.5)),
             json.dumps(record("lmcache", "p1", 6, 11)), "   ",
             json.dumps(record("lmcache", "p2", 7, 12)),
             json.dumps(record("baseline", "p1", 2, 3))]
    frame = load_measured(write_lines(tmp_path / "in.jsonl", lines))
    assert frame.schema == RECORD_SCHEMA
    assert frame["line"].to_list() == [1, 3, 4, 6, 7]
    # lmcache reads p2 (lines 1, 6) before p1 (line 4): p2 appeared first.
    assert frame.select("config", "doc", "request").rows() == [
        ("lmcache", 5, 0), ("baseline", 1, 0), ("lmcache", 6, 2), ("lmcache", 7, 1),
        ("baseline", 2, 1)]
    assert frame["ttft_ms"].to_list() == [10.0, 2.5, 11.0, 12.0, 3.0]


BAD_LINES = [
    "{not json", "[1, 2]", "",
    json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "total_ms": 1}),
    json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1,
                "ttft_ms": "fast", "total_ms": 1}),
    json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1,
                "ttft_ms": True, "total_ms": 1}),
    json.dumps({"config": 3, "pass": "p", "doc": 0, "doc_tokens": 1, "ttft_ms": 1,
                "total_ms": 1}),
    '{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "ttft_ms": NaN, '
    '"total_ms": 1}',
    json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1,
                "ttft_ms": -1, "total_ms": 1}),
]


@pytest.mark.parametrize("bad", [b for b in BAD_LINES if b])
def test_bad_lines_give_kvlab_summarize_s_exact_message(tmp_path, bad):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(record("baseline", "p", 0, 5.0)),
                                               "", bad, json.dumps(record("lmcache", "p", 0, 1))])
    with pytest.raises(InputError) as kvlab_error:
        read_records(path)
    with pytest.raises(InputError) as ours:
        load_measured(path)
    assert str(ours.value) == str(kvlab_error.value)
    assert str(ours.value).startswith(f"{path}:3: ") and "\n" not in str(ours.value)


@pytest.mark.parametrize("field, value, reason", [
    ("doc", "seven", "doc must be a 64-bit integer, got 'seven'"),
    ("doc", 1.5, "doc must be a 64-bit integer, got 1.5"),
    ("doc_tokens", True, "doc_tokens must be a 64-bit integer, got True"),
    ("doc", 2**63, "doc must be a 64-bit integer"),
    ("total_ms", None, "total_ms must be a number, got None"),
    ("ttft_ms", 2**53 + 1, "ttft_ms is not exactly representable as a 64-bit float"),
    ("total_ms", 10**400, "total_ms is not exactly representable as a 64-bit float"),
])
def test_fields_the_schema_cannot_hold_name_file_and_line(tmp_path, field, value, reason):
    bad = record("lmcache", "p", 0, 5.0)
    bad[field] = value
    path = write_lines(tmp_path / "in.jsonl", ["", json.dumps(record("baseline", "p", 0, 5.0)),
                                               json.dumps(bad)])
    read_records(path)                                   # kvlab's summarize accepts it
    with pytest.raises(InputError, match=f"^{path}:3: {reason}"):
        load_measured(path)


def test_integer_too_large_for_a_float_is_one_line_naming_the_file(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(record("baseline", "p", 0, 10**400))])
    with pytest.raises(InputError, match=re.escape(path)) as error:
        load_measured(path)
    assert "\n" not in str(error.value)


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(InputError, match="nope.jsonl"):
        load_measured(str(tmp_path / "nope.jsonl"))


def test_empty_file(tmp_path):
    frame = load_measured(write_lines(tmp_path / "in.jsonl", ["", " "]))
    assert frame.height == 0 and frame.schema == RECORD_SCHEMA
    assert summary(frame) == {"baseline": {}, "lmcache": {}, "ratio": {}}
    assert stats_table(frame).height == 0
    attributed = attribute_tiers(frame)
    assert tier_table(attributed).height == 0 and separation_notes(attributed) == []


