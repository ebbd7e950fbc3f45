"""Outputs are all-or-nothing and never replace what is not a regular file; the synthetic
stand-in is recognised by its content wherever it lies."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import KVLAB, ROOT
from kvlab.make_exports import SYNTHETIC_SHA256, is_synthetic, measured_source
from kvlab.summarize import atomic_output, write_json_atomic
from pipeline.commands.synth_ttft import generate

BUNDLED = ROOT / "data" / "ttft.jsonl"


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_fifo_and_folder_targets_are_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):
        with pytest.raises(OSError, match="refusing to replace it"):
            write_json_atomic(target, {"a": 1})
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_symlink_is_written_through_to_its_regular_file(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    with atomic_output(link) as handle:
        handle.write("new")
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("script", ["summarize.py", "make_exports.py"])
def test_scripts_refuse_a_device_or_fifo_target_with_one_line(tmp_path, script):
    fifo = tmp_path / ("measured.json" if script == "make_exports.py" else "out.json")
    os.mkfifo(fifo)
    before = snapshot(tmp_path)
    args = ([str(BUNDLED), str(fifo)] if script == "summarize.py"
            else ["--out-dir", str(tmp_path), "--measured", str(BUNDLED)])
    proc = subprocess.run([sys.executable, "-S", str(KVLAB / script), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "refusing to replace it" in proc.stderr
    assert fifo.is_fifo() and snapshot(tmp_path) == before      # nothing written at all


def test_make_exports_checks_the_measured_file_before_writing_anything(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bad.jsonl").write_text('{"config": "baseline"}\n')
    out = tmp_path / "out"
    out.mkdir()
    for name in ("empty.jsonl", "bad.jsonl"):
        proc = subprocess.run([sys.executable, "-S", str(KVLAB / "make_exports.py"),
                               "--out-dir", str(out), "--measured", str(tmp_path / name)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert str(tmp_path / name) in proc.stderr
        assert list(out.iterdir()) == []


def test_make_exports_works_when_kvlab_is_copied_alone(tmp_path):
    shutil.copytree(KVLAB, tmp_path / "kvlab", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-S", "kvlab/make_exports.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    copied, original = snapshot(tmp_path / "kvlab"), snapshot(KVLAB)
    name = next(p for p in original if p.name == "measured_source.json")
    copied.pop(name), original.pop(name)
    assert copied == original                       # the findings are reproduced exactly
    source = json.loads((tmp_path / "kvlab" / "measured_source.json").read_text())
    assert source["synthetic"] is True and source["source"] == "kvlab/ttft.jsonl"


def test_synthetic_is_decided_by_content(tmp_path):
    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(BUNDLED, copy)
    assert measured_source(str(copy)) == (str(copy), True)
    copy.write_bytes(BUNDLED.read_bytes() + b"\n")            # any other content is real
    assert measured_source(str(copy)) == (str(copy), False)
    assert not is_synthetic(str(tmp_path / "missing.jsonl"))


def test_the_generator_reproduces_the_known_synthetic_digest():
    text = "".join(json.dumps(record) + "\n" for record in generate())
    assert hashlib.sha256(text.encode()).hexdigest() in SYNTHETIC_SHA256
    assert hashlib.sha256(BUNDLED.read_bytes()).hexdigest() in SYNTHETIC_SHA256
