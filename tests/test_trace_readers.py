"""Trace readers: Mooncake and token-id JSONL into block frames; every bad input named."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SYNTHETIC_TRACE, needs_shared_trace
from hypothesis import given
from hypothesis import strategies as st

from pipeline.workloads.stream import block_stream
from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA, check_blocks
from pipeline.workloads import jsonl
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.mooncake import read_mooncake
from pipeline.workloads.tokens import read_tokens, splitmix64, token_blocks

SYNTHETIC = SYNTHETIC_TRACE
needs_trace = needs_shared_trace


def write_lines(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                            for r in records))
    return path


def mooncake(hash_ids, input_length, timestamp=0, output_length=1):
    return {"timestamp": timestamp, "input_length": input_length,
            "output_length": output_length, "hash_ids": hash_ids}


@needs_trace
def test_shared_synthetic_trace_reads_with_its_published_figures():
    trace = read_mooncake(SYNTHETIC)
    check_blocks(trace.blocks)
    assert trace.blocks.schema == BLOCK_SCHEMA and trace.requests.schema == REQUEST_SCHEMA
    assert (trace.requests.height, trace.blocks.height) == (3993, 121877)
    assert trace.blocks["block_key"].n_unique() == 43924
    assert round(trace.repeat_ratio(), 4) == 0.6396
    assert trace.requests["prompt_tokens"][0] == 40160          # first line of the file
    assert trace.blocks.filter(request=0)["block_tokens"][-1] == 40160 - 78 * 512
    stream = block_stream(trace.blocks, 512)
    assert stream.prompt_tokens.tolist() == trace.requests["prompt_tokens"].to_list()


requests_strategy = st.lists(
    st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=6, unique=True),
              st.integers(1, 8)),
    min_size=1, max_size=8)


@given(requests=requests_strategy, block_size=st.integers(1, 8))
def test_mooncake_frame_equals_a_literal_reading(requests, block_size, tmp_path_factory):
    """Each hash id one block; the last holds input_length - (n-1) * block_size tokens."""
    records = []
    for hash_ids, last in requests:
        last = min(last, block_size)
        records.append(mooncake(hash_ids, (len(hash_ids) - 1) * block_size + last))
    path = write_lines(tmp_path_factory.mktemp("m") / "t.jsonl", records)
    trace = read_mooncake(path, block_size)
    expected = [(r, i, key, block_size if i < len(rec["hash_ids"]) - 1 else
                 rec["input_length"] - i * block_size)
                for r, rec in enumerate(records) for i, key in enumerate(rec["hash_ids"])]
    assert trace.blocks.rows() == expected
    assert trace.requests["prompt_tokens"].to_list() == [r["input_length"] for r in records]


@given(prompts=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1,
                        max_size=8),
       block_size=st.integers(1, 5))
def test_token_keys_are_equal_exactly_when_prefixes_are(prompts, block_size, tmp_path_factory):
    path = write_lines(tmp_path_factory.mktemp("t") / "t.jsonl",
                       [{"timestamp": i, "tokens": p} for i, p in enumerate(prompts)])
    trace = read_tokens(path, block_size)
    check_blocks(trace.blocks)
    prefixes = [tuple(p[:min((i + 1) * block_size, len(p))])
                for p in prompts for i in range(-(-len(p) // block_size))]
    tokens = [min(block_size, len(p) - i * block_size)
              for p in prompts for i in range(-(-len(p) // block_size))]
    keys = trace.blocks["block_key"].to_list()
    assert trace.blocks["block_tokens"].to_list() == tokens
    assert len(keys) == len(prefixes)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            assert (keys[a] == keys[b]) == (prefixes[a] == prefixes[b])


def test_blank_lines_are_ignored_but_keep_line_numbers(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [mooncake([1], 5), "", "  ", mooncake([], 5)])
    with pytest.raises(TraceError, match=rf"^{path}:4: hash_ids is empty$"):
        read_mooncake(path)


BAD_MOONCAKE = [
    ("not json", "not JSON"),
    ("[1, 2]", "not a JSON object"),
    (mooncake([1, 2], 600) | {"timestamp": None}, "missing field 'timestamp'"),
    ({"timestamp": 0, "output_length": 1, "hash_ids": [1]}, "missing field 'input_length'"),
    ({"timestamp": 0, "input_length": 5, "hash_ids": [1]}, "missing field 'output_length'"),
    ({"timestamp": 0, "input_length": 5, "output_length": 1}, "missing field 'hash_ids'"),
    (mooncake([], 5), "hash_ids is empty"),
    (mooncake([1, "2"], 600), "non-integer hash_ids"),
    (mooncake([1, 2.5], 600), "non-integer hash_ids"),
    (mooncake([1, None], 600), "non-integer hash_ids"),
    (mooncake([1, True], 600), "non-integer hash_ids"),
    (mooncake([1, 2 ** 64], 600), f"hash_ids holds {2 ** 64}, beyond the 64-bit integer range"),
    (mooncake(7, 600), "hash_ids is not a list"),
    (mooncake([1, 1], 600), "repeats an id"),
    (mooncake([1, 2], 512), "input_length 512 is inconsistent with 2 hash_ids"),
    (mooncake([1, 2], 1025), "input_length 1025 is inconsistent with 2 hash_ids"),
    (mooncake([1], 5.5), "input_length is not a 64-bit integer"),
    (mooncake([1], "5"), "input_length is not a 64-bit integer"),
    (mooncake([1], 5, timestamp="now"), "timestamp is not a number"),
    (mooncake([1], 5, output_length=-1), "output_length is negative"),
]


@pytest.mark.parametrize(("record", "reason"), BAD_MOONCAKE)
def test_a_bad_mooncake_line_is_named_or_skipped(tmp_path, record, reason):
    path = write_lines(tmp_path / "t.jsonl", [mooncake([1, 2], 600), record,
                                              mooncake([1, 3], 1024, timestamp=5)])
    with pytest.raises(TraceError) as error:
        read_mooncake(path)
    assert str(error.value).startswith(f"{path}:2: ")
    assert reason in str(error.value)
    trace = read_mooncake(path, skip_bad_lines=True)
    assert [line for line, _ in trace.skipped] == [2] and reason in trace.skipped[0][1]
    assert trace.blocks["block_key"].to_list() == [1, 2, 1, 3]
    assert trace.requests["timestamp_ms"].to_list() == [0.0, 5.0]
    assert trace.lines.tolist() == [1, 3]


BAD_TOKENS = [
    ("{", "not JSON"),
    ({"timestamp": 0}, "missing field 'tokens'"),
    ({"tokens": [1]}, "missing field 'timestamp'"),
    ({"timestamp": 0, "tokens": []}, "tokens is empty"),
    ({"timestamp": 0, "tokens": [1, "a"]}, "non-integer tokens"),
    ({"timestamp": 0, "tokens": [1, 0.5]}, "non-integer tokens"),
    ({"timestamp": 0, "tokens": [1, None]}, "non-integer tokens"),
    ({"timestamp": 0, "tokens": [1, -3]}, "negative token id"),
]


@pytest.mark.parametrize(("record", "reason"), BAD_TOKENS)
def test_a_bad_token_line_is_named_or_skipped(tmp_path, record, reason):
    path = write_lines(tmp_path / "t.jsonl", [{"timestamp": 0, "tokens": [1, 2, 3]}, record])
    with pytest.raises(TraceError, match=rf"^{path}:2: .*{reason}"):
        read_tokens(path, 2)
    trace = read_tokens(path, 2, skip_bad_lines=True)
    assert trace.skipped[0][0] == 2 and trace.blocks["block_tokens"].to_list() == [2, 1]


def test_every_bad_line_is_counted_and_the_first_reported(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [mooncake([], 5), "x", mooncake([1], 5)])
    with pytest.raises(TraceError, match=r":1: hash_ids is empty \(1 more bad lines"):
        read_mooncake(path)
    assert [line for line, _ in read_mooncake(path, skip_bad_lines=True).skipped] == [1, 2]


@pytest.mark.parametrize("content", ["", "\n\n", "x\n"])
def test_a_trace_without_good_requests_is_refused(tmp_path, content):
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    with pytest.raises(TraceError, match="no requests"):
        read_mooncake(path, skip_bad_lines=True)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_tokens(tmp_path / "absent.jsonl", 16)


def test_token_hashing_is_independent_of_the_other_requests(tmp_path):
    alone = read_tokens(write_lines(tmp_path / "a.jsonl", [{"timestamp": 0, "tokens":
                                                            list(range(10))}]), 4)
    mixed = read_tokens(write_lines(tmp_path / "b.jsonl", [
        {"timestamp": 0, "tokens": [7, 7]}, {"timestamp": 1, "tokens": list(range(10))}]), 4)
    assert np.array_equal(alone.blocks["block_key"].to_numpy(),
                          mixed.blocks.filter(request=1)["block_key"].to_numpy())


BAD_TEMPLATES = [record for record, _ in BAD_MOONCAKE]


@given(lines=st.lists(st.one_of(
    st.tuples(st.just("good"), st.integers(1, 4), st.integers(1, 512)),
    st.tuples(st.just("bad"), st.integers(0, len(BAD_TEMPLATES) - 1), st.just(0)),
    st.tuples(st.just("blank"), st.just(0), st.just(0))), min_size=1, max_size=12))
def test_skipping_drops_exactly_the_bad_lines_and_names_the_first(lines, tmp_path_factory):
    records, good, bad = [], [], []
    for number, (kind, a, b) in enumerate(lines, start=1):
        if kind == "good":
            records.append(mooncake(list(range(number * 10, number * 10 + a)),
                                    (a - 1) * 512 + b))
            good.append(number)
        elif kind == "bad":
            records.append(BAD_TEMPLATES[a])
            bad.append(number)
        else:
            records.append("")
    path = write_lines(tmp_path_factory.mktemp("s") / "t.jsonl", records)
    if bad:
        with pytest.raises(TraceError, match=rf"^{path}:{bad[0]}: "):
            read_mooncake(path)
    if not good:
        with pytest.raises(TraceError, match="no requests"):
            read_mooncake(path, skip_bad_lines=True)
        return
    trace = read_mooncake(path, skip_bad_lines=True)
    assert [line for line, _ in trace.skipped] == bad
    assert trace.lines.tolist() == good
    assert trace.requests["prompt_tokens"].to_list() == [
        records[n - 1]["input_length"] for n in good]


def read_both(read, path, chunk_bytes, **options):
    """``read(path, **options)`` with pieces of ``chunk_bytes``: the trace's frames or the
    error's message."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "CHUNK_BYTES", chunk_bytes)
        try:
            trace = read(path, **options)
        except TraceError as exc:
            return str(exc)
    return (trace.blocks.rows(), trace.requests.rows(), trace.lines.tolist(), trace.skipped)


@given(lines=st.lists(st.one_of(
    st.tuples(st.just("good"), st.lists(st.integers(0, 5), min_size=1, max_size=9)),
    st.sampled_from([("bad", "x"), ("bad", '{"timestamp": 0, "tokens": []}'),
                     ("bad", '{"timestamp": 0, "tokens": [1, "a"]}'), ("blank", ""),
                     ("blank", " \t\r")])), min_size=1, max_size=10),
       chunk_bytes=st.integers(1, 80), skip=st.booleans(), last_newline=st.booleans())
def test_reading_in_pieces_changes_nothing(lines, chunk_bytes, skip, last_newline,
                                           tmp_path_factory):
    """Tokens and Mooncake files read in pieces of any size: the same frames, lines,
    skipped lines and errors as in one piece."""
    records = [json.dumps({"timestamp": i, "tokens": value}) if kind == "good" else value
               for i, (kind, value) in enumerate(lines)]
    folder = tmp_path_factory.mktemp("p")
    tokens = write_lines(folder / "t.jsonl", records)
    moon = write_lines(folder / "m.jsonl", [
        json.dumps(mooncake(sorted(set(value)), len(set(value)) * 2)) if kind == "good"
        else value for kind, value in lines])
    if not last_newline:
        for path in (tokens, moon):
            path.write_text(path.read_text()[:-1])
    whole = 1 << 30
    assert (read_both(read_tokens, tokens, chunk_bytes, block_size=2, skip_bad_lines=skip)
            == read_both(read_tokens, tokens, whole, block_size=2, skip_bad_lines=skip))
    assert (read_both(read_mooncake, moon, chunk_bytes, block_size=2, skip_bad_lines=skip)
            == read_both(read_mooncake, moon, whole, block_size=2, skip_bad_lines=skip))


def numpy_token_blocks(tokens, lengths, block_size):
    """The chained keys written out as whole-array numpy steps (the reference)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    position = np.arange(tokens.size, dtype=np.int64) - np.repeat(starts, lengths)
    with np.errstate(over="ignore"):
        token_hash = splitmix64(tokens.astype(np.int64).view(np.uint64)
                                ^ splitmix64(position.view(np.uint64)))
    n_blocks = -(-lengths // block_size)
    block_request = np.repeat(np.arange(lengths.size, dtype=np.int64), n_blocks)
    block_starts = np.concatenate(([0], np.cumsum(n_blocks)[:-1])).astype(np.int64)
    block_index = np.arange(block_request.size, dtype=np.int64) - block_starts[block_request]
    block_hash = np.add.reduceat(token_hash, starts[block_request] + block_index * block_size)
    with np.errstate(over="ignore"):
        running = np.cumsum(block_hash, dtype=np.uint64)
        before = np.concatenate(([np.uint64(0)], running))[block_starts]
        keys = splitmix64(running - np.repeat(before, n_blocks))
    sizes = np.minimum(block_size, lengths[block_request] - block_index * block_size)
    return block_request.tolist(), block_index.tolist(), keys.tolist(), sizes.tolist()


@given(prompts=st.lists(st.lists(st.integers(0, 2 ** 63 - 1), min_size=1, max_size=40),
                        min_size=1, max_size=6),
       block_size=st.integers(1, 9), first=st.integers(0, 5))
def test_compiled_token_keys_equal_the_numpy_steps(prompts, block_size, first):
    tokens = np.array([t for p in prompts for t in p], dtype=np.int64)
    frame = token_blocks(tokens, [len(p) for p in prompts], block_size, first)
    request, index, keys, sizes = numpy_token_blocks(tokens, [len(p) for p in prompts],
                                                     block_size)
    assert frame["request"].to_list() == [r + first for r in request]
    assert (frame["block_index"].to_list(), frame["block_key"].to_list(),
            frame["block_tokens"].to_list()) == (index, keys, sizes)
