"""Summarize measured TTFT per (config, pass): n, median, mean, and baseline/lmcache ratios.

Usage: ``python3 kvlab/summarize.py ttft.jsonl measured.json``

Input: one JSON object per line with ``config, pass, doc, doc_tokens, ttft_ms,
total_ms``; whitespace-only lines are skipped. Output (written atomically)::

    {"baseline": {"pass1-cold": {"n": 10, "p50_ms": 576.0, "mean_ms": 575.3}, ...},
     "lmcache":  {...},
     "ratio":    {"pass1-cold": {"p50": 0.97, "mean": 0.97}, ...}}

p50 is the median (mean of the two middle values for an even count); ``_ms`` values are
rounded to 1 decimal, ratios (baseline / lmcache, from the unrounded statistics, null where
lmcache's is 0) to 2. Passes keep their first-appearance order. A bad line stops the run
with ``file:line: reason`` on stderr, exit status 1, and no output file. Standard library
only.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import stat
import statistics
import sys
import tempfile
from collections.abc import Iterator
from typing import IO

CONFIGS = ("baseline", "lmcache")
REQUIRED_FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")


class InputError(Exception):
    """A bad input line; the message is ``file:line: reason``."""


def _shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters for one-line messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _parse_line(path: str, lineno: int, text: str) -> dict:
    where = f"{path}:{lineno}"
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [field for field in REQUIRED_FIELDS if field not in record]
    if missing:
        raise InputError(f"{where}: missing field{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)}")
    for field in ("config", "pass"):
        if not isinstance(record[field], str):
            raise InputError(f"{where}: {field} must be a string, got {_shown(record[field])}")
    ttft = record["ttft_ms"]
    if isinstance(ttft, bool) or not isinstance(ttft, (int, float)):
        raise InputError(f"{where}: ttft_ms must be a number, got {_shown(ttft)}")
    try:
        finite = math.isfinite(ttft)
    except OverflowError:           # an integer too large for a float
        finite = False
    if not finite or ttft < 0:
        raise InputError(f"{where}: ttft_ms must be a finite number >= 0, got {_shown(ttft)}")
    return record


def read_numbered_records(path: str) -> list[tuple[int, dict]]:
    """(1-based line number, record) for every non-blank line; InputError names file:line."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = list(handle)
    except OSError as exc:
        raise InputError(f"{path}: cannot read input ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from None
    return [(lineno, _parse_line(path, lineno, line))
            for lineno, line in enumerate(lines, start=1) if line.strip()]


def read_records(path: str) -> list[dict]:
    """Parse and validate the input file; raise InputError naming file and line."""
    return [record for _, record in read_numbered_records(path)]


def _stats(values: list[float]) -> tuple[float, float]:
    return float(statistics.median(values)), float(statistics.mean(values))


def _ratio(numerator: float, denominator: float) -> float | None:
    return None if denominator == 0 else round(numerator / denominator, 2)


def summarize(records: list[dict]) -> dict:
    """Build the summary dict from validated records (see the module docstring)."""
    ttfts: dict[str, dict[str, list[float]]] = {config: {} for config in CONFIGS}
    pass_order: dict[str, None] = {}
    for record in records:
        pass_order.setdefault(record["pass"], None)
        if record["config"] in ttfts:
            ttfts[record["config"]].setdefault(record["pass"], []).append(record["ttft_ms"])
    stats = {config: {name: _stats(values) for name, values in by_pass.items()}
             for config, by_pass in ttfts.items()}
    summary: dict = {
        config: {name: {"n": len(ttfts[config][name]), "p50_ms": round(p50, 1),
                        "mean_ms": round(mean, 1)}
                 for name, (p50, mean) in stats[config].items()}
        for config in CONFIGS
    }
    summary["ratio"] = {
        name: {"p50": _ratio(stats["baseline"][name][0], stats["lmcache"][name][0]),
               "mean": _ratio(stats["baseline"][name][1], stats["lmcache"][name][1])}
        for name in pass_order if name in stats["baseline"] and name in stats["lmcache"]
    }
    return summary


def check_output_path(path: str | os.PathLike) -> str:
    """The absolute path an atomic write would replace (a symlink resolved to its target);
    ``OSError`` naming ``path`` if that exists and is not a regular file."""
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise OSError(errno.EEXIST, f"exists and is {kind}; refusing to replace it",
                      os.fspath(path))
    return target


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only on success.

    A failure removes the temporary file and leaves any previous ``path`` untouched. The
    file gets the usual permissions (0666 less the umask), not mkstemp's private 0600.
    A symlink is written through: its regular-file target is replaced and the link stays.
    A target that exists and is not a regular file (a folder, a device such as /dev/full or
    /dev/stdout, a FIFO) is refused with ``OSError`` before anything is written.
    """
    path = check_output_path(path)
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with (os.fdopen(fd, "wb") if binary else
              os.fdopen(fd, "w", encoding="utf-8", newline="")) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike, document: object) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically."""
    with atomic_output(path) as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="summarize.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="measured TTFT file, one JSON object per line")
    parser.add_argument("output", help="summary JSON to write (atomically)")
    args = parser.parse_args(argv)
    try:
        records = read_records(args.input)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 1
    unknown = sorted({r["config"] for r in records} - set(CONFIGS))
    if unknown:
        print(f"{args.input}: note: ignoring config(s) {', '.join(unknown)} "
              f"(only {' and '.join(CONFIGS)} are summarized)", file=sys.stderr)
    try:
        write_json_atomic(args.output, summarize(records))
    except OSError as exc:
        print(f"{args.output}: cannot write output ({exc.strerror or exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
