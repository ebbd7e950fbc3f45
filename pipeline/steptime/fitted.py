"""Fitted step-time coefficients: the ``Linear`` model of the JSON file ``fit`` writes.

``step_ms`` is the linear form of ``fitted_file.TERMS`` (fixed, prefill tokens, attended
context, decode sequences, reloaded tokens, and attention pairs when the file has that sixth
coefficient). ``Linear.from_document`` (``load_latency``: a file) reads a document checked by
``fitted_file.check_fitted``. A coefficient the fit could not identify (``unidentified``,
null or a number) counts as 0 ms and the model's ``notes`` say so, as they say when prompts
leave ``prompt_tokens_range``; ``chunk`` is the fitted engine's ``max_num_batched_tokens``.

>>> model = Linear({"fixed_ms": 3.0, "prefill_token_ms": 0.01, "context_token_ms": 0.0,
...                 "decode_seq_ms": 0.2, "reload_token_ms": 0.001})
>>> model.step_ms(StepCost(prefill_tokens=100, decode_seqs=5, context_tokens=900))
5.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pipeline.steptime.cost import StepCost, step_cost
from pipeline.base.fitted_step_time import (COEFFICIENTS, FITTED_KIND, NAMES, OPTIONAL,
                                           TERMS, check_fitted, read_json)

__all__ = ["COEFFICIENTS", "OPTIONAL", "Linear", "load_latency", "FITTED_KIND"]


@dataclass(frozen=True)
class Linear:
    """The linear step-time model over ``coefficients`` (every name of COEFFICIENTS)."""

    coefficients: Mapping[str, float]
    label: str = "fitted (coefficients given)"
    provenance: str = "coefficients given directly"
    notes: tuple[str, ...] = ()
    kv_bytes_per_token: int | None = None
    prompt_tokens_range: tuple[int, int] | None = None
    unidentified: tuple[str, ...] = field(default=())
    #: the fitted engine's max_num_batched_tokens (None: the file does not say)
    chunk: int | None = None
    served_model: str | None = None
    source: str = "coefficients given"
    #: ``machine_load.per_load_average`` of a ``fit --machine-load`` file (0: none): the
    #: coefficients are then an idle machine's
    per_load: float = 0.0
    file_kind: ClassVar[str | None] = FITTED_KIND    # --latency FILE of this kind

    def __post_init__(self) -> None:
        missing = [name for name in COEFFICIENTS if name not in self.coefficients]
        if missing:
            raise ValueError(f"missing coefficient(s) {', '.join(missing)}")

    def step_ms(self, record: Any) -> float:
        """Milliseconds of one executed batch: ``TERMS`` summed in their order."""
        cost: StepCost = step_cost(record)
        if self.coefficients.get("attention_pair_ms", 0.0) and cost.attention_pairs is None:
            raise ValueError("attention_pair_ms needs the scheduled requests of a step "
                             "(a StepRecord), not only its totals")
        return self._sum(lambda quantity: 1 if quantity == "one" else getattr(cost, quantity))

    def decode_run_ms(self, num_running: int, context_base: int, count: int) -> np.ndarray:
        """``step_ms`` of ``count`` pure decode steps (an engine DecodeRun), bit for bit: step
        j has ``num_running`` decodes over ``context_base + num_running x j`` context tokens
        (as many attention pairs)."""
        context = (context_base + num_running * np.arange(count)).astype(np.float64)
        run = {"one": 1, "decode_seqs": num_running, "context_tokens": context,
               "attention_pairs": context}
        return self._sum(lambda quantity: run.get(quantity, 0)) + np.zeros(count)

    def _sum(self, value: Any) -> Any:
        """``TERMS`` in order: coefficient x ``value(quantity)``, zero coefficients skipped."""
        ms = 0.0
        for name, quantity in TERMS:
            coefficient = self.coefficients.get(name, 0.0)
            if coefficient or name == "fixed_ms":
                ms = ms + coefficient * value(quantity)
        return ms

    def kernel_coefficients(self) -> tuple[str, tuple[float, ...]]:
        """("linear", coefficients in ``TERMS`` order): what ``krun.linear_ms`` sums."""
        return "linear", tuple(self.coefficients.get(name, 0.0) for name in NAMES)

    def outside(self, prompt_tokens: Any) -> tuple[int, int]:
        """(prompts outside ``prompt_tokens_range``, prompts) of an iterable of lengths."""
        lengths = list(prompt_tokens)
        if self.prompt_tokens_range is None:
            return 0, len(lengths)
        lo, hi = self.prompt_tokens_range
        return sum(1 for n in lengths if not lo <= n <= hi), len(lengths)

    def range_note(self, prompt_tokens: Any) -> str | None:
        """A note when prompts (an iterable of lengths) leave the fitted range, else None."""
        outside, count = self.outside(prompt_tokens)
        if not outside:
            return None
        lo, hi = self.prompt_tokens_range
        return (f"{outside} of {count} prompts lie outside the fitted prompt range "
                f"{lo}..{hi} tokens: the fitted step time is extrapolated there")

    def describe(self) -> str:
        """Whose step times these are, for plan's text."""
        lo, hi = self.prompt_tokens_range or (0, 0)
        idle = (f", an idle machine's step times: x (1 + {self.per_load:.3g} x load average) "
                f"on a loaded one" if self.per_load else "")
        return (f"fitted step time ({self.source}: {self.served_model}, prompts {lo}..{hi} "
                f"tokens, one request at a time{idle})")

    @classmethod
    def from_document(cls, document: Any, path: str | Path) -> Linear:
        """The model of a fitted-step-time document read from ``path``; ValueError naming
        the file and the field."""
        document, path = check_fitted(document, str(path)), Path(path)
        given, unidentified = document["coefficients"], document.get("unidentified", [])
        coefficients, notes = {}, []
        for name in NAMES:
            if name not in given:
                continue
            coefficients[name] = 0.0 if name in unidentified else float(given[name])
            if name in unidentified:
                notes.append(f"{name} was not identified by the fit: taken as 0 ms")
        kv, span = document.get("kv_bytes_per_token"), tuple(document["prompt_tokens_range"])
        stderr = document.get("stderr") or {}
        engine, served = document.get("engine", "?"), document.get("served_model", "?")
        sources = document.get("source") or []
        errors = ", ".join(f"{name} {coefficients[name]:.4g} ± {stderr[name]:.2g}"
                           if isinstance(stderr.get(name), (int, float)) else
                           f"{name} {coefficients[name]:.4g}" for name in coefficients)
        provenance = (f"fitted by least squares ({engine}, {served}) from "
                      f"{', '.join(map(str, sources)) or 'unnamed files'}: {errors}")
        if isinstance(document.get("provenance"), str):
            provenance += f"; the file says: {document['provenance']}"
        held = document.get("held_at_zero")
        if isinstance(held, list) and held:
            notes.append(f"{', '.join(map(str, held))} held at 0 by the fit")
        chunk = (document.get("engine_model") or {}).get("max_num_batched_tokens")
        per_load = (document.get("machine_load") or {}).get("per_load_average") or 0.0
        return cls(coefficients, f"fitted ({path.name}: {engine}, {served})", provenance,
                   tuple(notes), kv, span, tuple(unidentified), chunk,
                   document.get("served_model"), path.name, float(per_load))


def load_latency(path: str | Path) -> Linear:
    """The ``Linear`` model of a fitted-step-time JSON file; ValueError naming the file."""
    return Linear.from_document(read_json(path), path)
