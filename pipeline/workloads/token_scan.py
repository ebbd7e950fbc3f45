"""A compiled fast path for token-id JSONL pieces: ``{"timestamp": 12.5, "tokens": [...]}``.

``scan_piece`` reads one piece of whole lines (``pipeline.workloads.jsonl``'s pieces) in one
numba pass when every line is plainly good: an object with one ``timestamp`` (a decimal
number without sign or exponent, at most 17 digits) and one ``tokens`` (a non-empty list of
non-negative integers of at most 18 digits, so each fits in 64 bits), other keys (but
``max_tokens``, a field the reader keeps) holding only a number, ``true``/``false``/``null``
or an ASCII string without escapes, JSON white
space anywhere between, blank lines in between. Anything else in the piece (a bad line, a
negative or huge token, an escape, a nested value, a repeated key, non-ASCII text) makes it
return None, and the reader parses that piece with polars and its checks as before, so every
error and every value stays what polars gives. The timestamps are converted by Python's
``float`` (correctly rounded, as polars' parser is: tests/test_trace_readers.py compares).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["Scanned", "scan_piece"]

_TIMESTAMP = np.frombuffer(b"timestamp", np.uint8)
_TOKENS = np.frombuffer(b"tokens", np.uint8)
_MAX_TOKENS = np.frombuffer(b"max_tokens", np.uint8)  # a number the reader keeps: polars reads it
_TRUE = np.frombuffer(b"true", np.uint8)
_FALSE = np.frombuffer(b"false", np.uint8)
_NULL = np.frombuffer(b"null", np.uint8)
_FAIL = -1
#: Arguments as typed values, not numba literals: a literal compiles its callee once more
#: for that value.
_ZERO, _PLAIN, _ANY = np.int64(0), np.bool_(True), np.bool_(False)


class Scanned(NamedTuple):
    """A piece's good lines: 1-based line numbers in the piece, timestamps, per-line token
    counts and the tokens of all lines one after another."""

    lines: np.ndarray
    timestamps: np.ndarray
    lengths: np.ndarray
    tokens: np.ndarray


@njit(cache=True, inline="always")
def _space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _skip(data: np.ndarray, i: int, end: int) -> int:
    while i < end and _space(data[i]):
        i += 1
    return i


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _digits(data: np.ndarray, i: int, end: int) -> int:
    """The end of the run of digits at ``i``."""
    while i < end and 48 <= data[i] <= 57:
        i += 1
    return i


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _number(data: np.ndarray, i: int, end: int, plain: bool) -> int:
    """The end of a JSON number at ``i`` (``_FAIL`` if there is none); ``plain``: no sign,
    no exponent and at most 17 digits."""
    if i < end and data[i] == 45:                    # '-'
        if plain:
            return _FAIL
        i += 1
    first = i
    i = _digits(data, i, end)
    if i == first or (data[first] == 48 and i - first > 1):
        return _FAIL                                 # no digits, or a leading zero
    count = i - first
    if i < end and data[i] == 46:                    # '.'
        after = _digits(data, i + 1, end)
        if after == i + 1:
            return _FAIL
        count += after - i - 1
        i = after
    if i < end and (data[i] == 101 or data[i] == 69):  # 'e', 'E'
        if plain:
            return _FAIL
        i += 1
        if i < end and (data[i] == 43 or data[i] == 45):
            i += 1
        after = _digits(data, i, end)
        if after == i:
            return _FAIL
        i = after
    return _FAIL if plain and count > 17 else i


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _word(data: np.ndarray, i: int, end: int, word: np.ndarray) -> bool:
    if end - i != word.size:
        return False
    for k in range(word.size):
        if data[i + k] != word[k]:
            return False
    return True


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _other_value(data: np.ndarray, i: int, end: int) -> int:
    """The end of a number, literal or plain string at ``i``, else ``_FAIL``."""
    c = data[i] if i < end else 0
    if c == 34:                                      # '"': no escapes, ASCII text only
        i += 1
        while i < end and data[i] != 34:
            if data[i] == 92 or data[i] < 32 or data[i] >= 128:
                return _FAIL
            i += 1
        return i + 1 if i < end else _FAIL
    for literal in (_TRUE, _FALSE, _NULL):
        if _word(data, i, min(i + literal.size, end), literal):
            return i + literal.size
    return _number(data, i, end, _ANY)


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _line(data: np.ndarray, i: int, tokens: np.ndarray, n_tokens: int,
          spans: np.ndarray, row: int) -> tuple[int, int]:
    """Parse the object at ``data[i]`` (a string or number cannot hold a newline, so it
    ends within its line): its tokens go to ``tokens[n_tokens:]``, the timestamp's text span
    to ``spans[row]``; (the new token count, the index after the object), or ``_FAIL``."""
    end = data.size
    if data[i] != 123:                               # '{'
        return _FAIL, i
    i = _skip(data, i + 1, end)
    seen_time = False
    seen_tokens = False
    count = n_tokens
    while True:
        if i >= end or data[i] != 34:
            return _FAIL, i
        key = i + 1
        i = key
        while i < end and data[i] != 34:
            if data[i] == 92 or data[i] < 32 or data[i] >= 128:
                return _FAIL, i
            i += 1
        if i >= end:
            return _FAIL, i
        key_end = i
        i = _skip(data, i + 1, end)
        if i >= end or data[i] != 58:                # ':'
            return _FAIL, i
        i = _skip(data, i + 1, end)
        if _word(data, key, key_end, _TIMESTAMP):
            if seen_time:
                return _FAIL, i
            seen_time = True
            after = _number(data, i, end, _PLAIN)
            if after == _FAIL:
                return _FAIL, i
            spans[row, 0], spans[row, 1] = i, after
            i = after
        elif _word(data, key, key_end, _TOKENS):
            if seen_tokens or i >= end or data[i] != 91:   # '['
                return _FAIL, i
            seen_tokens = True
            i = _skip(data, i + 1, end)
            while True:
                first = i
                value = 0
                while i < end and 48 <= data[i] <= 57:
                    value = value * 10 + (data[i] - 48)
                    i += 1
                if i == first or i - first > 18 or (data[first] == 48 and i - first > 1):
                    return _FAIL, i
                tokens[count] = value
                count += 1
                i = _skip(data, i, end)
                if i < end and data[i] == 44:        # ','
                    i = _skip(data, i + 1, end)
                    continue
                if i < end and data[i] == 93:        # ']'
                    i += 1
                    break
                return _FAIL, i
        elif _word(data, key, key_end, _MAX_TOKENS):
            return _FAIL, i
        else:
            i = _other_value(data, i, end)
            if i == _FAIL:
                return _FAIL, i
        i = _skip(data, i, end)
        if i < end and data[i] == 44:
            i = _skip(data, i + 1, end)
            continue
        if i < end and data[i] == 125:               # '}'
            break
        return _FAIL, i
    if not (seen_time and seen_tokens):
        return _FAIL, i
    return count, i + 1


@njit(cache=True, no_cfunc_wrapper=True)
def _scan(data: np.ndarray, tokens: np.ndarray, lines: np.ndarray, lengths: np.ndarray,
          spans: np.ndarray) -> int:
    """Every line of ``data`` in one walk; the number of objects, or ``_FAIL`` at the first
    line the fast path does not take."""
    rows = n_tokens = i = _ZERO                   # int64, not literal 0: one compile each
    number = 1
    while True:
        i = _skip(data, i, data.size)
        if i >= data.size:
            return rows
        if data[i] == 10:                            # a blank line
            number += 1
            i += 1
            continue
        count, i = _line(data, i, tokens, n_tokens, spans, rows)
        if count == _FAIL:
            return _FAIL
        i = _skip(data, i, data.size)
        if i < data.size and data[i] != 10:
            return _FAIL                             # more after the object
        lines[rows] = number
        lengths[rows] = count - n_tokens
        n_tokens = count
        rows += 1
        number += 1
        i += 1


@njit(cache=True, no_cfunc_wrapper=True)
def _bounds(data: np.ndarray) -> tuple[int, int]:
    """(commas and closing brackets: at least the tokens, newlines)."""
    ends = 0
    newlines = 0
    for c in data:
        ends += (c == 44) | (c == 93)
        newlines += c == 10
    return ends, newlines


def scan_piece(raw: bytes | memoryview) -> Scanned | None:
    """The piece's good lines, or None when any line needs polars (see the module)."""
    data = np.frombuffer(raw, np.uint8)
    bound, newlines = _bounds(data)
    tokens = np.empty(bound + 1, np.int64)          # + 1: a bad line may write one more
    lines = np.empty(newlines + 1, np.int64)
    lengths = np.empty(newlines + 1, np.int64)
    spans = np.empty((newlines + 1, 2), np.int64)
    rows = _scan(data, tokens, lines, lengths, spans)
    if rows == _FAIL:
        return None
    lengths = lengths[:rows]
    timestamps = np.array([float(bytes(raw[s:e])) for s, e in spans[:rows].tolist()],
                          np.float64)
    return Scanned(lines[:rows], timestamps, lengths, tokens[:int(lengths.sum())])
