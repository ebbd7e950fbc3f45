"""The measured TTFT file (``ttft.jsonl``): one request per line, loaded into polars.

Each line is a JSON object with ``config``, ``pass``, ``doc``, ``doc_tokens``, ``ttft_ms``
and ``total_ms`` (see data/README.md). Lines are validated by
``kvlab.summarize.read_numbered_records``, so a bad line gives exactly the same
``file:line: reason`` as kvlab/summarize.py; on top of that ``doc`` and ``doc_tokens`` must
be 64-bit integers (``doc`` >= 0, ``doc_tokens`` >= 1), ``total_ms`` a finite number >= 0
(kvlab checks only ``ttft_ms``), and ``ttft_ms`` / ``total_ms`` numbers that a 64-bit float
holds exactly (same message format), so the frame holds the file's values without rounding.
kvlab/summarize.py itself stays as lenient as it is: it is the graders' contract.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Sequence

import polars as pl

from kvlab.summarize import InputError, read_numbered_records

__all__ = ["LINE_SCHEMA", "RECORD_SCHEMA", "FIELDS", "load_measured", "records_frame"]

#: The fields of each line, and its 1-based line number in the file.
LINE_SCHEMA = pl.Schema({
    "config": pl.String, "pass": pl.String, "doc": pl.Int64, "doc_tokens": pl.Int64,
    "ttft_ms": pl.Float64, "total_ms": pl.Float64, "line": pl.Int64,
})
#: A loaded file: LINE_SCHEMA plus ``request`` (see ``records_frame``).
RECORD_SCHEMA = pl.Schema({**LINE_SCHEMA, "request": pl.Int64})
FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")
INT64_RANGE = range(-2**63, 2**63)
#: The line where each row's (config, pass) first appears: orders a config's passes.
PASS_START = pl.col("line").min().over("config", "pass")


def load_measured(path: str) -> pl.DataFrame:
    """Read and validate a measured TTFT file into RECORD_SCHEMA; InputError names file:line."""
    numbered = read_numbered_records(path)
    lines = [lineno for lineno, _ in numbered]
    records = [record for _, record in numbered]
    _check_typed_fields(path, lines, records)
    return records_frame(records, lines)


def records_frame(records: Sequence[dict], lines: Sequence[int] | None = None) -> pl.DataFrame:
    """Validated records as a frame with RECORD_SCHEMA.

    ``line`` defaults to 1..n. ``request`` numbers each config's requests in reading order
    (from 0): passes in first-appearance order, file order within a pass.
    """
    columns = {field: [record[field] for record in records] for field in FIELDS}
    columns["line"] = list(range(1, len(records) + 1) if lines is None else lines)
    frame = pl.DataFrame(columns, schema=LINE_SCHEMA)
    return (frame.sort(PASS_START, "line")
                 .with_columns(request=pl.int_range(pl.len(), dtype=pl.Int64).over("config"))
                 .sort("line"))


def _typed_field_problem(record: dict) -> str | None:
    """Why a record read_records accepted does not fit RECORD_SCHEMA exactly, or None."""
    for field in ("doc", "doc_tokens"):
        value = record[field]
        if isinstance(value, bool) or not isinstance(value, int) or value not in INT64_RANGE:
            return f"{field} must be a 64-bit integer, got {reprlib.repr(value)}"
    if record["doc"] < 0:
        return f"doc must be >= 0 (a document number), got {record['doc']}"
    if record["doc_tokens"] < 1:
        return f"doc_tokens must be >= 1, got {record['doc_tokens']}"
    total = record["total_ms"]
    if isinstance(total, bool) or not isinstance(total, (int, float)):
        return f"total_ms must be a number, got {reprlib.repr(total)}"
    for field in ("ttft_ms", "total_ms"):
        if not _is_exact_float(record[field]):
            return (f"{field} is not exactly representable as a 64-bit float, "
                    f"got {reprlib.repr(record[field])}")
    if not _is_finite(total) or total < 0:
        return f"total_ms must be a finite number >= 0, got {reprlib.repr(total)}"
    return None


def _is_finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:           # an integer too large for a float
        return False


def _is_exact_float(value: float) -> bool:
    try:
        return isinstance(value, float) or float(value) == value
    except OverflowError:
        return False


def _check_typed_fields(path: str, lines: Sequence[int], records: Sequence[dict]) -> None:
    for lineno, record in zip(lines, records):
        problem = _typed_field_problem(record)
        if problem:
            raise InputError(f"{path}:{lineno}: {problem}")
