"""The step-time models: one class each (a ``StepTimeModel``), one line in
``STEP_TIME_MODELS``. A class with ``file_kind = None`` is built by ``from_args(args)``
(``--latency NAME``), one with a ``file_kind`` by ``from_document(document, path)`` from a
``--latency FILE`` of that JSON ``kind`` (``fit --vllm-bench``'s ``roofline-efficiency`` and
``profile-scale``: the command's roofline or profile with them, ``efficiency_file``);
``step_time_model`` is how every command reads ``--latency``; ``--latency profile:DIR``
reads a vidur-format profile (``profile``). A model with ``kernel_coefficients`` runs in the
compiled loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.base.errors import CLIError
from pipeline.steptime.cost import StepTimeModel
from pipeline.steptime.fitted import Linear
from pipeline.base.fitted_step_time import read_json
from pipeline.steptime.efficiency_file import FIT_READERS
from pipeline.steptime.profile import PREFIX, read_profile
from pipeline.steptime.roofline import Roofline

__all__ = ["STEP_TIME_MODELS", "step_time_model", "name_of"]

#: name -> class; a class with a ``file_kind`` reads ``--latency FILE`` of that kind
STEP_TIME_MODELS: dict[str, type] = {
    "roofline": Roofline,
    "fitted": Linear,
}


def name_of(model: StepTimeModel) -> str:
    """The registered name of ``model``'s class (its class name when not registered)."""
    return next((name for name, cls in STEP_TIME_MODELS.items() if type(model) is cls),
                type(model).__name__)


def step_time_model(choice: str, args: Any) -> StepTimeModel:
    """The model of ``--latency CHOICE`` (see the module docstring); CLIError naming the
    option."""
    if choice.startswith(PREFIX):                    # --latency profile:DIR
        return read_profile(choice[len(PREFIX):], args)
    cls = STEP_TIME_MODELS.get(choice.lower())
    if cls is not None and cls.file_kind is None:
        return cls.from_args(args)
    readers = [cls for cls in STEP_TIME_MODELS.values() if cls.file_kind is not None]
    path = Path(choice)
    try:
        document = read_json(path)
        kind = document.get("kind") if isinstance(document, dict) else None
        if kind in FIT_READERS:                      # fit --vllm-bench's outputs
            return FIT_READERS[kind](document, path, args)
        reader = next((cls for cls in readers if cls.file_kind == kind), readers[0])
        return reader.from_document(document, path)
    except ValueError as exc:
        raise CLIError(f"--latency: {exc}") from None
