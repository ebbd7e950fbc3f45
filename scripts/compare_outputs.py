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

``scripts/compare_outputs.py --generate DIR`` writes every output of this checkout into DIR
first: ``lab/`` (the default run), ``docs20/`` (``--docs 20 --tokens 4096``), ``direct/``
(``--method direct --passes fwd,rev,fwd``) and ``measured-cli/`` (the ``measured`` command's
print-out and ``--json``). Run it before and after a change, then compare the two folders.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import polars as pl

# Ids: id="..." attributes, and the names altair generates (view_1, param_2, data-<hash>).
_IDS = re.compile(r'\bid="[^"]*"|\b(?:view|param|selector|data)[-_][0-9a-f]+\b')
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


ROOT = Path(__file__).resolve().parents[1]
RUNS = {"lab": [], "docs20": ["--docs", "20", "--tokens", "4096"],
        "direct": ["--method", "direct", "--passes", "fwd,rev,fwd"]}


def generate(folder: Path) -> None:
    """Write the outputs of this checkout's pipeline into ``folder`` (see the docstring)."""
    for name, options in RUNS.items():
        out = folder / name
        subprocess.run([sys.executable, "-m", "pipeline", "run", "--quiet", *options,
                        "--events-dir", str(out / "events"), "--exports-dir", str(out / "exports"),
                        "--report", str(out / "report" / "index.html")],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    out = folder / "measured-cli"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "measured-cli.stdout", "w", encoding="utf-8") as stdout:
        subprocess.run([sys.executable, "-m", "pipeline", "measured", "data/ttft.jsonl",
                        "--json", str(out / "measured-cli.json")],
                       cwd=ROOT, check=True, stdout=stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, nargs="?")
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--generate", type=Path, metavar="DIR",
                        help="write this checkout's outputs into DIR instead of comparing")
    args = parser.parse_args(argv)
    if args.generate:
        generate(args.generate)
        print(f"outputs written to {args.generate}")
        return 0
    if args.after is None:
        parser.error("give two folders to compare, or --generate DIR")
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
