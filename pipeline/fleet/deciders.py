"""Who prefills a request in a disaggregated fleet: the prefill side (remote) or its decode
engine (local), as the projects' P/D deciders decide it (``--pd-decider NAME[:TOKENS]``).

A decider sees each prompt's length and the tokens its decode engine already holds (its
prefix hit, whole blocks: ``pipeline.fleet.disaggregated`` measures them on the decode
side and decides again until they reproduce). A new decider is one class here and one
line in ``DECIDERS``.
"""

from __future__ import annotations

import argparse
from typing import ClassVar

import numpy as np

__all__ = ["Decider", "Always", "PromptLength", "LlmdPrefix", "DECIDERS", "parse_decider",
           "make_decider"]


class Decider:
    """Remote or local per request; ``tokens`` the decider's one threshold."""

    NAME: ClassVar[str] = ""
    SOURCE: ClassVar[str] = ""
    #: the threshold when none is given
    DEFAULT: ClassVar[int | None] = None
    #: False: the decision reads the prompt's length alone
    USES_HITS: ClassVar[bool] = True

    def __init__(self, tokens: int | None = None) -> None:
        self.tokens = self.DEFAULT if tokens is None else tokens

    def remote(self, prompts: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """True where the prefill side prefills (``prompts``, ``cached``: tokens)."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.NAME if self.tokens is None else f"{self.NAME}:{self.tokens}"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.tokens == other.tokens

    def __hash__(self) -> int:
        return hash((self.NAME, self.tokens))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tokens!r})"


class Always(Decider):
    """Every prompt to the prefill side (llm-d's ``always-disagg-pd-decider``; vLLM's P/D
    proxies)."""

    NAME = "always"
    SOURCE = ("llm-d/llm-d-inference-scheduler pkg/epp/framework/plugins/scheduling/"
              "profilehandler/disagg/always_disagg_pd_decider.go (commit 520af47)")
    USES_HITS = False

    def remote(self, prompts: np.ndarray, cached: np.ndarray) -> np.ndarray:
        return np.ones(len(prompts), bool)


class PromptLength(Decider):
    """Dynamo's conditional disaggregation on the prompt's length alone, as its Python
    ``custom_disagg_router`` decides: remote when the prompt is longer than ``tokens``
    (``--max-local-prefill-length``; Dynamo's default 1000)."""

    NAME = "prompt-length"
    SOURCE = "ai-dynamo/dynamo lib/llm/src/disagg_router.rs prefill_remote (commit 3454aa8)"
    DEFAULT = 1000
    USES_HITS = False

    def remote(self, prompts: np.ndarray, cached: np.ndarray) -> np.ndarray:
        return np.asarray(prompts) > self.tokens


class LlmdPrefix(Decider):
    """llm-d's ``prefix-based-pd-decider`` (``disaggregate``): with ``nonCachedTokens`` N
    (0, its default, disables disaggregation), a prompt shorter than N stays local, else
    it goes remote when its part the decode endpoint lacks (prompt - matched blocks x
    block size) is at least N."""

    NAME = "llm-d-prefix"
    SOURCE = ("llm-d/llm-d-inference-scheduler pkg/epp/framework/plugins/scheduling/"
              "profilehandler/disagg/prefix_based_pd_decider.go (commit 520af47)")
    DEFAULT = 0

    def remote(self, prompts: np.ndarray, cached: np.ndarray) -> np.ndarray:
        prompts = np.asarray(prompts)
        if self.tokens == 0:
            return np.zeros(len(prompts), bool)
        return (prompts >= self.tokens) & (prompts - np.asarray(cached) >= self.tokens)


DECIDERS: dict[str, type[Decider]] = {c.NAME: c for c in (Always, PromptLength, LlmdPrefix)}


def parse_decider(text: str) -> Decider:
    """argparse type: ``NAME`` or ``NAME:TOKENS`` of a registered decider."""
    name, _, tokens = text.strip().partition(":")
    if name not in DECIDERS:
        raise argparse.ArgumentTypeError(
            f"unknown P/D decider {name!r} (choose from {', '.join(DECIDERS)})")
    if tokens and not tokens.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: the threshold is a number of tokens "
                                         f"(an integer >= 0)")
    return DECIDERS[name](int(tokens) if tokens else None)


def make_decider(decider: Decider | None, max_local_prefill_length: int | None) -> Decider:
    """The decider a fleet runs: the one given, else Dynamo's prompt length with
    ``--max-local-prefill-length``, else every prompt remote."""
    if decider is not None:
        return decider
    if max_local_prefill_length is not None:
        return PromptLength(max_local_prefill_length)
    return Always()
