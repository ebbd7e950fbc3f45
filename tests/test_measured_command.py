"""The measured file's tiers (pipeline.ttft.attribution) and verdicts (pipeline.ttft.verdicts)
on the bundled data, and the measured command (one reader with run --measured and plan)."""

import json
import runpy
import sys
import warnings

import polars as pl
import pytest

from conftest import KVLAB, ROOT
from kvlab.summarize import read_records, summarize
from pipeline.cli import run_command
from pipeline.ttft.attribution import attribute_tiers
from pipeline.ttft.summary import stats_table, summary, tier_table
from pipeline.ttft.verdicts import separation_notes
from pipeline.workloads.measured_file import RECORD_SCHEMA, load_measured, records_frame
from pipeline.commands.synth_ttft import simulated_tiers

from measured_records import assert_same, record, write_lines

DATA = ROOT / "data" / "ttft.jsonl"

# --- the bundled data ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def data():
    return load_measured(str(DATA))


@pytest.fixture(scope="module")
def attributed(data):
    return attribute_tiers(data)


def test_bundled_summary_equals_kvlab_s_measured_json(data):
    assert_same(summary(data), summarize(read_records(str(DATA))))
    exported = json.loads((KVLAB / "measured.json").read_text())
    assert_same(summary(load_measured(str(KVLAB / "ttft.jsonl"))), exported)


def test_stats_table(data):
    table = stats_table(data)
    assert table.columns == ["config", "pass", "n", "p50_ms", "p90_ms", "min_ms", "mean_ms",
                             "max_ms", "ratio_p50", "ratio_mean"]
    assert table.select("config", "pass").rows() == [
        (c, p) for c in ("baseline", "lmcache")
        for p in ("pass1-cold", "pass2-replay", "pass3-reverse")]
    lm2 = table.row(4, named=True)
    assert lm2["n"] == 10 and round(lm2["p50_ms"], 1) == 48.6
    assert lm2["min_ms"] <= lm2["p50_ms"] <= lm2["p90_ms"] <= lm2["max_ms"]
    assert round(lm2["ratio_p50"], 2) == summary(data)["ratio"]["pass2-replay"]["p50"]
    assert table.filter(pl.col("config") == "baseline")["ratio_p50"].to_list() == [1.0] * 3


def test_attribution_matches_the_generator_s_simulation(attributed):
    assert attributed.columns == [*RECORD_SCHEMA.names(), "tier"]
    for config in ("baseline", "lmcache"):
        rows = attributed.filter(pl.col("config") == config).sort("request")
        assert rows.select("pass", "doc", pl.col("tier").cast(pl.String)).rows() == \
            simulated_tiers(config)


def tier_counts(table, config, name):
    rows = table.filter((pl.col("config") == config) & (pl.col("pass") == name))
    return dict(rows.select(pl.col("tier").cast(pl.String), "n").rows())


def test_tier_table_and_notes_on_bundled_data(attributed):
    table = tier_table(attributed)
    assert table.columns == ["config", "pass", "tier", "n", "p50_ms", "mean_ms", "min_ms",
                             "max_ms"]
    assert tier_counts(table, "lmcache", "pass3-reverse") == {"gpu": 4, "cpu": 6}
    assert tier_counts(table, "baseline", "pass3-reverse") == {"gpu": 4, "miss": 6}
    assert tier_counts(table, "lmcache", "pass2-replay") == {"cpu": 10}
    notes = separation_notes(attributed)
    assert len(notes) == 2
    assert notes[0].startswith("baseline pass3-reverse: predicted gpu (n=4, ")
    assert notes[1].startswith("lmcache pass3-reverse: predicted gpu (n=4, 30.2-32.4 ms) and "
                               "cpu (n=6, 46.5-48.2 ms) separate cleanly")
    assert all("DO NOT" not in note for note in notes)


def swapped(frame, config, name, doc_a, doc_b):
    """frame with the TTFTs of two docs of one (config, pass) exchanged."""
    where = (pl.col("config") == config) & (pl.col("pass") == name)
    ttft = dict(frame.filter(where).select("doc", "ttft_ms").rows())
    swap = {doc_a: ttft[doc_b], doc_b: ttft[doc_a]}
    return frame.with_columns(ttft_ms=pl.when(where & pl.col("doc").is_in(list(swap)))
                              .then(pl.col("doc").replace_strict(swap, default=None))
                              .otherwise("ttft_ms"))


def test_overlapping_tiers_are_reported_as_not_separating(data):
    # doc 9 is a predicted GPU hit in lmcache's reverse pass, doc 0 a CPU reload.
    notes = separation_notes(attribute_tiers(swapped(data, "lmcache", "pass3-reverse", 9, 0)))
    note = next(n for n in notes if n.startswith("lmcache pass3-reverse"))
    assert "DO NOT separate" in note and "overlap" in note and "separate cleanly" not in note
    assert "gpu (n=4, 30.2-46.5 ms) and cpu (n=6, 31.8-48.2 ms)" in note


def test_inverted_and_three_tier_notes():
    records = ([record("lmcache", "p1", d, 600.0 + d) for d in range(3)]
               + [record("lmcache", "p2", d, v) for d, v in zip((2, 0, 1, 5), (50, 30, 31, 40))])
    # GPU 2 docs, CPU 3 docs: p2 reads 2 (gpu), 0 (cpu), 1 (cpu), 5 (miss).
    attributed = attribute_tiers(records_frame(records), gpu_capacity=2, cpu_capacity=3,
                                 tokens=1)
    assert attributed["tier"].cast(pl.String).to_list()[3:] == ["gpu", "cpu", "cpu", "miss"]
    (note,) = separation_notes(attributed)
    assert note.startswith("lmcache p2: predicted gpu (n=1, 50.0-50.0 ms), cpu (n=2, "
                           "30.0-31.0 ms) and miss (n=1, 40.0-40.0 ms) DO NOT separate: ")
    assert note.endswith("DO NOT separate: every cpu TTFT is below every gpu TTFT "
                         "(31.0 < 50.0 ms), the reverse of the prediction; every miss TTFT is "
                         "below every gpu TTFT (40.0 < 50.0 ms), the reverse of the prediction.")
    faster_gpu = records_frame(records).with_columns(
        ttft_ms=pl.when(pl.col("ttft_ms") == 50).then(20.0).otherwise("ttft_ms"))
    (note,) = separation_notes(attribute_tiers(faster_gpu, 2, 3, 1))
    assert note.endswith("separate cleanly: every gpu TTFT is below every cpu TTFT (20.0 < 30.0 "
                         "ms) and every cpu TTFT is below every miss TTFT (31.0 < 40.0 ms).")


def test_close_boundaries_get_enough_digits_to_tell_them_apart():
    records = ([record("lmcache", "p1", d, 600.0) for d in range(2)]
               + [record("lmcache", "p2", d, v) for d, v in ((1, 45.01), (0, 45.04))])
    (note,) = separation_notes(attribute_tiers(records_frame(records), 1, 2, 1))
    assert note.endswith("separate cleanly: every gpu TTFT is below every cpu TTFT "
                         "(45.01 < 45.04 ms).")


def test_other_configs_are_skipped_with_a_note():
    records = [record("vllm-x", "p", 0, 1.0), record("baseline", "p", 0, 2.0),
               record("vllm-x", "p", 1, 1.0)]
    attributed = attribute_tiers(records_frame(records))
    assert attributed["tier"].cast(pl.String).to_list() == [None, "miss", None]
    assert separation_notes(attributed) == [
        "vllm-x: 2 request(s) not attributed to tiers (kvlab models only baseline = GPU tier "
        "and lmcache = GPU + CPU tiers)"]


# --- command line --------------------------------------------------------------------------

def test_cli_prints_tables_and_notes_and_writes_the_summary(tmp_path, capsys):
    out = tmp_path / "measured.json"
    assert run_command("measured", [str(DATA), "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.err == ""
    assert "pass3-reverse" in printed.out and "ratio_p50" in printed.out
    assert "lmcache pass3-reverse: predicted gpu (n=4" in printed.out
    assert json.loads(out.read_text()) == summarize(read_records(str(DATA)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measured.json"]


def test_cli_capacities_change_the_attribution(capsys):
    assert run_command("measured", [str(DATA), "--gpu", "0", "--cpu", "0"]) == 0
    assert "separate" not in capsys.readouterr().out     # every request is a miss


def test_cli_bad_input_is_one_line_and_exit_1(tmp_path, capsys):
    path = write_lines(tmp_path / "in.jsonl", [json.dumps(record("baseline", "p", 0, 1)),
                                               "{oops"])
    out = tmp_path / "o.json"
    assert run_command("measured", [path, "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:2: not valid JSON") and err.count("\n") == 1
    assert not out.exists()
    assert run_command("measured", [str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    assert run_command("measured", [str(DATA), "--json", str(tmp_path / "no" / "dir.json")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_python_dash_m_and_usage_errors(capsys, monkeypatch):
    """``python -m pipeline.commands.measured FILE`` runs the module's ``__main__`` block (through
    runpy, as ``python -m`` does, in this process)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["pipeline/commands/measured.py", "data/ttft.jsonl"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as done:
        warnings.simplefilter("ignore", RuntimeWarning)     # "found in sys.modules": it is
        runpy.run_module("pipeline.commands.measured", run_name="__main__", alter_sys=True)
    printed = capsys.readouterr()
    assert done.value.code == 0, printed.err
    assert "separate cleanly" in printed.out
    with pytest.raises(SystemExit) as usage:
        run_command("measured", [str(DATA), "--gpu", "-1"])
    assert usage.value.code == 2


# --- one reader with run --measured ---------------------------------------------------------

def _one_line_changed(tmp_path, doc):
    """A copy of the bundled file with line 4's doc changed (no longer the lab's file)."""
    lines = DATA.read_text().splitlines()
    changed = json.loads(lines[3])
    changed["doc"] = doc
    lines[3] = json.dumps(changed)
    return write_lines(tmp_path / "f.jsonl", lines)


def test_measured_refuses_a_document_outside_the_setup_as_run_does(tmp_path, capsys):
    path = _one_line_changed(tmp_path, 33)
    out = tmp_path / "o.json"
    assert run_command("measured", [path, "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:4: doc 33 is outside the measured setup's 10 "
                          "documents") and err.count("\n") == 1
    assert "--measured-docs" in err and not out.exists()
    assert run_command("run", ["--measured", path, "--report", str(tmp_path / "r.html"),
                               "--events-dir", str(tmp_path / "ev"),
                               "--exports-dir", str(tmp_path / "ex"), "--quiet"]) == 1
    assert capsys.readouterr().err == err                   # the very same line
    # the flag the hint names is accepted, and then the file is read
    assert run_command("measured", [path, "--measured-docs", "40"]) == 0
    assert "separate" in capsys.readouterr().out


def test_measured_setup_flags_cannot_contradict_the_lab_file(capsys):
    assert run_command("measured", [str(DATA), "--measured-gpu", "40000"]) == 1
    err = capsys.readouterr().err
    assert "--measured-gpu 40000" in err and err.count("\n") == 1


def test_measured_refuses_an_empty_file_in_one_line_as_run_does(tmp_path, capsys):
    path = write_lines(tmp_path / "empty.jsonl", [])
    assert run_command("measured", [path]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"error: {path}: no measurement records (the file is empty)\n"
    assert captured.out == ""


def test_plan_reads_the_measured_file_with_the_same_checks(tmp_path, capsys):
    path = _one_line_changed(tmp_path, 33)
    assert run_command("plan", ["--measured", path, "--target-hit-ratio", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:4: doc 33 is outside the measured setup's 10 "
                          "documents") and err.count("\n") == 1
    assert run_command("plan", ["--measured", path, "--measured-docs", "40",
                                "--target-hit-ratio", "0.5"]) == 0
    capsys.readouterr()
    empty = write_lines(tmp_path / "empty.jsonl", [])
    assert run_command("plan", ["--measured", empty, "--target-hit-ratio", "0.5"]) == 1
    assert capsys.readouterr().err == \
        f"error: {empty}: no measurement records (the file is empty)\n"
