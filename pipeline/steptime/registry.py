"""The step-time models a command can run: one class each, one line in ``STEP_TIME_MODELS``.

A class is a ``StepTimeModel`` (``label``, ``provenance``, ``step_ms``) and says how
``--latency`` builds it: ``file_kind = None`` and ``from_args(args)`` for a model built from
the command's options (``--latency NAME``), or ``file_kind`` (the JSON ``kind``) and
``from_document(document, path)`` for one read from a file (``--latency FILE``).
``step_time_model(choice, args)`` is the one way every command (``simulate``, ``fleet``,
``plan`` and its latency paths) turns ``--latency`` into a model; a model that offers
``kernel_coefficients`` also runs in the compiled engine loop, any other one in Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.base.errors import CLIError
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.fitted import Linear
from pipeline.steptime.fitted_file import read_json
from pipeline.steptime.roofline import Roofline

__all__ = ["STEP_TIME_MODELS", "step_time_model", "model_names", "name_of"]

#: name -> class; a class with a ``file_kind`` reads ``--latency FILE`` of that kind
STEP_TIME_MODELS: dict[str, type] = {
    "roofline": Roofline,
    "fitted": Linear,
}


def model_names() -> list[str]:
    """The names ``--latency NAME`` takes (the models built from options)."""
    return [name for name, cls in STEP_TIME_MODELS.items() if cls.file_kind is None]


def name_of(model: StepTimeModel) -> str:
    """The registered name of ``model``'s class (its class name when not registered)."""
    return next((name for name, cls in STEP_TIME_MODELS.items() if type(model) is cls),
                type(model).__name__)


def step_time_model(choice: str, args: Any) -> StepTimeModel:
    """The model of ``--latency CHOICE``: a registered name's ``from_args(args)``, else the
    file CHOICE read by the class of its ``kind``; CLIError naming ``--latency`` (a name's
    own errors name their options)."""
    cls = STEP_TIME_MODELS.get(choice.lower())
    if cls is not None and cls.file_kind is None:
        return cls.from_args(args)
    readers = [cls for cls in STEP_TIME_MODELS.values() if cls.file_kind is not None]
    path = Path(choice)
    try:
        document = read_json(path)
        kind = document.get("kind") if isinstance(document, dict) else None
        reader = next((cls for cls in readers if cls.file_kind == kind), readers[0])
        return reader.from_document(document, path)
    except ValueError as exc:
        raise CLIError(f"--latency: {exc}") from None
