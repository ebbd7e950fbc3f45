"""Strict JSONL reading for the trace readers: polars parses, every bad line named.

The file is read in pieces of whole lines (``CHUNK_BYTES`` of text each, so memory stays
bounded whatever the file's size). The happy path is one ``pl.read_ndjson`` per piece with an
explicit schema (polars rejects wrong JSON types itself), then vectorized checks written as
polars expressions by each format. Only when polars refuses a piece (a line that is not JSON,
a wrong type) are its lines parsed one by one with ``json`` to find out which; that loop runs
on the error path only.

A bad line is ``file:line: reason``. By default the first one raises ``TraceError`` (nothing
is returned, so nothing gets written); with ``skip_bad_lines`` every bad line is dropped and
listed in the result. Blank lines are ignored (they are not requests) but keep the line
numbering of the file.

Compression is told by the content, not the name: a gzip file (``1f 8b``; ``.gz``) is read
through ``gzip`` (line numbers are those of the decompressed text); a zstd file (``28 b5 2f
fd``; ``.zst``) is refused in one line saying how to decompress it (the standard library has
no zstd before Python 3.14).
"""

from __future__ import annotations

import gzip
import json
import mmap
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import polars as pl
from numba import njit

__all__ = ["TraceError", "Field", "Lines", "read_lines", "read_pieces", "apply_checks",
           "checked_pieces", "refuse_backwards", "with_format_hint", "CHUNK_BYTES"]

_WHITESPACE = np.array([9, 10, 13, 32], dtype=np.uint8)
_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
_ZSTD = b"\x28\xb5\x2f\xfd"
_INT64 = (-(2 ** 63), 2 ** 63 - 1)


class TraceError(ValueError):
    """A trace that cannot be read: the message is ``file:line: reason`` (or ``file: reason``)."""


@dataclass(frozen=True)
class Field:
    """A JSON field: ``kind`` is ``"number"``, ``"int"``, ``"int list"`` or ``"key"`` (a
    string or an integer, read as a string: an id)."""

    name: str
    kind: str

    @property
    def dtype(self) -> pl.DataType:
        return {"number": pl.Float64(), "int": pl.Int64(),
                "int list": pl.List(pl.Int64), "key": pl.String()}[self.kind]

    def problem(self, value: object) -> str | None:
        """Why a parsed JSON value does not fit (None if it does, or if it is missing)."""
        if value is None:
            return None                      # missing/null: the vectorized check names it
        if self.kind == "number":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            return None if ok else f"{self.name} is not a number"
        if self.kind == "key":
            ok = isinstance(value, str) or _is_integer(value)
            return None if ok else f"{self.name} is not a string or an integer"
        if self.kind == "int":
            if _is_integer(value) and not _is_int64(value):
                return f"{self.name} {value} is beyond the 64-bit integer range"
            return None if _is_int64(value) else f"{self.name} is not a 64-bit integer"
        if not isinstance(value, list):
            return f"{self.name} is not a list"
        if not all(item is None or _is_integer(item) for item in value):
            return f"non-integer {self.name}"
        huge = next((item for item in value if item is not None and not _is_int64(item)), None)
        if huge is not None:
            return f"{self.name} holds {huge}, beyond the 64-bit integer range"
        return None


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int64(value: object) -> bool:
    return _is_integer(value) and _INT64[0] <= value <= _INT64[1]


@dataclass
class Lines:
    """The parsed good rows of a trace file (column ``line``: 1-based line number) and the
    bad lines found so far (line -> reason)."""

    path: Path
    frame: pl.DataFrame
    bad: dict[int, str] = field(default_factory=dict)


def _line_numbers(raw: bytes) -> tuple[np.ndarray, int]:
    """1-based numbers of the lines of ``raw`` holding anything but whitespace, and the
    number of newlines in ``raw``."""
    data = np.frombuffer(raw, dtype=np.uint8)
    newlines = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], newlines + 1))
    ends = np.concatenate((newlines, [data.size]))
    solid = ends > starts
    solid[solid] = ~np.isin(data[starts[solid]], _WHITESPACE)
    for i in np.flatnonzero((ends > starts) & ~solid).tolist():   # starts with white space
        solid[i] = bool(raw[starts[i]:ends[i]].strip(b" \t\r"))
    return np.flatnonzero(solid) + 1, int(newlines.size)


def _diagnose(raw: bytes, numbers: np.ndarray, fields: tuple[Field, ...]) -> dict[int, str]:
    """Lines that polars refuses, with the reason (the error path only: a Python loop)."""
    lines = raw.split(b"\n")
    bad = {}
    for number in numbers.tolist():
        try:
            record = json.loads(lines[number - 1])
        except (ValueError, UnicodeDecodeError) as exc:
            bad[number] = f"not JSON ({exc})"
            continue
        if not isinstance(record, dict):
            bad[number] = "not a JSON object"
            continue
        reason = next((r for f in fields if (r := f.problem(record.get(f.name)))), None)
        if reason:
            bad[number] = reason
    return bad


def _parse(raw: bytes, numbers: np.ndarray, fields: tuple[Field, ...]) -> pl.DataFrame:
    schema = {f.name: f.dtype for f in fields}
    if numbers.size == 0:
        return pl.DataFrame(schema=schema)
    return pl.read_ndjson(raw, schema=schema)


#: Bytes read at a time: memory stays a few times this, whatever the file's size.
CHUNK_BYTES = 32 << 20


def _read_in_pieces(handle) -> Iterator[bytes]:
    """``_pieces`` by reading (a file that cannot be mapped: empty, or not a regular file)."""
    rest, given = b"", False
    while block := handle.read(CHUNK_BYTES):
        cut = block.rfind(b"\n") + 1
        if cut:
            yield rest + block[:cut]
            rest, given = block[cut:], True
        else:
            rest += block
    if rest or not given:
        yield rest


def _mapped_pieces(mapped: mmap.mmap) -> Iterator[memoryview]:
    """``_pieces`` as views of the mapped file (no copy); a piece's pages leave the
    process's memory once the next piece is asked for."""
    view, start, size = memoryview(mapped), 0, len(mapped)
    while start < size:
        cut = size if start + CHUNK_BYTES >= size else \
            mapped.rfind(b"\n", start, start + CHUNK_BYTES) + 1
        if cut <= start:                          # a line longer than a piece
            cut = mapped.find(b"\n", start + CHUNK_BYTES) + 1 or size
        yield view[start:cut]
        page_start = start - start % mmap.PAGESIZE
        if hasattr(mmap, "MADV_DONTNEED") and cut - page_start >= mmap.PAGESIZE:
            mapped.madvise(mmap.MADV_DONTNEED, page_start,
                           (cut - page_start) // mmap.PAGESIZE * mmap.PAGESIZE)
        start = cut


def _gzip_pieces(path: Path, handle) -> Iterator[bytes]:
    """``_pieces`` of a gzip file's decompressed text; a damaged file is one TraceError."""
    try:
        with gzip.GzipFile(fileobj=handle, mode="rb") as unpacked:
            yield from _read_in_pieces(unpacked)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: not a readable gzip file ({exc})") from None


def _pieces(path: Path) -> Iterator[bytes | memoryview]:
    """The file's text in whole lines, about ``CHUNK_BYTES`` at a time (the last piece may
    lack its final newline; an empty file is one empty piece); gzip decompressed, zstd
    refused (see the module docstring)."""
    try:
        with open(path, "rb") as handle:
            head = handle.peek(len(_ZSTD))         # the first bytes, left unread
            if head.startswith(_ZSTD):
                raise TraceError(f"{path}: a zstd-compressed trace, which kvlab does not read; "
                                 f"decompress it first (zstd -d {path})")
            if head.startswith(_GZIP):
                yield from _gzip_pieces(path, handle)
                return
            try:
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except (ValueError, OSError):
                mapped = None
            if mapped is None:
                yield from _read_in_pieces(handle)
                return
        yield from _mapped_pieces(mapped)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read_piece(path: Path, raw: bytes, numbers: np.ndarray, before: int,
                fields: tuple[Field, ...]) -> Lines:
    bad: dict[int, str] = {}
    try:
        frame = _parse(raw, numbers, fields)
    except (pl.exceptions.PolarsError, ValueError):
        bad = _diagnose(raw, numbers, fields)
        if not bad:
            raise TraceError(f"{path}: polars cannot read it as JSONL") from None
        lines = raw.split(b"\n")
        numbers = np.array([n for n in numbers.tolist() if n not in bad], dtype=np.int64)
        try:
            frame = _parse(b"\n".join(lines[n - 1] for n in numbers.tolist()), numbers,
                           fields)
        except (pl.exceptions.PolarsError, ValueError) as exc:
            raise TraceError(f"{path}: polars cannot read it as JSONL ({exc})") from None
    if frame.height != numbers.size:
        raise TraceError(f"{path}: {frame.height} records parsed from {numbers.size} lines")
    frame = frame.with_columns(line=pl.Series(numbers + before, dtype=pl.Int64))
    return Lines(path, frame, {number + before: text for number, text in bad.items()})


@njit(cache=True)
def _newlines(data: np.ndarray) -> int:
    count = 0
    for byte in data:
        count += byte == 10
    return count


def _numbered_pieces(path: Path) -> Iterator[tuple[bytes | memoryview, int]]:
    """(piece, lines before it) for each piece of the file."""
    before = 0
    for raw in _pieces(path):
        if before == 0 and raw[:len(_BOM)] == _BOM:
            raw = raw[len(_BOM):]           # a UTF-8 byte order mark is no part of line 1
        yield raw, before
        before += _newlines(np.frombuffer(raw, np.uint8))


def _piece_lines(path: Path, raw: bytes | memoryview, before: int,
                 fields: tuple[Field, ...]) -> Lines:
    raw = bytes(raw)
    return _read_piece(path, raw, _line_numbers(raw)[0], before, fields)


def read_pieces(path: str | Path, fields: tuple[Field, ...]) -> Iterator[Lines]:
    """The file's ``Lines`` piece by piece (``CHUNK_BYTES`` of text each; bounded memory)."""
    path = Path(path)
    for raw, before in _numbered_pieces(path):
        yield _piece_lines(path, raw, before, fields)


def read_lines(path: str | Path, fields: tuple[Field, ...]) -> Lines:
    """Read a JSONL file into the ``fields`` (plus ``line``), collecting unparseable lines."""
    pieces = list(read_pieces(path, fields))
    bad = {number: text for piece in pieces for number, text in piece.bad.items()}
    return Lines(Path(path), pl.concat([piece.frame for piece in pieces]), bad)


def _flag(lines: Lines, reasons: list[tuple[pl.Expr, str | pl.Expr]]
          ) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """The good rows of ``lines`` and its bad (line, reason) pairs in line order."""
    reason = pl.lit(None, dtype=pl.String)
    for condition, text in reversed(reasons):
        text = pl.lit(text) if isinstance(text, str) else text
        reason = pl.when(condition).then(text).otherwise(reason)
    frame = lines.frame.with_columns(_reason=reason)
    flagged = frame.filter(pl.col("_reason").is_not_null()).select("line", "_reason")
    bad = dict(lines.bad)
    bad.update(zip(flagged["line"].to_list(), flagged["_reason"].to_list()))
    return frame.filter(pl.col("_reason").is_null()).drop("_reason"), sorted(bad.items())


def _refuse(path: Path, skipped: list[tuple[int, str]], skippable: bool) -> TraceError:
    """The first bad line; ``skippable``: the command offers --skip-bad-lines (say so)."""
    line, text = skipped[0]
    hint = "; --skip-bad-lines skips them" if skippable else ""
    more = f" ({len(skipped) - 1} more bad lines{hint})" if len(skipped) > 1 else ""
    return TraceError(f"{path}:{line}: {text}{more}")


def _no_requests(path: Path, skipped: list[tuple[int, str]]) -> TraceError:
    return TraceError(f"{path}: no requests" + (
        f" ({len(skipped)} bad lines skipped)" if skipped else ""))


def apply_checks(lines: Lines, reasons: list[tuple[pl.Expr, str | pl.Expr]],
                 skip_bad_lines: bool) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Run vectorized checks (condition true = bad line), then raise or skip.

    Returns the good rows and the skipped (line, reason) pairs in line order. Without
    ``skip_bad_lines`` the first bad line raises ``TraceError``; so does a trace with no
    good request left. (Its callers, ``simulate``, ``fleet``, ``measure``, offer no
    --skip-bad-lines, so the error does not suggest it.)
    """
    good, skipped = _flag(lines, reasons)
    if skipped and not skip_bad_lines:
        raise _refuse(lines.path, skipped, False)
    if good.height == 0:
        raise _no_requests(lines.path, skipped)
    return good, skipped


def checked_pieces(path: str | Path, fields: tuple[Field, ...],
                   reasons: list[tuple[pl.Expr, str | pl.Expr]], skip_bad_lines: bool,
                   skipped: list[tuple[int, str]],
                   fast: Callable[[bytes], pl.DataFrame | None] | None = None
                   ) -> Iterator[pl.DataFrame]:
    """``apply_checks`` piece by piece: yield each piece's good rows (bounded memory) and
    append its bad (line, reason) pairs to ``skipped``.

    The same errors as ``apply_checks``: without ``skip_bad_lines`` the first bad line
    raises (after the rest of the file is read to count the others); a trace with no good
    request raises at the end. ``fast`` (optional) reads a piece whose every line is good
    into the frame polars and the checks would give (``line`` counted within the piece),
    or returns None to leave the piece to them.
    """
    path = Path(path)
    pieces = _numbered_pieces(path)
    good_rows = 0
    for raw, before in pieces:
        frame = fast(raw) if fast is not None else None
        if frame is not None:
            good, bad = frame.with_columns(pl.col("line") + before), []
        else:
            good, bad = _flag(_piece_lines(path, raw, before, fields), reasons)
        skipped.extend(bad)
        if bad and not skip_bad_lines:
            skipped.extend(pair for rest, lines_before in pieces for pair in
                           _flag(_piece_lines(path, rest, lines_before, fields), reasons)[1])
            raise _refuse(path, skipped, True)
        if good.height:
            good_rows += good.height
            yield good
    if good_rows == 0:
        raise _no_requests(path, skipped)


def refuse_backwards(frame: pl.DataFrame, column: str, path: str | Path) -> None:
    """Every reader's one rule for arrival times: ``column`` of the good rows (with their
    ``line``) never decreases down the file, else ``TraceError`` naming the first line that
    goes back. Traces are written in arrival order (Mooncake's, vLLM's benchmark files);
    sorting one silently would replay another workload than the file's order, so it is
    refused in every command alike. A column null on every line is no timing (fine); null on
    some lines only is refused too."""
    values = frame[column]
    if values.null_count() not in (0, frame.height):
        line = int(frame.filter(values.is_null())["line"][0])
        raise TraceError(f"{path}:{line}: {column} missing (other lines have it)")
    if values.null_count():
        return
    drop = frame.filter(values.diff().fill_null(0) < 0)
    if drop.height:
        row = drop.row(0, named=True)
        raise TraceError(f"{path}:{row['line']}: {column} goes backwards ({row[column]} after "
                         f"an earlier line's larger value)")


def with_format_hint(error: TraceError, path: str | Path, fmt: str,
                     token_field: str) -> TraceError:
    """``error`` ending with the ``--format`` to give when it is a missing field and the
    first line is another format's: Mooncake's ``hash_ids``, or the command's token-id
    field ``token_field`` (``prompt_token_ids`` for simulate and fleet, ``tokens`` for trace
    and plan)."""
    if "missing field" not in str(error):
        return error
    try:
        for piece in _pieces(Path(path)):
            first = bytes(piece).lstrip(_BOM).split(b"\n", 1)[0]
            break
        fields = json.loads(first)
    except (OSError, TraceError, ValueError):
        return error
    if not isinstance(fields, dict):
        return error
    guess = ("mooncake" if "hash_ids" in fields else
             "tokens" if token_field in fields else None)
    if guess is None or guess == fmt:
        return error
    return TraceError(f"{error}; the first line looks like --format {guess} (give "
                      f"--format {guess})")
