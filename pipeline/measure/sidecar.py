"""The sidecar of a replay measurement: the file describes itself.

``OUTPUT.provenance.json`` beside a ``measure --trace`` (or timed pattern) output records the
engine, the served model, the hardware, the options, the workload (trace file and its
SHA-256, format, block size, seed) and the engine model ``fit`` simulates the requests with
(``engine_model``: SchedulerConfig fields). Each ``--resume`` adds a session to ``sessions``
(when, the command, the machine's load). ``read_sidecar`` gives ``fit`` the document back.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

from kvlab.summarize import write_json_atomic
from pipeline.base.errors import CLIError
from pipeline.measure.output import provenance_path

__all__ = ["KIND", "machine", "read_sidecar", "sha256", "write_sidecar"]

KIND = "measure-replay"


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def machine() -> dict:
    """This machine: CPU model, logical CPUs, memory, platform, Python, load average."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "memory_gib": memory,
            "platform": platform.platform(), "python": platform.python_version()}


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _same(part: object) -> object:
    """What must agree between sessions (a --limit may grow; a local server's port changes)."""
    if not isinstance(part, dict):
        return part
    return {k: v for k, v in part.items() if k not in ("limit", "requests", "base_url", "server")}


def write_sidecar(output: Path, document: dict, resume: bool) -> dict:
    """Write (or, resuming, extend) OUTPUT's sidecar; the document written.

    Resuming a file whose sidecar describes another workload or engine is refused.
    """
    path = provenance_path(output)
    session = {"date": _now(), "command": " ".join(["python -m pipeline", *sys.argv[1:]]),
               "load_average": [round(x, 2) for x in os.getloadavg()]}
    if resume and path.exists():
        old = read_sidecar(output)
        for key in ("workload", "timing", "engine", "served_model"):
            if _same(old.get(key)) != _same(document.get(key)):
                raise CLIError(f"--resume: {path} describes another {key} "
                               f"({json.dumps(old.get(key))[:120]}); measure into a new file")
        document = {**old, "workload": document["workload"],
                    "sessions": [*old.get("sessions", []), session]}
    else:
        document = {"kind": KIND, "version": 1, **document, "sessions": [session]}
    write_json_atomic(path, document)
    return document


def add_to_session(output: Path, fields: dict) -> dict:
    """Add ``fields`` to the last session of OUTPUT's sidecar (rewritten atomically)."""
    document = read_sidecar(output)
    document["sessions"][-1].update(fields)
    write_json_atomic(provenance_path(output), document)
    return document


def read_sidecar(output: str | Path) -> dict:
    """OUTPUT's sidecar (CLIError naming the file when missing or not one of ours)."""
    path = provenance_path(Path(output))
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CLIError(f"{output}: no sidecar {path} (measure --trace writes one)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise CLIError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise CLIError(f"{path}: not a measure replay sidecar (kind {KIND!r})")
    return document
