"""Regenerate the lab's six JSON exports in this folder (steps 2-8). Standard library only.

Usage: ``python3 kvlab/make_exports.py [--measured PATH]``

Writes cyclic.json, baseline.json, cliff.json, offload.json, cpu_cliff.json, copies the
measured TTFT file byte for byte to ttft.jsonl, summarizes it into measured.json and
records which source was used in measured_source.json. The measured source is
``/opt/fixtures/kvoffload/ttft.jsonl`` when it exists, else the bundled synthetic
``data/ttft.jsonl`` beside this folder (or ``--measured``). The full pipeline
(``python -m pipeline run``) writes the same files, cliffs from its Parquet aggregates.
"""

from __future__ import annotations

import hashlib
import os
import sys

try:
    from .scenario import run
    from .summarize import (InputError, _OneLineParser, atomic_output, check_output_path,
                            read_records, summarize, write_json_atomic)
except ImportError:  # run as a script
    from scenario import run
    from summarize import (InputError, _OneLineParser, atomic_output, check_output_path,
                           read_records, summarize, write_json_atomic)

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_MEASURED = "/opt/fixtures/kvoffload/ttft.jsonl"
BUNDLED_MEASURED = os.path.join(os.path.dirname(HERE), "data", "ttft.jsonl")

GPU_CLIFF_CAPACITIES = (21520, 30000, 40000, 45000, 50109, 50110)
CPU_CLIFF_GPU = 21520
CPU_CLIFF_CAPACITIES = (0, 20000, 30000, 40000, 50109, 50110, 56000)
OFFLOAD = {"gpu": 21520, "cpu": 56000, "passes": ["fwd", "fwd", "rev"]}
#: sha256 of the bundled synthetic stand-in (``python -m pipeline synth-ttft`` regenerates it
#: byte for byte; a test checks that): such content is reported synthetic wherever it lies.
SYNTHETIC_SHA256 = frozenset({
    "2cd8d9f12211cb5005b0328a5be0d5c2e7c27804d306c87dcc9f3a21cb36fb19",
})


def second_pass(gpu: int, cpu: int = 0) -> dict:
    """The second pass of the default documents read fwd, fwd."""
    return run(gpu=gpu, cpu=cpu, passes=["fwd", "fwd"])["passes"][1]


def scenario_exports() -> dict[str, object]:
    """The five simulator exports, file name -> document."""
    cliff = {str(gpu): second_pass(gpu) for gpu in GPU_CLIFF_CAPACITIES}
    cpu_cliff = {str(cpu): second_pass(CPU_CLIFF_GPU, cpu) for cpu in CPU_CLIFF_CAPACITIES}
    return {
        "cyclic.json": run(passes=["fwd", "fwd"]),
        "baseline.json": run(passes=["fwd", "fwd", "rev"]),
        "cliff.json": {key: p["gpu_hits"] + p["cpu_hits"] for key, p in cliff.items()},
        "offload.json": run(**OFFLOAD),
        "cpu_cliff.json": {key: p["misses"] for key, p in cpu_cliff.items()},
    }


def sha256_of(path: str) -> str:
    """The sha256 hex digest of a file's bytes."""
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def is_synthetic(path: str) -> bool:
    """Whether ``path`` holds the bundled synthetic stand-in, decided by content (its
    sha256), not by where it lies: a byte copy elsewhere is still synthetic."""
    try:
        return sha256_of(path) in SYNTHETIC_SHA256
    except OSError:
        return False


def measured_source(explicit: str | None = None) -> tuple[str, bool]:
    """(path, is_synthetic): ``explicit``, else the real fixture if present, else the bundled
    file, else this folder's own ttft.jsonl (when ``kvlab/`` is copied alone)."""
    if explicit:
        source = explicit
    elif os.path.exists(REAL_MEASURED):
        source = REAL_MEASURED
    elif os.path.exists(BUNDLED_MEASURED):
        source = BUNDLED_MEASURED
    else:
        source = os.path.join(HERE, "ttft.jsonl")
    return source, is_synthetic(source)


def measured_exports(source: str) -> dict[str, object]:
    """Validate ``source`` and build its three exports in memory (nothing is written):
    ttft.jsonl (its bytes), measured.json (its summary), measured_source.json (provenance).
    InputError names the file (and line) when it cannot be read, is malformed or is empty."""
    records = read_records(source)
    if not records:
        raise InputError(f"{source}: no measurement records (the file is empty)")
    with open(source, "rb") as handle:
        raw = handle.read()
    digest = hashlib.sha256(raw).hexdigest()
    synthetic = digest in SYNTHETIC_SHA256
    root = os.path.dirname(HERE)
    shown = os.path.relpath(source, root) if os.path.abspath(source).startswith(root + os.sep) \
        else source
    provenance = {"source": shown, "synthetic": synthetic, "sha256": digest,
                  "note": ("bundled SYNTHETIC stand-in calibrated to the published figures; "
                           "see data/README.md") if synthetic else "real measurement file"}
    return {"ttft.jsonl": raw, "measured.json": summarize(records),
            "measured_source.json": provenance}


def write_exports(out_dir: str, documents: dict[str, object]) -> None:
    """Write every document (bytes as they are, anything else as JSON) into ``out_dir``,
    each atomically, after checking that every target can be replaced."""
    targets = {name: check_output_path(os.path.join(out_dir, name)) for name in documents}
    for name, document in documents.items():
        if isinstance(document, bytes):
            with atomic_output(targets[name], binary=True) as handle:
                handle.write(document)
        else:
            write_json_atomic(targets[name], document)


def export_measured(source: str, out_dir: str = HERE) -> dict[str, object]:
    """Validate ``source``, write ttft.jsonl, measured.json and measured_source.json into
    ``out_dir``; return the provenance."""
    documents = measured_exports(source)
    write_exports(out_dir, documents)
    return documents["measured_source.json"]


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(prog="make_exports.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", help="measured TTFT file (default: the real fixture "
                        f"{REAL_MEASURED} if present, else the bundled data/ttft.jsonl, else "
                        "this folder's ttft.jsonl)")
    parser.add_argument("--out-dir", default=HERE, help="folder for the exports (default: kvlab/)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.out_dir):
        print(f"--out-dir {args.out_dir}: not a folder", file=sys.stderr)
        return 1
    source, _ = measured_source(args.measured)
    try:                       # everything is computed and checked before anything is written
        documents = {**scenario_exports(), **measured_exports(source)}
        write_exports(args.out_dir, documents)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{exc.filename or args.out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    synthetic = documents["measured_source.json"]["synthetic"]
    kind = "SYNTHETIC bundled stand-in" if synthetic else "real measurement"
    print(f"wrote 6 exports to {args.out_dir}; measured source: {source} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
