"""kvlab/summarize.py: statistics, ordering, rounding, and bad input."""

import json
import statistics
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import KVLAB
from kvlab.summarize import summarize


def line(config, name, doc, ttft):
    return json.dumps({"config": config, "pass": name, "doc": doc, "doc_tokens": 4864,
                       "ttft_ms": ttft, "total_ms": ttft + 200})


def run_summarize(tmp_path, text, output="out.json"):
    source = tmp_path / "in.jsonl"
    source.write_text(text)
    proc = subprocess.run([sys.executable, "-S", str(KVLAB / "summarize.py"), str(source),
                           str(tmp_path / output)], capture_output=True, text=True, timeout=30)
    return proc, tmp_path / output


def test_even_and_odd_counts_blank_lines_and_pass_order(tmp_path):
    text = "\n".join([
        line("lmcache", "p2", 0, 10.0), "   ", line("baseline", "p2", 0, 100.0),
        line("baseline", "p1", 0, 5.0), line("baseline", "p1", 1, 7.0),
        line("baseline", "p2", 1, 300.0), "", line("lmcache", "p2", 1, 20.0),
        line("lmcache", "p2", 2, 60.0), line("lmcache", "p1", 0, 4.0),
    ]) + "\n\n"
    proc, out = run_summarize(tmp_path, text)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert list(result) == ["baseline", "lmcache", "ratio"]
    assert list(result["baseline"]) == ["p2", "p1"]
    assert result["baseline"]["p2"] == {"n": 2, "p50_ms": 200.0, "mean_ms": 200.0}
    assert result["baseline"]["p1"] == {"n": 2, "p50_ms": 6.0, "mean_ms": 6.0}
    assert result["lmcache"]["p2"] == {"n": 3, "p50_ms": 20.0, "mean_ms": 30.0}
    assert result["ratio"] == {"p2": {"p50": 10.0, "mean": 6.67}, "p1": {"p50": 1.5, "mean": 1.5}}


def test_ratio_uses_unrounded_statistics_and_is_null_for_zero(tmp_path):
    text = "\n".join([line("baseline", "a", 0, 1.04), line("lmcache", "a", 0, 0.96),
                      line("baseline", "b", 0, 3.0), line("lmcache", "b", 0, 0)])
    proc, out = run_summarize(tmp_path, text)
    result = json.loads(out.read_text())
    assert result["lmcache"]["a"]["p50_ms"] == 1.0
    assert result["ratio"]["a"]["p50"] == round(1.04 / 0.96, 2) == 1.08
    assert result["ratio"]["b"] == {"p50": None, "mean": None}


def test_pass_only_in_one_config_has_no_ratio(tmp_path):
    proc, out = run_summarize(tmp_path, line("baseline", "only", 0, 5) + "\n"
                              + line("lmcache", "x", 0, 5))
    assert json.loads(out.read_text())["ratio"] == {}


@pytest.mark.parametrize("bad, reason", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "total_ms": 1}),
     "missing field ttft_ms"),
    (json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1,
                 "ttft_ms": "fast", "total_ms": 1}), "ttft_ms must be a number"),
    (json.dumps({"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1,
                 "ttft_ms": True, "total_ms": 1}), "ttft_ms must be a number"),
])
def test_bad_line_names_file_and_line_and_writes_nothing(tmp_path, bad, reason):
    text = line("baseline", "p", 0, 5.0) + "\n\n" + bad + "\n"
    proc, out = run_summarize(tmp_path, text)
    assert proc.returncode != 0
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert f"in.jsonl:3: {reason}" in proc.stderr
    assert not out.exists()


def test_missing_input_and_unwritable_output(tmp_path):
    proc = subprocess.run([sys.executable, str(KVLAB / "summarize.py"), str(tmp_path / "nope"),
                           str(tmp_path / "o.json")], capture_output=True, text=True)
    assert proc.returncode != 0 and "nope" in proc.stderr
    proc, out = run_summarize(tmp_path, line("baseline", "p", 0, 5.0), output="no/dir/o.json")
    assert proc.returncode != 0 and "o.json" in proc.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "in.jsonl"]   # no temporary file left


def test_wrong_argument_count_is_a_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, str(KVLAB / "summarize.py")], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


records = st.lists(st.fixed_dictionaries({
    "config": st.sampled_from(["baseline", "lmcache"]),
    "pass": st.sampled_from(["pass1-cold", "pass2-replay", "pass3-reverse", "x"]),
    "doc": st.integers(0, 50), "doc_tokens": st.just(4864),
    "ttft_ms": st.one_of(st.integers(0, 2000), st.floats(0, 2000, allow_nan=False)),
    "total_ms": st.just(1.0)}), max_size=40)


@given(records)
def test_matches_a_direct_computation(rows):
    result = summarize(rows)
    order = list(dict.fromkeys(r["pass"] for r in rows))
    for config in ("baseline", "lmcache"):
        names = list(dict.fromkeys(r["pass"] for r in rows if r["config"] == config))
        assert list(result[config]) == names
        for name in names:
            values = [r["ttft_ms"] for r in rows if r["config"] == config and r["pass"] == name]
            ordered = sorted(values)
            mid = len(ordered) // 2
            median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
            assert result[config][name] == {"n": len(values), "p50_ms": round(median, 1),
                                            "mean_ms": round(statistics.mean(values), 1)}
    assert list(result["ratio"]) == [n for n in order
                                     if n in result["baseline"] and n in result["lmcache"]]
