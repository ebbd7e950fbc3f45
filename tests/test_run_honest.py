"""Every run honest on any workload: all-or-nothing outputs, no overwritten findings.

Runs go through ``pipeline.cli.main`` in-process with small grids to stay fast. Bad input:
exit non-zero, one line on stderr, and every output folder byte-identical to before.
"""

import json
import shutil

import polars as pl
import pytest

from conftest import KVLAB, ROOT, folder_snapshot, run_outputs
from unrendered import without_report
from pipeline import report
from pipeline.commands import run_exports as exports
from pipeline.cli import main
from pipeline.base.config import EXPORTS_DIR, KVLAB_DIR
from pipeline.ttft.measured_setup import LAB_SETUP, resolve_setup
from pipeline.workloads.documents import DocumentWorkload

DATA = ROOT / "data" / "ttft.jsonl"
SMALL = ["--points", "6", "--grid-steps", "3", "--quiet"]




@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The lab's run (small grids): its events and exports; no test reads its report, so a
    placeholder page stands in for it (tests/unrendered.py)."""
    root = tmp_path_factory.mktemp("seed")
    with pytest.MonkeyPatch.context() as patch:
        without_report(patch)
        assert main(["run", *SMALL, "--measured", str(DATA), *run_outputs(root)]) == 0
    return root


@pytest.fixture
def previous(seeded, tmp_path):
    """Output folders that already hold a previous run's files (a copy per test)."""
    shutil.copytree(seeded, tmp_path / "out")
    return tmp_path / "out"


def run_fails(capsys, root, *args):
    before = folder_snapshot(root)
    code = main(["run", *SMALL, "--measured", str(DATA), *run_outputs(root), *args])
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert folder_snapshot(root) == before
    return err


# --- item 5: all or nothing ----------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--tokens", str(2**63)], "working set"),
    (["--docs", "4", "--tokens", str(2**61)], "working set"),
    (["--gpu-capacities", str(2**64)], "--gpu-capacities"),
    (["--grid-cpu", str(2**63)], "--grid-cpu"),
    (["--offload-cpu", str(2**63)], "--offload-cpu"),
])
def test_values_beyond_int64_fail_before_writing(previous, capsys, args, message):
    assert message in run_fails(capsys, previous, *args)


def test_a_folder_at_the_report_path_fails_before_writing(previous, capsys):
    folder = previous / "report" / "index.html"
    folder.unlink()
    folder.mkdir()
    before = folder_snapshot(previous)
    code = main(["run", *SMALL, "--measured", str(DATA), *run_outputs(previous)])
    err = capsys.readouterr().err
    assert code == 1 and "--report" in err and len(err.strip().splitlines()) == 1
    assert folder_snapshot(previous) == before


def test_zero_docs_and_tokens_are_usage_errors(tmp_path, capsys):
    for option in ("--docs", "--tokens"):
        with pytest.raises(SystemExit) as usage:
            main(["run", option, "0", *run_outputs(tmp_path)])
        assert usage.value.code == 2 and option in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_failure_after_the_simulation_writes_nothing(previous, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("report failed")
    monkeypatch.setattr(report, "render_html", broken)
    before = folder_snapshot(previous)
    with pytest.raises(RuntimeError):
        main(["run", *SMALL, "--docs", "7", "--measured", str(DATA), *run_outputs(previous)])
    assert folder_snapshot(previous) == before


def test_offload_cpu_zero_means_no_cpu_tier(tmp_path, capsys):
    assert main(["run", *SMALL, "--offload-cpu", "0", "--measured", str(DATA),
                 *run_outputs(tmp_path)]) == 0
    offload = json.loads((tmp_path / "exports" / "offload.json").read_text())
    assert all(p["cpu_hits"] == 0 for p in offload["passes"])
    assert "no CPU tier" in (tmp_path / "report" / "index.html").read_text()


# --- item 1: the measured file keeps its own setup -------------------------------------------

@pytest.fixture(scope="module")
def docs20(tmp_path_factory):
    """The README's example: 20 x 4096 with the CPU cliff at GPU 40000."""
    root = tmp_path_factory.mktemp("docs20")
    assert main(["run", *SMALL, "--docs", "20", "--tokens", "4096", "--cpu-sweep-gpu", "40000",
                 "--measured", str(DATA), *run_outputs(root)]) == 0
    return root


def test_other_workload_attributes_under_the_measured_setup_and_withholds(docs20):
    tmp_path = docs20
    requests = pl.read_parquet(tmp_path / "events" / "measured_requests.parquet")
    tiers = (requests.filter(pl.col("config") == "lmcache", pl.col("pass") == "pass3-reverse")
             ["tier"].cast(pl.String).value_counts(sort=True).rows())
    assert tiers == [("cpu", 6), ("gpu", 4)]           # the lab's setup, not the swept one
    assert not (tmp_path / "events" / "predicted_ttft.parquet").exists()
    html = (tmp_path / "report" / "index.html").read_text()
    assert "TTFT predictions withheld" in html and "5011 tokens" in html
    assert "chart-predicted" not in html
    params = json.loads((tmp_path / "exports" / "params.json").read_text())
    assert params["measured"]["setup"]["tokens"] == 5011
    assert params["ttft_predictions"].startswith("TTFT predictions withheld")


def test_more_docs_of_the_same_size_keep_the_predictions(tmp_path, capsys, monkeypatch):
    without_report(monkeypatch)
    assert main(["run", *SMALL, "--docs", "30", "--measured", str(DATA),
                 *run_outputs(tmp_path)]) == 0
    predicted = pl.read_parquet(tmp_path / "events" / "predicted_ttft.parquet")
    second = predicted.filter(pl.col("sweep") == "gpu_cliff", pl.col("pass_index") == 1)
    below = second.filter(pl.col("gpu_capacity") < 30 * 5011)["predicted_ttft_ms"]
    above = second.filter(pl.col("gpu_capacity") >= 30 * 5011)["predicted_ttft_ms"]
    assert below.min() > 500 and above.max() < 40       # recompute below, GPU hits from it


def test_a_sidecar_or_flags_give_another_files_setup(tmp_path, capsys):
    own = tmp_path / "mine.jsonl"
    own.write_bytes(DATA.read_bytes() + b"\n")          # not the synthetic bytes any more
    assert resolve_setup(str(own), False).origin.startswith("ASSUMED")
    (tmp_path / "mine.setup.json").write_text('{"docs": 10, "tokens": 5011, "gpu": 0}')
    setup = resolve_setup(str(own), False)
    assert (setup.gpu, setup.cpu) == (0, 56000) and "sidecar" in setup.origin
    assert resolve_setup(str(own), False, {"gpu": 7, "cpu": None}).gpu == 7
    assert resolve_setup(str(DATA), True) == LAB_SETUP
    out = tmp_path / "out"
    assert main(["run", *SMALL, "--measured", str(own), *run_outputs(out)]) == 0
    requests = pl.read_parquet(out / "events" / "measured_requests.parquet")
    assert set(requests["tier"].cast(pl.String)) == {"miss", "cpu"}    # GPU 0 from the sidecar


def test_the_lab_files_setup_cannot_be_contradicted_and_docs_must_fit(tmp_path, capsys):
    err = run_fails(capsys, tmp_path, "--measured-gpu", "40000")
    assert "--measured-gpu 40000" in err and "lab's setup" in err
    own = tmp_path / "mine.jsonl"
    own.write_bytes(DATA.read_bytes() + b"\n")
    err = run_fails(capsys, tmp_path / "out", "--measured", str(own), "--measured-docs", "5")
    assert "doc 5 is outside the measured setup's 5 documents" in err


# --- item 4: kvlab/ only for the lab's run ------------------------------------------------

def test_only_the_lab_run_goes_to_kvlab():
    lab = DocumentWorkload()
    assert exports.lab_differences(lab, 21520, 56000, LAB_SETUP) == []
    assert exports.exports_folder(None, []) == KVLAB_DIR
    for gpu, cpu in ((40000, 56000), (21520, 30000)):
        differences = exports.lab_differences(lab, gpu, cpu, LAB_SETUP)
        assert differences and exports.exports_folder(None, differences) == EXPORTS_DIR
    other = resolve_setup(str(ROOT / "nowhere.jsonl"), False)
    assert exports.lab_differences(lab, 21520, 56000, other)
    copy = str(ROOT / "elsewhere" / "ttft.jsonl")       # synthetic bytes, another path
    assert exports.lab_differences(lab, 21520, 56000, LAB_SETUP, copy)
    assert not exports.lab_differences(lab, 21520, 56000, LAB_SETUP, str(DATA))
    four = DocumentWorkload(10, 5011, ("fwd", "fwd", "rev", "fwd"))
    assert exports.lab_differences(four, 21520, 56000, LAB_SETUP)


def test_a_non_lab_run_cannot_write_into_kvlab(tmp_path, capsys):
    before = {p.name: p.read_bytes() for p in KVLAB.iterdir() if p.is_file()}
    code = main(["run", *SMALL, "--offload-cpu", "30000", "--exports-dir", str(KVLAB),
                 "--events-dir", str(tmp_path / "e"), "--report", str(tmp_path / "r.html")])
    err = capsys.readouterr().err
    assert code == 1 and "kvlab/ holds only the lab's findings" in err
    assert {p.name: p.read_bytes() for p in KVLAB.iterdir() if p.is_file()} == before
    assert not list(tmp_path.iterdir())


def test_passes_reach_the_exports_and_stale_files_go(previous, capsys):
    tmp_path = previous                         # the outputs of a run with the default passes
    assert (tmp_path / "exports" / "cliff.json").exists()
    assert main(["run", *SMALL, "--passes", "rev,fwd,fwd,rev", "--measured", str(DATA),
                 *run_outputs(tmp_path)]) == 0
    names = {p.name for p in (tmp_path / "exports").iterdir()}
    assert "cliff.json" not in names and "cpu_cliff.json" not in names
    baseline = json.loads((tmp_path / "exports" / "baseline.json").read_text())
    assert [p["order"] for p in baseline["passes"]] == ["rev", "fwd", "fwd", "rev"]
    assert json.loads((tmp_path / "exports" / "params.json").read_text())["passes"] == [
        "rev", "fwd", "fwd", "rev"]


# --- item 2: cliffs at this workload's points -----------------------------------------------

def test_cliff_exports_sample_the_workloads_own_edge(docs20):
    tmp_path = docs20
    cliff = json.loads((tmp_path / "exports" / "cliff.json").read_text())
    cpu_cliff = json.loads((tmp_path / "exports" / "cpu_cliff.json").read_text())
    assert (cliff["81919"], cliff["81920"]) == (0, 20)
    assert (cpu_cliff["81919"], cpu_cliff["81920"]) == (20, 0)
    assert "50109" not in (tmp_path / "report" / "index.html").read_text()


def test_the_lab_run_still_writes_the_tracked_exports_byte_for_byte(seeded):
    for path in (seeded / "exports").iterdir():
        assert path.read_bytes() == (KVLAB / path.name).read_bytes(), path.name
    assert not (seeded / "exports" / "params.json").exists()


# --- item 8: the pipeline's loader is strict (kvlab/summarize.py stays the lenient contract) --

def line(**changes):
    record = {"config": "baseline", "pass": "p1", "doc": 0, "doc_tokens": 4864,
              "ttft_ms": 10.0, "total_ms": 20.0, **changes}
    return json.dumps(record)


@pytest.mark.parametrize("text, reason", [
    ('{"config": "baseline", "pass": "p1", "doc": 0, "doc_tokens": 4864, "ttft_ms": 1, '
     '"total_ms": NaN}', "total_ms must be a finite number >= 0, got nan"),
    (line(total_ms=-1.5), "total_ms must be a finite number >= 0, got -1.5"),
    (line(doc=-1), "doc must be >= 0 (a document number), got -1"),
    (line(doc_tokens=-1), "doc_tokens must be >= 1, got -1"),
])
def test_bad_measured_values_name_file_and_line(tmp_path, capsys, text, reason):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line() + "\n" + text + "\n")
    err = run_fails(capsys, tmp_path / "out", "--measured", str(bad))
    assert err.strip() == f"error: {bad}:2: {reason}"
    from kvlab.summarize import read_records
    assert len(read_records(str(bad))) == 2                # the contract is unchanged


def test_zero_ttfts_and_one_request_read_right(tmp_path, capsys):
    own = tmp_path / "zero.jsonl"
    own.write_text(line(ttft_ms=0.0) + "\n")
    assert main(["run", "--points", "6", "--grid-steps", "3", "--measured", str(own),
                 *run_outputs(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "1 request)" in err and "1 requests" not in err and "nan" not in err
    assert "error n/a: measured mean is 0 ms" in err


# --- item 10: help and helpers ---------------------------------------------------------------

def test_curve_helpers_count_each_access_once_on_an_events_log(seeded):
    from pipeline import sweeps
    events = pl.read_parquet(seeded / "events" / "gpu_cliff.parquet")
    assert events.select("gpu_capacity").n_unique() > 1
    steps = sweeps.hit_steps(events)
    assert steps.group_by("pass_index").agg(pl.col("hits").max())["hits"].max() == 10
    at = sweeps.hits_at(events, [50109, 50110]).filter(pl.col("pass_index") == 1)
    assert at["hits"].to_list() == [0, 10]


def test_help_says_what_the_options_set(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "``" not in out
    assert "also the GPU of cyclic.json, baseline.json and offload.json" in out
    assert "0 = no CPU tier" in out and "--measured-tokens" in out
    with pytest.raises(SystemExit):
        main(["measured", "--help"], prog="python -m pipeline")
    assert capsys.readouterr().out.startswith("usage: python -m pipeline measured")


# --- item 9: readable off the defaults ------------------------------------------------------

def test_a_large_measured_file_draws_a_sample_but_exact_medians():
    from pipeline.charts import ttft
    from pipeline.base.stats import exact_median
    n = 20_000
    requests = pl.DataFrame({
        "config": ["baseline"] * n, "pass": ["p1"] * n, "doc": list(range(n)),
        "tier": pl.Series(["miss"] * n), "ttft_ms": [float(i % 997) for i in range(n)],
        "request": list(range(n))})
    frame, shown = ttft.chart_frame(requests, max_dots=1000)
    assert shown == frame.filter(pl.col("kind") == "request").height <= 1000
    median = frame.filter(pl.col("kind") == "median")["ttft_ms"].item()
    assert median == requests.select(exact_median("ttft_ms")).item()
    small, shown = ttft.chart_frame(requests.head(50))
    assert shown == 50


def test_the_heatmap_does_not_paint_zero_green_and_marks_the_edge(seeded):
    from pipeline.charts import heatmap
    aggregates = pl.read_parquet(seeded / "events" / "aggregates.parquet")
    spec = json.dumps(heatmap.heatmap_chart(aggregates, {"docs": 10, "tokens": 5011}).to_dict())
    assert heatmap.RATIO_RANGE[0] == "#eeeeee" and '"greens"' not in spec
    assert spec.count(heatmap.EDGE_COLOUR) == 2 and "50109" in spec


def test_synth_ttft_into_a_folder_is_one_line(tmp_path, capsys):
    assert main(["synth-ttft", "--output", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--output" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_default_paths_do_not_depend_on_the_working_folder():
    from pipeline.cli import build_parser
    args = build_parser().parse_args(["run"])
    for differences in ([], ["--docs 5 (lab: 10)"]):
        events, report_path = exports.output_places(args.events_dir, args.report,
                                                        differences)
        assert events.is_absolute() and report_path.is_absolute()
        lab = not differences          # the lab's run keeps the lab's places
        assert (events == ROOT / "data" / "events") is lab
        assert (report_path == ROOT / "reports" / "index.html") is lab
    assert exports.exports_folder(None, []).is_absolute() and EXPORTS_DIR.is_absolute()
    synth = build_parser().parse_args(["synth-ttft"])
    assert synth.output.startswith("/")


def test_the_javascript_bundle_is_built_once_and_kept(tmp_path, monkeypatch):
    from pipeline import charts
    calls = []

    def fake_bundle(vl_version):
        calls.append(vl_version)
        return "var vega = 1; </script>"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(charts.vlc, "javascript_bundle", fake_bundle)
    build = charts.javascript_bundle.__wrapped__          # past the in-process cache
    assert build() == build() == "var vega = 1; <\\/script>" and len(calls) == 1
    path = charts.bundle_cache_path()
    assert path.parent == tmp_path / "kvlab"
    path.write_text("var vega = 1; </scr")                # an incomplete file is rebuilt
    assert build() == "var vega = 1; <\\/script>" and len(calls) == 2


@pytest.mark.parametrize("text, reason", [
    ("{oops", "not valid JSON"), ('{"gpu": -1}', "gpu must be an integer"),
    ('{"docs": 0}', "docs and tokens must be >= 1"), ('{"cores": 2}', "unknown field 'cores'"),
])
def test_a_bad_sidecar_is_one_line_naming_it(tmp_path, capsys, text, reason):
    own = tmp_path / "mine.jsonl"
    own.write_bytes(DATA.read_bytes() + b"\n")
    (tmp_path / "mine.setup.json").write_text(text)
    err = run_fails(capsys, tmp_path / "out", "--measured", str(own))
    assert "mine.setup.json" in err and reason in err


# --- a run on other numbers goes beside the lab's report and events -------------------------

@pytest.fixture
def lab_places(tmp_path, monkeypatch):
    """The lab's and the other runs' default places, moved under tmp_path."""
    places = {"EVENTS_DIR": tmp_path / "data" / "events",
              "REPORT_PATH": tmp_path / "reports" / "index.html",
              "RUN_EVENTS_DIR": tmp_path / "data" / "events" / "run",
              "RUN_REPORT_PATH": tmp_path / "reports" / "run.html"}
    for name, path in places.items():
        monkeypatch.setattr(exports, name, path)
    return places


def test_a_run_on_other_numbers_writes_beside_the_lab_s_outputs(tmp_path, capsys,
                                                                lab_places, monkeypatch):
    without_report(monkeypatch)                 # where the page goes, not what it draws
    lab_report = lab_places["REPORT_PATH"]
    lab_report.parent.mkdir(parents=True)
    lab_report.write_text("the lab's report")
    lab_events = lab_places["EVENTS_DIR"]
    lab_events.mkdir(parents=True)
    (lab_events / "aggregates.parquet").write_bytes(b"the lab's aggregates")
    assert main(["run", "--points", "6", "--grid-steps", "3", "--docs", "5", "--tokens", "100",
                 "--exports-dir", str(tmp_path / "exports")]) == 0
    captured = capsys.readouterr()
    assert lab_report.read_text() == "the lab's report"
    assert (lab_events / "aggregates.parquet").read_bytes() == b"the lab's aggregates"
    assert lab_places["RUN_REPORT_PATH"].is_file()
    assert (lab_places["RUN_EVENTS_DIR"] / "aggregates.parquet").is_file()
    assert f"the report to {lab_places['RUN_REPORT_PATH']}" in captured.err
    assert str(lab_places["RUN_REPORT_PATH"]) in captured.out


def test_pointing_another_run_at_the_lab_s_report_says_so(tmp_path, capsys, lab_places,
                                                         monkeypatch):
    without_report(monkeypatch)
    assert main(["run", *SMALL, "--docs", "5", "--tokens", "100",
                 "--exports-dir", str(tmp_path / "exports"),
                 "--events-dir", str(tmp_path / "events"),
                 "--report", str(lab_places["REPORT_PATH"])]) == 0
    err = capsys.readouterr().err
    assert f"note: --report {lab_places['REPORT_PATH']} replaces the lab's own output" in err
    assert "--events-dir" not in err
