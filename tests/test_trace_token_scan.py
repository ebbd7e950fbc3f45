"""The compiled token-id fast path (``pipeline.workloads.token_scan``): what it takes it
reads exactly as polars and the checks do; whatever else it leaves to them, so every
frame, line number, skipped line and error stays the same."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.workloads import jsonl, token_scan, tokens
from pipeline.workloads.jsonl import TraceError
from pipeline.workloads.tokens import read_tokens

SPACE = st.sampled_from(["", "", " ", "  ", "\t", "\r", " \r"])
PLAIN_NUMBER = st.one_of(
    st.integers(0, 10 ** 17 - 1).map(str),
    st.tuples(st.integers(0, 10 ** 8), st.integers(0, 10 ** 8)).map(lambda p: f"{p[0]}.{p[1]}"),
    st.floats(0, 1e12, allow_nan=False).map(repr).filter(lambda s: "e" not in s))
ODD_NUMBER = st.sampled_from(["-1", "-0", "1e3", "1.5E-2", "01", "1.", ".5", "0.1234567890123456789",
                              "123456789012345678", "null", '"5"', "true", "[1]", "1x"])
TOKEN = st.one_of(st.integers(0, 10 ** 6).map(str), st.integers(0, 10 ** 18 - 1).map(str))
ODD_TOKEN = st.sampled_from(["-1", "01", "1.0", "1e2", "null", '"7"', "9223372036854775807",
                             "9223372036854775808", "12345678901234567890", "true", "[]"])
EXTRA_VALUE = st.sampled_from(['"abc"', '""', "12", "-3.5e2", "true", "false", "null"])
ODD_EXTRA = st.sampled_from(['"a\\"b"', '"\\u00e9"', '"é"', "[1, 2]", '{"a": 1}', "tru", "01",
                             '"a\tb"', "1.", "-"])
ODDITIES = ("stamp", "token", "extra", "repeat", "drop", "garbage")


@st.composite
def token_line(draw) -> str:
    """A token-id line: plain and good, or with exactly one odd part (one of ``ODDITIES``)."""
    odd = draw(st.sampled_from((None, None) + ODDITIES))
    stamp = draw(ODD_NUMBER if odd == "stamp" else PLAIN_NUMBER)
    items = draw(st.lists(TOKEN, min_size=1, max_size=6))
    if odd == "token":
        items.insert(draw(st.integers(0, len(items))), draw(ODD_TOKEN))
        if draw(st.integers(0, 5)) == 0:
            items = []
    space = draw(SPACE)
    fields = [f'"timestamp"{draw(SPACE)}:{space}{stamp}',
              f'"tokens":{space}[{space}' + f"{space},{draw(SPACE)}".join(items) + f"{space}]"]
    if odd == "extra" or draw(st.integers(0, 3)) == 0:
        value = draw(ODD_EXTRA if odd == "extra" else EXTRA_VALUE)
        fields.insert(draw(st.integers(0, 2)), f'"extra": {value}')
    if odd == "repeat":
        fields.append(draw(st.sampled_from(['"tokens": [1]', '"timestamp": 2',
                                            '"t\\u006fkens": [1]', '"extra": 1, "extra": 2'])))
    if odd == "drop":
        fields.pop(draw(st.integers(0, len(fields) - 1)))
    order = draw(st.permutations(fields))
    text = "{" + draw(SPACE) + f",{draw(SPACE)}".join(order) + draw(SPACE) + "}"
    if odd == "garbage":
        text = draw(st.sampled_from([text + " x", text[:-1], "[" + text + "]", "not json",
                                     text + text, text + ",", "\x0b" + text]))
    return draw(SPACE) + text + draw(SPACE)


def _read(path, skip, fast):
    with pytest.MonkeyPatch.context() as patch:
        if not fast:
            patch.setattr(tokens, "scan_piece", lambda raw: None)
        try:
            trace = read_tokens(path, 2, skip)
        except TraceError as exc:
            return str(exc)
    return (trace.blocks.rows(), trace.requests.rows(), trace.lines.tolist(), trace.skipped)


# 150 examples (KVLAB_EXAMPLES raises it): each costs ~20 ms, two whole reads through polars;
# every refusal is also pinned line by line below, the values by the plain-lines property
@settings(max_examples=max(150, settings.default.max_examples), deadline=None)
@given(lines=st.lists(st.one_of(token_line(), st.sampled_from(["", " ", "\t\r"])),
                      min_size=1, max_size=8),
       skip=st.booleans(), bom=st.booleans(), last_newline=st.booleans(),
       chunk_bytes=st.sampled_from([40, 1 << 30]))
def test_the_fast_path_reads_what_polars_reads(lines, skip, bom, last_newline, chunk_bytes,
                                              tmp_path_factory):
    text = ("\ufeff" if bom else "") + "\n".join(lines) + ("\n" if last_newline else "")
    path = tmp_path_factory.getbasetemp() / "token-scan.jsonl"      # one file, rewritten
    path.write_bytes(text.encode("utf-8"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jsonl, "CHUNK_BYTES", chunk_bytes)
        assert _read(path, skip, fast=True) == _read(path, skip, fast=False)


@given(lines=st.lists(st.tuples(PLAIN_NUMBER, st.lists(TOKEN, min_size=1, max_size=5)),
                      min_size=1, max_size=6))
def test_plain_lines_take_the_fast_path_with_polars_values(lines):
    text = "".join(f'{{"timestamp": {stamp}, "tokens": [{", ".join(items)}]}}\n'
                   for stamp, items in lines)
    scanned = token_scan.scan_piece(text.encode())
    assert scanned is not None
    parsed = pl.read_ndjson(text.encode(), schema={"timestamp": pl.Float64,
                                                   "tokens": pl.List(pl.Int64)})
    assert scanned.timestamps.tolist() == parsed["timestamp"].to_list()
    assert scanned.lengths.tolist() == parsed["tokens"].list.len().to_list()
    assert scanned.tokens.tolist() == parsed["tokens"].explode().to_list()
    assert scanned.lines.tolist() == list(range(1, len(lines) + 1))


@pytest.mark.parametrize("line", [
    '{"timestamp": 1, "tokens": [-1]}', '{"timestamp": 1, "tokens": []}',
    '{"timestamp": 1}', '{"tokens": [1]}', '{"timestamp": 1, "tokens": [1], "tokens": [2]}',
    '{"timestamp": -1, "tokens": [1]}', '{"timestamp": 1e3, "tokens": [1]}',
    '{"timestamp": 1, "tokens": [1], "x": {"y": 1}}', '{"timestamp": 1, "tokens": [1]} 2',
    '{"timestamp": 1, "tokens": [1234567890123456789]}', '{"ti\\u006destamp": 1, "tokens": [1]}',
    '{"timestamp": 1, "tokens": [01]}', '{"timestamp": 01, "tokens": [1]}',
    '{"timestamp": 1, "tokens": [1.0]}', '{"timestamp": 1, "tokens": [1], "x": "a\tb"}',
    '{"timestamp": 1, "tokens": [1], "x": "\u00e9"}', '{"timestamp": 1, "tokens": [1], "x": tru}',
    '{"timestamp": 1, "tokens": [1],}', '\x0b{"timestamp": 1, "tokens": [1]}',
    '{"timestamp": 1.5.5, "tokens": [1]}', '{"timestamp": 123456789012345678, "tokens": [1]}',
    '{"timestamp": 1, "tokens": [1], "max_tokens": 3}',
    '{"timestamp": 1, "tokens": [1], "output_token_ids": [7]}'])
def test_anything_but_a_plain_good_line_is_left_to_polars(line):
    assert token_scan.scan_piece(f'{{"timestamp": 0, "tokens": [5]}}\n{line}\n'.encode()) is None


def test_the_shared_numbers_of_a_piece_are_bounded():
    """A cut-off last line writes at most one token past the bound and is refused."""
    assert token_scan.scan_piece(b'{"timestamp": 0, "tokens": [5') is None
    scanned = token_scan.scan_piece(b'\n\n{"timestamp": 0, "tokens": [5, 6]}')
    assert scanned.lines.tolist() == [3] and scanned.tokens.tolist() == [5, 6]
    assert np.array_equal(scanned.lengths, [2])
