"""``block_stream``'s compiled walks equal the polars reading they replace: the same
arrays for every valid frame, the same error for every invalid one."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.workloads.stream import block_stream
from pipeline.workloads.stream_kernels import dense_codes
from pipeline.workloads.blocks import BLOCK_SCHEMA, check_blocks

KEYS = st.one_of(st.integers(0, 5), st.integers(0, 2 ** 64 - 1),
                 st.sampled_from([0, 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]))


def polars_stream(blocks: pl.DataFrame, block_size: int) -> dict:
    """The polars reading (group_by, rank) the compiled walks replace."""
    check_blocks(blocks)
    full = pl.col("block_tokens") == block_size
    per_request = (blocks.group_by("request", maintain_order=True)
                   .agg(n=pl.len(), tokens=pl.col("block_tokens").cast(pl.Int64).sum(),
                        cacheable=((~full).cum_sum() == 0).sum(),
                        repeated=pl.col("block_key").is_duplicated().any()))
    if per_request["repeated"].any():
        bad = per_request.filter("repeated")["request"][0]
        raise ValueError(f"request {bad} repeats a block key: chained keys are distinct "
                         "along a prefix")
    codes = blocks.select(pl.col("block_key").rank("dense").cast(pl.Int64) - 1)
    return {
        "request": per_request["request"].cast(pl.Int64).to_list(),
        "starts": [0, *np.cumsum(per_request["n"].to_numpy()).tolist()],
        "cacheable": per_request["cacheable"].cast(pl.Int64).to_list(),
        "prompt_tokens": per_request["tokens"].to_list(),
        "codes": codes.to_series().to_list(),
        "block_index": blocks["block_index"].cast(pl.Int64).to_list(),
        "n_codes": int(codes.max().item() + 1) if blocks.height else 0}


def outcome(read, blocks, block_size):
    try:
        stream = read(blocks, block_size)
    except ValueError as exc:
        return str(exc)
    if isinstance(stream, dict):
        return stream
    assert stream.outputs is None                    # a bare frame carries no output lengths
    return {name: (value.tolist() if isinstance(value, np.ndarray) else value)
            for name, value in vars(stream).items() if name not in ("block_size", "outputs")}


@given(st.lists(KEYS, max_size=40))
def test_dense_codes_are_polars_dense_ranks(keys):
    array = np.array(keys, dtype=np.uint64)
    codes, distinct = dense_codes(array)
    expected = pl.Series(array, dtype=pl.UInt64).rank("dense").cast(pl.Int64) - 1
    assert codes.tolist() == expected.to_list()
    assert distinct == len(set(keys))


@st.composite
def frames(draw):
    """Block frames, mostly valid, sometimes unordered, misnumbered or repeating a key."""
    rows = []
    request = 0
    for _ in range(draw(st.integers(0, 6))):
        request += draw(st.integers(0, 3))
        for index in range(draw(st.integers(1, 5))):
            rows.append([request, index, draw(KEYS), draw(st.sampled_from([2, 2, 2, 1, 0, 3]))])
    if rows and draw(st.integers(0, 3)) == 0:
        row = draw(st.integers(0, len(rows) - 1))
        column = draw(st.sampled_from([0, 1, 2]))
        rows[row][column] = draw(st.integers(0, 4)) if column < 2 else \
            rows[draw(st.integers(0, len(rows) - 1))][2]
    return pl.DataFrame(rows, schema=BLOCK_SCHEMA, orient="row")


@given(frames())
def test_block_stream_equals_the_polars_reading(blocks):
    assert outcome(block_stream, blocks, 2) == outcome(polars_stream, blocks, 2)


def test_a_frame_of_another_schema_is_refused():
    with pytest.raises(ValueError, match="block frame schema"):
        block_stream(pl.DataFrame({"request": [0]}), 2)
