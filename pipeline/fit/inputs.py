"""Measured replay files (``measure --trace``) as runs of requests for ``fit``.

A run is the requests of one file measured in one session of one (config, repeat, pass):
one server state and one clock, simulated together from an empty cache. Open-loop runs arrive
at their measured send times; a closed loop (the sidecar's timing ``concurrency``) is
simulated as one: a request arrives when the one ``concurrency`` places ahead finishes. Each request keeps
its arrival (``send_s``, milliseconds from the run's first send), measured TTFT and end time,
prompt tokens as the engine counts them (the server's ``prompt_tokens`` when reported, else
``input_tokens``, or ``doc_tokens``, plus a beginning-of-sequence token for text prompts), tokens to generate, its
prefix structure (``prefix_ids``) and the cached tokens the server reported, if any.
The run also keeps the machine's 1-minute load average when its session started (the
sidecar's ``sessions``), the covariate of ``fit --machine-load``, and the session's speed
probe (``measure --speed-probe``: the median TTFT of fixed prompts), which ``fit
--speed-probe`` turns into the run's ``speed``.
Failure lines (``error``) are skipped and counted. Every problem is one ``CLIError`` naming
``file:line``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.base.errors import CLIError
from pipeline.measure.probe import probe_scale
from pipeline.measure.sidecar import read_sidecar

__all__ = ["REQUIRED", "Run", "load_runs", "prompt_tokens"]

REQUIRED = ("config", "pass", "step", "doc_tokens", "ttft_ms", "total_ms", "send_s",
            "max_tokens", "prefix_ids", "prefix_block")


@dataclass
class Run:
    """The requests of one run, in arrival order (see the module docstring)."""

    file: str
    label: str                       # the timing (pass) of the run: its load level
    engine_model: dict
    lines: list[int]
    arrival_ms: np.ndarray
    ttft_ms: np.ndarray
    e2e_ms: np.ndarray
    prompt_tokens: np.ndarray
    max_tokens: np.ndarray
    prompts: list[np.ndarray]        # synthetic token ids with the measured prefix structure
    cached_tokens: np.ndarray        # server-reported (-1: not reported)
    failures: int = 0
    sidecar: dict = field(default_factory=dict)
    #: a closed loop's requests in flight (None: open loop at the measured send times)
    concurrency: int | None = None
    #: the machine's 1-minute load average when the run's session started (the sidecar's
    #: ``sessions[session].load_average[0]``; None when not recorded)
    machine_load: float | None = None
    #: the median TTFT of the session's speed probe (``measure --speed-probe``; None: none)
    speed_probe_ms: float | None = None
    #: every step time of this run x this (``fit --speed-probe``: its probe / the reference)
    speed: float = 1.0

    @property
    def n(self) -> int:
        return len(self.lines)


def prompt_tokens(prefix_ids: list[int], block: int, tokens: int, bos: bool) -> np.ndarray:
    """Token ids with the structure ``prefix_ids`` describe: block id ``k``'s ``j``-th token is
    ``k * block + j + 1`` (equal ids, equal tokens; different ids, different tokens), BOS
    (0) first when the engine adds one; ``tokens`` in all."""
    body = (np.repeat(np.asarray(prefix_ids, dtype=np.int64) * block, block)
            + np.tile(np.arange(1, block + 1, dtype=np.int64), len(prefix_ids)))
    head = np.zeros(1, dtype=np.int64) if bos else np.zeros(0, dtype=np.int64)
    out = np.concatenate([head, body])
    if tokens > out.size:
        raise ValueError(f"{tokens} tokens but prefix_ids cover only {out.size}")
    return out[:tokens]


def _read_lines(path: Path) -> list[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path}: cannot read ({exc})") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CLIError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise CLIError(f"{path}:{number}: not a JSON object")
        out.append((number, record))
    return out


def _check(path: Path, number: int, record: dict) -> None:
    missing = [name for name in REQUIRED if name not in record]
    if missing:
        raise CLIError(f"{path}:{number}: missing field {missing[0]!r} (fit reads lines of "
                       f"measure --trace or a timed pattern)")
    for name in ("ttft_ms", "total_ms", "send_s"):
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise CLIError(f"{path}:{number}: {name} must be a number >= 0, got {value!r}")
    if record["ttft_ms"] > record["total_ms"]:
        raise CLIError(f"{path}:{number}: ttft_ms {record['ttft_ms']} exceeds total_ms")
    ids, block = record["prefix_ids"], record["prefix_block"]
    if (not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids)
            or not isinstance(block, int) or block < 1):
        raise CLIError(f"{path}:{number}: prefix_ids must be a non-empty list of integers and "
                       f"prefix_block an integer >= 1")
    for name in ("doc_tokens", "max_tokens"):
        if isinstance(record[name], bool) or not isinstance(record[name], int) or record[name] < 1:
            raise CLIError(f"{path}:{number}: {name} must be an integer >= 1")


def load_runs(paths: list[Path]) -> list[Run]:
    """Every run of every file (see the module docstring)."""
    runs: list[Run] = []
    for path in paths:
        if not Path(path).is_file():               # before its sidecar: name what is wrong
            what = "is a folder" if Path(path).is_dir() else "no such file"
            raise CLIError(f"{path}: cannot read ({what})")
        sidecar = read_sidecar(path)
        bos = not str(sidecar.get("workload", {}).get("prompts", "")).startswith("token ids")
        groups: dict[tuple, list[tuple[int, dict]]] = {}
        failures = 0
        for number, record in _read_lines(path):
            if "error" in record:
                failures += 1
                continue
            _check(path, number, record)
            key = (record["config"], record.get("repeat", 0), record["pass"],
                   record.get("session", 0))
            groups.setdefault(key, []).append((number, record))
        if not groups:
            raise CLIError(f"{path}: no answered request to fit ({failures} failure line(s))")
        for (config, repeat, label, session), rows in groups.items():
            rows.sort(key=lambda item: item[1]["send_s"])
            first = rows[0][1]["send_s"]
            prompts, counts = [], []
            for number, r in rows:
                count = r.get("prompt_tokens") or r.get("input_tokens", r["doc_tokens"]) + bos
                try:
                    prompts.append(prompt_tokens(r["prefix_ids"], r["prefix_block"], count, bos))
                except ValueError as exc:
                    raise CLIError(f"{path}:{number}: {exc}") from None
                counts.append(count)
            runs.append(Run(
                file=str(path), label=label, engine_model=dict(sidecar.get("engine_model") or {}),
                lines=[n for n, _ in rows],
                arrival_ms=np.array([(r["send_s"] - first) * 1000.0 for _, r in rows]),
                ttft_ms=np.array([r["ttft_ms"] for _, r in rows], dtype=np.float64),
                e2e_ms=np.array([r["total_ms"] for _, r in rows], dtype=np.float64),
                prompt_tokens=np.array(counts, dtype=np.int64),
                max_tokens=np.array([r["max_tokens"] for _, r in rows], dtype=np.int64),
                prompts=prompts,
                cached_tokens=np.array([_cached(r) for _, r in rows], dtype=np.int64),
                failures=failures, sidecar=sidecar, concurrency=_closed(sidecar),
                machine_load=_machine_load(sidecar, session),
                speed_probe_ms=_speed_probe(sidecar, session)))
    return runs


def _cached(record: dict) -> int:
    for name in ("cached_tokens", "server_reused_tokens"):
        value = record.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return -1


def _speed_probe(sidecar: dict, session: object) -> float | None:
    """The median speed-probe TTFT the sidecar recorded for ``session`` (None: none)."""
    sessions = sidecar.get("sessions") or []
    if not isinstance(session, int) or not 0 <= session < len(sessions) \
            or not isinstance(sessions[session], dict):
        return None
    return probe_scale(sessions[session].get("speed_probe"))


def _machine_load(sidecar: dict, session: object) -> float | None:
    """The 1-minute load average the sidecar recorded when ``session`` started."""
    sessions = sidecar.get("sessions") or []
    if not isinstance(session, int) or not 0 <= session < len(sessions):
        return None
    load = (sessions[session] or {}).get("load_average") if isinstance(sessions[session],
                                                                      dict) else None
    if not isinstance(load, list) or not load:
        return None
    value = load[0]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and value >= 0 else None


def _closed(sidecar: dict) -> int | None:
    timing = sidecar.get("timing") or {}
    if timing.get("kind") == "concurrency":
        value = timing.get("concurrency")
        return value if isinstance(value, int) and value >= 1 else 1
    return None
