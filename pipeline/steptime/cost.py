"""What a step-time model reads from one executed batch, and the protocol they share.

``step_cost(record)`` takes a ``StepRecord`` of ``pipeline.engine`` (or anything with its
fields: an object or a mapping) and returns a ``StepCost``: prefill tokens, decode
sequences, the attended context (sum over scheduled requests of computed-before + new),
tokens reloaded from the CPU tier, and two figures derived from ``scheduled`` (request,
new tokens, computed before): the attention pairs (query-key pairs under the causal mask,
``new x before + new (new + 1) / 2`` per request) and the sequences that sample a token
(decodes plus the requests whose first token this batch samples).

>>> from types import SimpleNamespace as Record
>>> step_cost(Record(prefill_tokens=4, decode_seqs=1, context_tokens=14, reload_tokens=0,
...                  scheduled=[(0, 4, 0), (1, 1, 9)], first_tokens=[0]))
StepCost(prefill_tokens=4, decode_seqs=1, context_tokens=14, reload_tokens=0, attention_pairs=20, sampled_seqs=2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["StepCost", "StepTimeModel", "step_cost"]


@dataclass(frozen=True)
class StepCost:
    """The StepRecord fields a step-time model reads (see the module docstring)."""

    prefill_tokens: int
    decode_seqs: int
    context_tokens: int
    reload_tokens: int = 0
    attention_pairs: int | None = None
    sampled_seqs: int | None = None

    @property
    def tokens(self) -> int:
        """Tokens through the model this step: prefill tokens + one per decode."""
        return self.prefill_tokens + self.decode_seqs


@runtime_checkable
class StepTimeModel(Protocol):
    """Milliseconds of one executed batch; ``label`` says which model (roofline or fitted)
    wherever a figure appears, ``provenance`` where its numbers come from."""

    label: str
    provenance: str

    def step_ms(self, record: Any) -> float: ...


def _get(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def step_cost(record: Any) -> StepCost:
    """The StepCost of a StepRecord-like ``record`` (a StepCost is returned as it is)."""
    if isinstance(record, StepCost):
        return record
    scheduled = _get(record, "scheduled")
    pairs = sampled = None
    decode_seqs = int(_get(record, "decode_seqs", 0))
    if scheduled is not None:
        if int(_get(record, "prefill_tokens", 0)):
            pairs = sum(new * before + new * (new + 1) // 2 for _, new, before in scheduled)
        else:                                    # decodes only: one query over its context
            pairs = int(_get(record, "context_tokens", 0))
        first = _get(record, "first_tokens")
        sampled = decode_seqs + len(first) if first is not None else None
    return StepCost(int(_get(record, "prefill_tokens", 0)), decode_seqs,
                    int(_get(record, "context_tokens", 0)), int(_get(record, "reload_tokens", 0)),
                    pairs, sampled)
