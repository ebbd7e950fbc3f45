"""The engine bench runs on a Mooncake-format trace and checks fast == literal itself."""

import json

from pipeline.bench.engine_caches import bench, mooncake_blocks


def tiny_trace(tmp_path):
    """A five-request Mooncake trace (14 blocks of 512 tokens)."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": ids}
            for t, (n, ids) in enumerate([(1500, [0, 1, 2]), (1024, [0, 1]), (600, [3, 4]),
                                          (1500, [0, 1, 2]), (2000, [0, 1, 5, 6])])]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return trace


def test_mooncake_blocks_and_bench(tmp_path):
    trace = tiny_trace(tmp_path)
    frame = mooncake_blocks(trace)
    assert frame.filter(frame["request"] == 0)["block_tokens"].to_list() == [512, 512, 476]
    lines = bench(trace, capacities=4, literal=2)
    assert lines[0].startswith("trace: 5 requests, 14 blocks") and len(lines) == 3
