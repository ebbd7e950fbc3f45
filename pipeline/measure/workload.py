"""The lab's workload as HTTP requests: documents of T tokens, a short question, several passes.

Document ``d`` is ``T`` words drawn (seeded) from the lab's word list, its first word unique
to it, so two documents share no prefix beyond the beginning-of-sequence token. The prompt is
the document, a space, then a fixed question of ``QUESTION_WORDS`` words. Passes follow kvlab's
names: the first is ``pass1-cold``, then ``pass<i>-replay`` for a forward pass and
``pass<i>-reverse`` for a reverse one (``fwd,fwd,rev`` gives the lab's three).

With the project's tiny GGUF model every word is one token, so a prompt has
``1 + T + QUESTION_WORDS`` tokens and ``prompt_token_ids`` gives them engine-independently
(word ids, not the engine's, but with the same prefix structure), which is all a cache
model needs.

``--pattern long-doc-qa`` sends the same documents in LMCache's long_doc_qa order instead
(``long_doc_qa_requests``); ``workload_spec`` / ``spec_requests`` describe either workload as a
plain dict (kept in the provenance file) and rebuild its requests from it.
"""

from __future__ import annotations

import argparse
import itertools
import random
from dataclasses import dataclass

__all__ = ["ALPHABET", "BOS", "BODY_WORDS", "FORCED_WORD", "QUESTION_WORDS", "WORDS", "Request",
           "document_text", "lab_requests", "long_doc_qa_requests", "pass_names",
           "prompt_token_ids", "question_text", "spec_requests", "workload_spec"]

ALPHABET = "abcdefghij"
#: The lab's words: every 3-letter word over ALPHABET (1000), in a fixed order. A small
#: vocabulary keeps llama-cpp-python's logits copy (context x vocabulary floats) small.
WORDS: tuple[str, ...] = tuple("".join(p) for p in itertools.product(ALPHABET, repeat=3))
WORD_INDEX = {word: index for index, word in enumerate(WORDS)}
#: The word a completion repeats (an engine forces it with logit_bias); never in a prompt.
FORCED_WORD = WORDS[-1]
QUESTION_WORDS = 8
BOS = -1                      # stands for the beginning-of-sequence token in prompt_token_ids
#: The words of a prompt: every word but FORCED_WORD.
BODY_WORDS = WORDS[:-1]
SEED = 20261003


@dataclass(frozen=True)
class Request:
    """One request of a measurement; ``key`` identifies it for --resume."""

    config: str
    repeat: int
    pass_name: str
    step: int
    doc: int
    doc_tokens: int
    prompt: str | tuple[int, ...]
    #: open loop: seconds after the run's start at which to send (None: closed loop)
    send_at_s: float | None = None
    #: the prompt's prefix structure: one id per ``prefix_block`` tokens (the last block may
    #: be partial), equal ids at a position = equal prefixes up to its end (traces only)
    prefix_ids: tuple[int, ...] = ()
    prefix_block: int = 0
    #: tokens to generate (None: the run's --max-tokens)
    max_tokens: int | None = None
    #: the prompt's tokens without a beginning-of-sequence token (None: ``doc_tokens``)
    input_tokens: int | None = None

    @property
    def key(self) -> tuple[str, int, str, int]:
        return (self.config, self.repeat, self.pass_name, self.step)


def document_text(doc: int, tokens: int, seed: int = SEED) -> str:
    """Document ``doc``: ``tokens`` words, the first one unique to the document."""
    if not 0 <= doc < len(BODY_WORDS):
        raise ValueError(f"document number must be in 0..{len(BODY_WORDS) - 1}, got {doc}")
    rng = random.Random(seed * 100_003 + doc)
    words = [BODY_WORDS[doc]] + rng.choices(BODY_WORDS, k=max(tokens - 1, 0))
    return " ".join(words[:tokens])


def question_text(seed: int = SEED) -> str:
    """The short question that follows every document."""
    return " ".join(random.Random(seed).choices(BODY_WORDS, k=QUESTION_WORDS))


def prompt_token_ids(prompt: str) -> tuple[int, ...]:
    """BOS then one id per word: the prompt's token structure under the tiny model."""
    return (BOS, *(WORD_INDEX[word] for word in prompt.split(" ")))


def pass_names(passes: list[str]) -> list[str]:
    """kvlab's pass names for a list of 'fwd'/'rev' orders."""
    names = []
    for index, order in enumerate(passes, start=1):
        if index == 1:
            names.append("pass1-cold")
        else:
            names.append(f"pass{index}-{'replay' if order == 'fwd' else 'reverse'}")
    return names


def lab_requests(config: str, docs: int, tokens: int, passes: list[str], repeats: int = 1,
                 seed: int = SEED) -> list[Request]:
    """Every request of the lab's workload, in sending order: repeats x passes x documents."""
    question = question_text(seed)
    prompts = [f"{document_text(doc, tokens, seed)} {question}" for doc in range(docs)]
    requests = []
    for repeat in range(repeats):
        for name, order in zip(pass_names(passes), passes):
            doc_order = range(docs) if order == "fwd" else range(docs - 1, -1, -1)
            requests += [Request(config, repeat, name, step, doc, tokens, prompts[doc])
                         for step, doc in enumerate(doc_order)]
    return requests


def long_doc_qa_requests(config: str, docs: int, tokens: int, repeat_count: int = 2,
                         repeat_mode: str = "random", shuffle_seed: int = 0, repeats: int = 1,
                         seed: int = SEED) -> list[Request]:
    """LMCache's long_doc_qa order (``pipeline.workloads.patterns.long_doc_qa``: a ``warmup``
    pass over every document, then the ``query`` pass) over the lab's documents."""
    from pipeline.workloads.patterns import long_doc_qa

    pattern = long_doc_qa(docs, tokens, repeat_count, repeat_mode, shuffle_seed)
    question = question_text(seed)
    prompts = {doc: f"{document_text(doc, tokens, seed)} {question}" for doc in range(docs)}
    requests = []
    for repeat in range(repeats):
        steps: dict[str, int] = {}
        for doc, name in zip(pattern.docs.tolist(), pattern.pass_names):
            step = steps[name] = steps.get(name, -1) + 1
            requests.append(Request(config, repeat, name, step, doc, tokens, prompts[doc]))
    return requests


def workload_spec(args: argparse.Namespace) -> dict:
    """The workload ``measure``'s options describe, as stored in a provenance file."""
    spec = {"pattern": args.pattern, "docs": args.docs, "doc_tokens": args.tokens,
            "repeats": args.repeats, "seed": SEED}
    if args.pattern == "lab":
        return {**spec, "passes": list(args.passes)}
    return {**spec, "repeat_count": args.repeat_count, "repeat_mode": args.repeat_mode,
            "shuffle_seed": args.shuffle_seed}


def spec_requests(config: str, spec: dict) -> list[Request]:
    """Every request of the workload ``spec`` (``workload_spec``) for ``config``."""
    if spec.get("pattern", "lab") == "lab":
        return lab_requests(config, spec["docs"], spec["doc_tokens"], spec["passes"],
                            spec["repeats"], spec["seed"])
    return long_doc_qa_requests(config, spec["docs"], spec["doc_tokens"], spec["repeat_count"],
                                spec["repeat_mode"], spec["shuffle_seed"], spec["repeats"],
                                spec["seed"])
