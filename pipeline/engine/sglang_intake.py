"""SGLang's intake: what ``handle_generate_request`` does to a request before it queues.

``init_req_max_new_tokens`` (SGLang 0.5.23 ``managers/scheduler.py:2693-2740``) clips
``max_new_tokens`` to ``max_req_len - prompt - 1`` and then to what an empty pool holds,
``pool - prompt rounded up to a page - page - 1`` (``mem_cache/allocator/base.py:88-105``),
over the page-aligned pool (``model_executor/pool_configurator.py:646-652``), with
``max_req_len = min(context_len - 1, pool - 1)`` (``managers/tp_worker.py:568-572``). So a
request the admission budget could never take finishes early instead of waiting forever. It
logs nothing for this clip. A prompt of ``max_req_input_len = max_req_len - 5`` tokens or
more SGLang aborts with an error (``validate_input_length``, ``managers/utils.py:259-289``,
without ``--allow-auto-truncate``); a prompt that leaves room for no output token runs
prefill-only (``Req.is_prefill_only``), which is not modelled: both are refused here.
"""

from __future__ import annotations

from dataclasses import replace

from pipeline.engine.request import SimRequest

__all__ = ["intake_limit", "clip_request", "refusal", "CLIP_WARNING"]

#: the stderr line of a run with clipped requests (SGLang itself logs nothing for them)
CLIP_WARNING = ("warning: {count} clipped at intake: SGLang caps max_new_tokens to what the "
                "empty KV pool holds (init_req_max_new_tokens; it logs nothing per request), "
                "so they finish early (requests.parquet: output_clipped)")


def _max_req_len(pool: int, page: int, context: int | None) -> tuple[int, int]:
    """The page-aligned pool and SGLang's ``max_req_len``."""
    pool = pool // page * page
    return pool, min(context - 1, pool - 1) if context else pool - 1


def intake_limit(prompt: int, max_new: int, pool: int, page: int,
                 context: int | None = None) -> int:
    """``max_new_tokens`` after SGLang's clip (``context``: ``--context-length``, None:
    no limit below the pool's)."""
    pool, max_req_len = _max_req_len(pool, page, context)
    paged = -(-prompt // page) * page
    return max(0, min(max_new, max_req_len - prompt - 1, pool - paged - page - 1))


def refusal(prompt: int, max_new: int, pool: int, page: int,
            context: int | None = None) -> str | None:
    """Why SGLang does not run this request as the engine models it, or None."""
    _, max_req_len = _max_req_len(pool, page, context)
    if prompt >= max_req_len - 5:
        return (f"prompt of {prompt} tokens: SGLang aborts it (a prompt must be shorter than "
                f"max_req_len - 5 = {max_req_len - 5} tokens for a pool of {pool} tokens"
                f"{f' and context {context}' if context else ''})")
    if intake_limit(prompt, max_new, pool, page, context) == 0:
        return (f"prompt of {prompt} tokens leaves no room for an output token in a pool of "
                f"{pool} tokens of {page}-token pages: SGLang runs it prefill-only (not "
                f"modelled)")
    return None


def clip_request(request: SimRequest, pool: int, page: int,
                 context: int | None = None) -> SimRequest:
    """The request as SGLang queues it: ``max_tokens`` (and sampled outputs) clipped; the
    same object when nothing is cut; ValueError for a request ``refusal`` names."""
    n = len(request.prompt_token_ids)
    why = refusal(n, request.max_tokens, pool, page, context)
    if why is not None:
        raise ValueError(f"request {request.index}: {why}")
    limit = intake_limit(n, request.max_tokens, pool, page, context)
    if limit == request.max_tokens:
        return request
    outputs = request.output_token_ids
    return replace(request, max_tokens=limit,
                   output_token_ids=None if outputs is None else outputs[:limit])
