"""The fitted step-time JSON (ENGINE-SPEC's ``fitted-step-time``, version 1): the linear
form's terms in order (``TERMS``: each coefficient and the ``StepCost`` quantity it
multiplies, ``one`` for the fixed term; ``Linear.step_ms``, the compiled kernel, ``fit`` and
plan's closed form all sum them in this order) and the one reader every user of the file
goes through (``read_fitted``): a bad file is one line naming it and the field."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

__all__ = ["TERMS", "NAMES", "COEFFICIENTS", "OPTIONAL", "FITTED_KIND", "VERSION",
           "check_fitted", "read_fitted", "read_json"]

#: (coefficient, the step quantity it multiplies), in the linear form's order
TERMS = (("fixed_ms", "one"), ("prefill_token_ms", "prefill_tokens"),
         ("context_token_ms", "context_tokens"), ("decode_seq_ms", "decode_seqs"),
         ("reload_token_ms", "reload_tokens"), ("attention_pair_ms", "attention_pairs"))
NAMES = tuple(name for name, _ in TERMS)
#: the contract's five; ``attention_pair_ms`` is optional (absent = 0: older files)
COEFFICIENTS, OPTIONAL = NAMES[:5], NAMES[5:]
FITTED_KIND, VERSION = "fitted-step-time", 1


def _number(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and value >= 0)


def check_fitted(document: Any, where: str) -> dict:
    """``document`` when it is a fitted file this version reads; ValueError ``where: ...``
    naming the field otherwise."""
    def fail(what: str) -> ValueError:
        return ValueError(f"{where}: {what}")
    if not isinstance(document, dict) or document.get("kind") != FITTED_KIND:
        raise fail(f'not a fitted step-time file (expected "kind": "{FITTED_KIND}")')
    if document.get("version") != VERSION:
        raise fail(f"version {document.get('version')!r} is not supported (expected {VERSION})")
    given = document.get("coefficients")
    if not isinstance(given, dict):
        raise fail('"coefficients" must be an object')
    unidentified = document.get("unidentified", [])
    if not isinstance(unidentified, list) or any(n not in NAMES for n in unidentified):
        raise fail(f'"unidentified" must list coefficient names of {", ".join(NAMES)}, '
                   f"got {unidentified!r}")
    for name in (name for name in COEFFICIENTS if name not in given):
        raise fail(f'"coefficients" lacks {name}')
    for name, value in given.items():
        if name not in NAMES:
            raise fail(f"coefficients.{name} is not a coefficient (expected {', '.join(NAMES)})")
        if not _number(value) and not (value is None and name in unidentified):
            raise fail(f"coefficients.{name} must be a finite number >= 0, got {value!r}")
    kv = document.get("kv_bytes_per_token")
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 1):
        raise fail(f"kv_bytes_per_token must be an integer >= 1, got {kv!r}")
    span = document.get("prompt_tokens_range")
    if (not isinstance(span, list) or len(span) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in span)
            or not 0 <= span[0] <= span[1]):
        raise fail(f"prompt_tokens_range must be [lo, hi] integers, 0 <= lo <= hi, got {span!r}")
    chunk = (document.get("engine_model") or {}).get("max_num_batched_tokens", 1)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise fail(f"engine_model.max_num_batched_tokens must be an integer >= 1, got {chunk!r}")
    load = (document.get("machine_load") or {}).get("per_load_average") or 0.0
    if not _number(load):
        raise fail(f"machine_load.per_load_average must be a number >= 0, got {load!r}")
    return document


def read_json(path: str | Path) -> Any:
    """The JSON document at ``path``; ValueError naming the file (and the line of a JSON
    error)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None


def read_fitted(path: str | Path) -> dict:
    """The checked document of the fitted file at ``path``; ValueError naming the file."""
    return check_fitted(read_json(path), str(path))
