"""A step's milliseconds from its totals in ``REC``: the step-time models that are formulas
of a step's totals (fitted ``Linear``, ``Roofline``), as the compiled loops price batches
(``krun``) and the native offload's worker times a step (``ksched``)."""

from __future__ import annotations

from pipeline.components.kjit import helper, inlined
from pipeline.components.engine_layout import (BQ_NEW, BQ_START, X_CONTEXT, X_DECODE, X_NFIRST,
                                              X_NSCHED, X_PREFILL, X_Q, X_RELOAD)
from pipeline.base.fitted_step_time import TERMS
from pipeline.base.step_vectors import Rates

__all__ = ["step_time", "linear_ms", "reload_ms", "reload_term", "MODEL_NONE", "MODEL_LINEAR",
           "MODEL_ROOFLINE", "QUANTITIES"]

MODEL_NONE, MODEL_LINEAR, MODEL_ROOFLINE = 0, 1, 2
#: the step quantities ``step_time`` passes ``linear_ms``, in this order
QUANTITIES = ("one", "prefill_tokens", "decode_seqs", "context_tokens", "reload_tokens",
              "attention_pairs")
_TERM_AT = tuple(QUANTITIES.index(quantity) for _, quantity in TERMS)
_LINEAR_RELOAD = [quantity for _, quantity in TERMS].index("reload_tokens")
#: where each of the roofline's ``Rates`` sits in its coefficient vector
(_OVERHEAD, _PER_TOKEN, _PER_SAMPLE, _PER_PAIR, _WEIGHTS, _PER_CONTEXT, _PER_RELOAD,
 _PER_COMM) = (Rates._fields.index(name) for name in (
    "overhead_ms", "per_token", "per_sample", "per_pair", "weights", "per_context",
    "per_reload", "per_comm"))


@helper
def step_time(S, model, coef):
    """Milliseconds of the batch just scheduled (``REC``), as the model's ``step_ms``."""
    REC, BQ = S[16], S[10]
    prefill, decodes, context, reload = REC[X_PREFILL], REC[X_DECODE], REC[X_CONTEXT], \
        REC[X_RELOAD]
    if prefill:
        q, pairs = REC[X_Q], 0
        for e in range(REC[X_NSCHED]):
            new, before = BQ[q, e, BQ_NEW], BQ[q, e, BQ_START]
            pairs += new * before + new * (new + 1) // 2
    else:
        pairs = context                               # decodes only: one query each
    if model == MODEL_LINEAR:
        return linear_ms(coef, (1, prefill, decodes, context, reload, pairs))
    tokens = prefill + decodes
    if tokens == 0 and reload == 0:
        return coef[_OVERHEAD]
    compute = (coef[_PER_TOKEN] * tokens + coef[_PER_SAMPLE] * (decodes + REC[X_NFIRST])
               + coef[_PER_PAIR] * pairs)
    memory = coef[_WEIGHTS] + coef[_PER_CONTEXT] * context
    return (coef[_OVERHEAD] + max(compute, memory) + coef[_PER_RELOAD] * reload
            + coef[_PER_COMM] * tokens)


@helper
def linear_ms(coef, quantities):
    """The linear form: ``coef`` in ``TERMS`` order times the step's ``QUANTITIES``
    (``_TERM_AT`` says where each term's quantity sits), summed in that order."""
    ms = 0.0
    for j in range(len(_TERM_AT)):
        ms += coef[j] * quantities[_TERM_AT[j]]
    return ms


@inlined
def reload_ms(S, model, coef):
    """The step model's reload term, which a tier stack's own transfer time replaces."""
    if model == MODEL_LINEAR:
        return coef[_LINEAR_RELOAD] * S[16][X_RELOAD]
    if model == MODEL_ROOFLINE:
        return coef[_PER_RELOAD] * S[16][X_RELOAD]
    return 0.0


def reload_term(model: int, coef, reload_tokens: int) -> float:
    """``reload_ms`` for a Python caller: the reload term of a batch with ``reload_tokens``
    (the same arithmetic, so a Python clock matches the compiled one bit for bit)."""
    if model == MODEL_LINEAR:
        return coef[_LINEAR_RELOAD] * reload_tokens
    if model == MODEL_ROOFLINE:
        return coef[_PER_RELOAD] * reload_tokens
    return 0.0
