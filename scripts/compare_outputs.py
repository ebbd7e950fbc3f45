#!/usr/bin/env python3
"""Compare two folders of pipeline outputs: prove a refactor changed nothing.

``scripts/compare_outputs.py BEFORE AFTER`` walks both folders (e.g. two trees written by
``python -m pipeline run --events-dir D/events --exports-dir D/exports --report
D/report/index.html``) and checks every file:

* ``.parquet``: the frames are equal (``polars.DataFrame.equals``, schema included);
* ``.html``: equal once white space and generated ids are removed;
* anything else (JSON exports, JSONL, text): byte for byte.

A file present on one side only is a difference. Prints one line per difference and a
verdict; exit status 0 when everything matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import polars as pl

# Ids the page generator may number differently from run to run (vega-embed, altair).
_IDS = re.compile(r"\b(?:id|view|param|data|selector)_?[-_]?[0-9a-f]{4,}\b|"
                  r'"name":\s*"(?:data|param|view|selector)_[0-9a-f_-]+"')
_SPACE = re.compile(r"\s+")


def normalized_html(text: str) -> str:
    """``text`` without white space and generated ids."""
    return _SPACE.sub("", _IDS.sub("ID", text))


def difference(before: Path, after: Path) -> str | None:
    """Why two files differ, or None when they match."""
    if before.suffix == ".parquet":
        old, new = pl.read_parquet(before), pl.read_parquet(after)
        if old.schema != new.schema:
            return f"schema {old.schema} != {new.schema}"
        return None if old.equals(new) else f"frames differ ({old.height} vs {new.height} rows)"
    if before.suffix in (".html", ".htm"):
        same = (normalized_html(before.read_text(encoding="utf-8"))
                == normalized_html(after.read_text(encoding="utf-8")))
        return None if same else "HTML differs beyond white space and ids"
    return None if before.read_bytes() == after.read_bytes() else "bytes differ"


def compare(before: Path, after: Path) -> list[str]:
    """One line per difference between the two folders (empty when they match)."""
    old = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    new = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    problems = [f"{path}: only in {before}" for path in sorted(old - new)]
    problems += [f"{path}: only in {after}" for path in sorted(new - old)]
    for path in sorted(old & new):
        why = difference(before / path, after / path)
        if why:
            problems.append(f"{path}: {why}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            parser.error(f"{folder}: not a folder")
    problems = compare(args.before, args.after)
    files = sum(1 for p in args.before.rglob("*") if p.is_file())
    print("\n".join(problems) if problems else
          f"identical: {files} files (exports byte for byte, Parquet frames equal, HTML equal "
          f"up to white space and ids)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
