"""Every trace reader (trace and plan, simulate and fleet, measure --trace) alike: gzip read
by its content whatever the name, zstd refused in one line, and one rule for timestamps that
go backwards (refused, naming file:line)."""

from __future__ import annotations

import gzip
import json

import pytest

from pipeline.cli import main
from pipeline.engine.workload import read_workload
from pipeline.measure.traffic import Timing, trace_requests
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.mooncake import read_mooncake
from pipeline.workloads.tokens import read_tokens

MOONCAKE = [{"timestamp": 10 * i, "input_length": 600, "output_length": 2,
             "hash_ids": [i % 3, 100 + i]} for i in range(12)]
TOKENS = [{"timestamp": 10 * i, "tokens": [1, 2, 3, 4, 5, 6, i + 7]} for i in range(12)]


def _text(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


#: reader name -> (records it reads, a function reading a path into its requests' count)
READERS = {
    "trace mooncake": (MOONCAKE, lambda p: read_mooncake(p).requests.height),
    "trace tokens": (TOKENS, lambda p: read_tokens(p, 4).requests.height),
    "simulate mooncake": (MOONCAKE, lambda p: len(read_workload(p, "mooncake", 16).requests)),
    "measure mooncake": (MOONCAKE, lambda p: len(trace_requests(
        p, "mooncake", Timing("trace"), "gpu-only"))),
    "measure tokens": (TOKENS, lambda p: len(trace_requests(
        p, "tokens", Timing("trace"), "gpu-only"))),
}


@pytest.mark.parametrize("name", ["trace.jsonl.gz", "renamed.jsonl"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_gzipped_trace_reads_as_its_plain_text(tmp_path, reader, name):
    records, count = READERS[reader]
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(_text(records))
    packed = tmp_path / name
    packed.write_bytes(gzip.compress(_text(records)))
    assert count(packed) == count(plain) == len(records)


@pytest.mark.parametrize("reader", list(READERS))
def test_a_zstd_trace_is_refused_in_one_line_saying_how_to_decompress(tmp_path, reader):
    path = tmp_path / "renamed.jsonl"                 # zstd's magic bytes, whatever the name
    path.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(40)))
    with pytest.raises(TraceError) as caught:
        READERS[reader][1](path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and f"zstd -d {path}" in message
    assert "\n" not in message


def test_trace_command_reads_gz_and_refuses_zst_in_one_line(tmp_path, capsys):
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(_text(MOONCAKE)))
    assert main(["trace", str(gz), "--gpu", "1024", "--cpu", "0", "--no-report",
                 "--out", str(tmp_path / "gz")]) == 0
    assert "(12 requests" in capsys.readouterr().out
    zst = tmp_path / "t.jsonl.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    assert main(["trace", str(zst), "--gpu", "1024", "--no-report",
                 "--out", str(tmp_path / "zst")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zstd -d" in err and str(zst) in err
    assert not (tmp_path / "zst").exists()


def test_a_damaged_gzip_trace_is_one_line(tmp_path):
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(_text(MOONCAKE))[:-12])        # truncated
    with pytest.raises(TraceError, match=f"^{path}: not a readable gzip file"):
        read_mooncake(path)


@pytest.mark.parametrize("reader", list(READERS))
def test_a_timestamp_going_backwards_is_refused_by_every_reader(tmp_path, reader):
    records, count = READERS[reader]
    swapped = [dict(r) for r in records]
    swapped[7]["timestamp"] = 5                        # after line 7's 60: backwards
    path = tmp_path / "back.jsonl"
    path.write_bytes(_text(swapped))
    with pytest.raises(TraceError, match=f"^{path}:8: timestamp goes backwards"):
        count(path)


def test_trace_and_simulate_refuse_the_same_backwards_line(tmp_path, capsys):
    swapped = [dict(r) for r in MOONCAKE]
    swapped[3]["timestamp"] = 0
    path = tmp_path / "back.jsonl"
    path.write_bytes(_text(swapped))
    errors = []
    for argv in (["trace", str(path), "--gpu", "1024", "--no-report"],
                 ["simulate", str(path), "--format", "mooncake", "--gpu", "200blocks"]):
        assert main([*argv, "--out", str(tmp_path / argv[0])]) == 1
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] == f"error: {path}:4: timestamp goes backwards (0.0 after " \
                                     f"an earlier line's larger value)\n"
