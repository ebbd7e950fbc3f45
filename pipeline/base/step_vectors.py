"""The roofline's coefficient vector, defined once below the engine and the time package:
``pipeline.steptime.roofline.Roofline.rates`` fills it and the engine's compiled loop
(``pipeline.engine.krun``) reads each constant by its field's index. (The fitted linear
form's order is ``pipeline.base.fitted_step_time.TERMS``.)"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Rates"]


class Rates(NamedTuple):
    """The roofline's constants, folded once: ``step_ms`` reads them by name, and the compiled
    kernel's coefficient vector is this tuple (``krun`` finds each by its field's index)."""

    overhead_ms: float
    per_token: float                   # ms per token through the layers (compute)
    per_sample: float                  # ms per sampled sequence (LM head, compute)
    per_pair: float                    # ms per attention pair (compute)
    weights: float                     # ms to read the weights once (memory)
    per_context: float                 # ms per attended context token's KV (memory)
    per_reload: float                  # ms per token reloaded over the host link
    per_comm: float = 0.0              # ms per token of tensor parallel all-reduces (added)
