"""The six committed exports in kvlab/ equal what the scripts produce now."""

import json
import subprocess
import sys

from conftest import KVLAB, ROOT
from kvlab.make_exports import scenario_exports
from kvlab.summarize import read_records, summarize


def load(name):
    return json.loads((KVLAB / name).read_text())


def test_committed_scenario_exports_are_current():
    for name, document in scenario_exports().items():
        assert load(name) == document, name


def test_exports_hold_the_lab_findings():
    assert load("cyclic.json")["passes"][1]["gpu_hits"] == 0
    assert load("baseline.json")["passes"][2]["hit_docs"] == [9, 8, 7, 6]
    assert load("cliff.json") == {"21520": 0, "30000": 0, "40000": 0, "45000": 0,
                                  "50109": 0, "50110": 10}
    assert list(load("cliff.json")) == ["21520", "30000", "40000", "45000", "50109", "50110"]
    offload = load("offload.json")["passes"]
    assert (offload[1]["cpu_hits"], offload[2]["gpu_hits"], offload[2]["cpu_hits"]) == (10, 4, 6)
    assert list(load("cpu_cliff.json")) == ["0", "20000", "30000", "40000", "50109", "50110",
                                            "56000"]


def test_exports_equal_scenario_cli_output():
    out = subprocess.run([sys.executable, "-S", str(KVLAB / "scenario.py"), "--gpu", "21520",
                          "--cpu", "56000", "--passes", "fwd,fwd,rev"], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == load("offload.json")


def test_measured_export_is_the_summary_of_a_byte_copy():
    source = json.loads((KVLAB / "measured_source.json").read_text())
    if source["synthetic"]:
        assert (KVLAB / "ttft.jsonl").read_bytes() == (ROOT / "data" / "ttft.jsonl").read_bytes()
    assert load("measured.json") == summarize(read_records(str(KVLAB / "ttft.jsonl")))


def test_make_exports_writes_all_six_elsewhere(tmp_path):
    proc = subprocess.run([sys.executable, "-S", str(KVLAB / "make_exports.py"), "--out-dir",
                           str(tmp_path), "--measured", str(ROOT / "data" / "ttft.jsonl")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for name in ("cyclic.json", "baseline.json", "cliff.json", "offload.json",
                 "cpu_cliff.json", "measured.json"):
        assert json.loads((tmp_path / name).read_text()) == load(name)
    assert (tmp_path / "ttft.jsonl").read_bytes() == (ROOT / "data" / "ttft.jsonl").read_bytes()


def test_bad_measured_file_leaves_previous_exports(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"config": "baseline"}\n')
    proc = subprocess.run([sys.executable, "-S", str(KVLAB / "make_exports.py"), "--out-dir",
                           str(tmp_path), "--measured", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and "bad.jsonl:1: missing fields" in proc.stderr
    assert not (tmp_path / "measured.json").exists() and not (tmp_path / "ttft.jsonl").exists()
