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

import argparse
import hashlib
import os
import shutil
import sys

try:
    from .scenario import run
    from .summarize import (InputError, atomic_output, read_records, summarize,
                            write_json_atomic)
except ImportError:  # run as a script
    from scenario import run
    from summarize import (InputError, atomic_output, read_records, summarize,
                           write_json_atomic)

HERE = os.path.dirname(os.path.abspath(__file__))
REAL_MEASURED = "/opt/fixtures/kvoffload/ttft.jsonl"
BUNDLED_MEASURED = os.path.join(os.path.dirname(HERE), "data", "ttft.jsonl")

GPU_CLIFF_CAPACITIES = (21520, 30000, 40000, 45000, 50109, 50110)
CPU_CLIFF_GPU = 21520
CPU_CLIFF_CAPACITIES = (0, 20000, 30000, 40000, 50109, 50110, 56000)
OFFLOAD = {"gpu": 21520, "cpu": 56000, "passes": ["fwd", "fwd", "rev"]}


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


def measured_source(explicit: str | None = None) -> tuple[str, bool]:
    """(path, is_synthetic): ``explicit``, else the real fixture if present, else bundled."""
    if explicit:
        return explicit, os.path.abspath(explicit) == os.path.abspath(BUNDLED_MEASURED)
    if os.path.exists(REAL_MEASURED):
        return REAL_MEASURED, False
    return BUNDLED_MEASURED, True


def copy_atomic(source: str, destination: str) -> None:
    """Copy ``source`` byte for byte to ``destination`` atomically."""
    with open(source, "rb") as reader, atomic_output(destination, binary=True) as writer:
        shutil.copyfileobj(reader, writer)


def export_measured(source: str, synthetic: bool, out_dir: str = HERE) -> dict[str, object]:
    """Validate ``source``, copy it to ttft.jsonl, write measured.json; return provenance."""
    read_records(source)                             # validate before touching any output
    copy = os.path.join(out_dir, "ttft.jsonl")
    copy_atomic(source, copy)
    write_json_atomic(os.path.join(out_dir, "measured.json"), summarize(read_records(copy)))
    with open(copy, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    root = os.path.dirname(HERE)
    shown = os.path.relpath(source, root) if os.path.abspath(source).startswith(root + os.sep) \
        else source
    provenance = {"source": shown, "synthetic": synthetic, "sha256": digest,
                  "note": ("bundled SYNTHETIC stand-in calibrated to the published figures; "
                           "see data/README.md") if synthetic else "real measurement file"}
    write_json_atomic(os.path.join(out_dir, "measured_source.json"), provenance)
    return provenance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make_exports.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", help="measured TTFT file (default: the real fixture "
                        f"{REAL_MEASURED} if present, else the bundled data/ttft.jsonl)")
    parser.add_argument("--out-dir", default=HERE, help="folder for the exports (default: kvlab/)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.out_dir):
        print(f"--out-dir {args.out_dir}: not a folder", file=sys.stderr)
        return 1
    try:
        for name, document in scenario_exports().items():
            write_json_atomic(os.path.join(args.out_dir, name), document)
        source, synthetic = measured_source(args.measured)
        export_measured(source, synthetic, args.out_dir)
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{exc.filename or args.out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    kind = "SYNTHETIC bundled stand-in" if synthetic else "real measurement"
    print(f"wrote 6 exports to {args.out_dir}; measured source: {source} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
