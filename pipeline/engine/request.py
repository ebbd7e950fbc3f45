"""A request as the engine model sees it, the engine's whole input (``EngineRequests``),
and the token sequence a request will hold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["EngineRequests", "SimRequest", "placeholder_tokens", "sequence_tokens"]

#: Placeholder output ids are negative, so no prompt (token ids >= 0) contains them.
_PLACEHOLDER_STRIDE = 1 << 32


@dataclass
class SimRequest:
    """One request: ``index`` its 0-based input order; ``output_token_ids`` the sampled
    tokens (None: deterministic placeholders that no prompt contains). ``prompt_keys``:
    the chained keys of the prompt's full blocks at the engine's block size when a trace
    gives block ids instead of tokens (Mooncake); ``prompt_token_ids`` is then only its
    length (a ``range``)."""

    index: int
    prompt_token_ids: list[int] | np.ndarray
    max_tokens: int
    arrival_step: int | None = None
    arrival_s: float | None = None
    session: str | None = None
    output_token_ids: list[int] | None = None
    prompt_keys: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class EngineRequests:
    """What ``simulate``, the step-time curves and the fleet run: ``requests`` in input
    order, ``label`` naming their source (a file path or ``--pattern NAME``), ``lines``
    the file line of each (None: generated, no file), and ``arrival_unit`` what arrivals
    the source gives (``"steps"``, ``"seconds"`` or None: none, set them with
    ``pipeline.engine.workload.with_arrivals``)."""

    label: str
    requests: Sequence[SimRequest]
    lines: np.ndarray | None = None
    arrival_unit: str | None = None

    @property
    def size(self) -> int:
        return len(self.requests)

    def where(self, index: int) -> str:
        """Request ``index`` for an error: ``file:line``, or ``label (request i)``."""
        if self.lines is None:
            return f"{self.label} (request {index})"
        return f"{self.label}:{self.lines[index]}"


def placeholder_tokens(index: int, count: int) -> np.ndarray:
    """Request ``index``'s placeholder outputs: -1 - index * 2**32 - j for j < count."""
    return -1 - index * _PLACEHOLDER_STRIDE - np.arange(count, dtype=np.int64)


def sequence_tokens(request: SimRequest) -> np.ndarray:
    """Prompt + every output token the request will sample (int64)."""
    prompt = np.asarray(request.prompt_token_ids, dtype=np.int64)
    if request.output_token_ids is not None:
        output = np.asarray(request.output_token_ids[:request.max_tokens], dtype=np.int64)
        if output.size < request.max_tokens:
            output = np.concatenate((output, placeholder_tokens(
                request.index, request.max_tokens)[output.size:]))
    else:
        output = placeholder_tokens(request.index, request.max_tokens)
    return np.concatenate((prompt, output))
