"""The fleet's frames on fixed configurations (every router x live or stale view x sync
or async x no, own or shared CPU tier x compiled or Python step times) equal those the
code wrote before its speed-ups (``tests/data/fleet_frames.json``, written by
``scripts/fleet_frames_digest.py --write`` at that commit): no decision or output moved."""

import json
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import fleet_frames_digest  # noqa: E402


def test_the_fleet_frames_equal_the_recorded_digests():
    """Without the shared trace (a fresh clone) the patterns' 112 configurations still run;
    the Mooncake slice's 16 need it."""
    expected = json.loads((ROOT / "tests" / "data" / "fleet_frames.json").read_text())
    got = fleet_frames_digest.run_all(quick=True)
    mooncake = [key for key in got if key.startswith("mooncake/")]
    assert len(mooncake) == (16 if fleet_frames_digest.shared_trace() else 0)
    assert len(got) == 112 + len(mooncake) and set(got) <= set(expected)
    assert [key for key, value in got.items() if expected[key] != value] == []


def test_the_digests_leave_the_mooncake_slice_out_without_the_shared_trace(monkeypatch,
                                                                            tmp_path):
    monkeypatch.setattr(fleet_frames_digest, "TRACES", (tmp_path / "absent.jsonl",))
    assert [name for name, *_ in fleet_frames_digest.workloads()] == ["groups", "multi-turn"]
