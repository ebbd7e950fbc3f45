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
    expected = json.loads((ROOT / "tests" / "data" / "fleet_frames.json").read_text())
    got = fleet_frames_digest.run_all(quick=True)
    assert len(got) == 128 and set(got) <= set(expected)
    assert [key for key, value in got.items() if expected[key] != value] == []
