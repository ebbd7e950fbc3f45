"""Benchmark workload patterns as block frames (any block size) and document-mode streams.

* ``long_doc_qa``: LMCache's ``benchmarks/long_doc_qa/long_doc_qa.py`` (github.com/LMCache/
  LMCache): a warm-up round sends each of ``num_documents`` documents of ``document_length``
  tokens once, in order; the query round repeats them ``repeat_count`` times by
  ``repeat_mode`` (``repeat_prompts``): ``tile`` = [0, 1, 2, 0, 1, 2], ``interleave`` =
  [0, 0, 1, 1, 2, 2], ``random`` = the tiled list shuffled by Python's ``random`` seeded with
  ``shuffle_seed`` (the same order LMCache's script sends). Its 5 short pre-warm-up prompts
  and ``--hit-miss-ratio`` are left out. Each document has a distinct first block (LMCache
  prefixes each document with its number for that reason).
* ``multi_tenant``: one system prompt shared by every request, then the user's own document;
  each user reads its documents ``repeat_count`` times in order, the users' streams
  interleaved at random (seeded).
* ``zipf_documents``: each request reads a document drawn with probability proportional to
  ``1 / rank ** alpha`` (seeded), after an optional shared system prompt and before an
  optional per-request question (unique blocks, never reused).

A request's prompt = system prompt (S tokens, shared by all) + document (T tokens) +
question (Q tokens, unique), cut into ``block_size`` blocks with chained keys: a block that
ends inside the system prompt is shared by every request, one that ends inside the document
by every read of that document, any later one belongs to its request alone. Document mode
(kvlab's): one item per read, key = document, size = S + T.

Token-id patterns (``TokenPattern``, for the engine fleet): ``tenant_groups`` (groups x users: a system
prompt per group + unique questions, llm-d's shared-prefix capacity workload) and
``multi_turn`` (chats with session ids whose prompts re-send earlier turns and answers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.workloads.blocks import BLOCK_SCHEMA, REQUEST_SCHEMA
from pipeline.workloads.workload import Workload

__all__ = ["REPEAT_MODES", "PATTERNS", "Pattern", "repeat_order", "long_doc_qa",
           "multi_tenant", "zipf_documents", "TOKEN_PATTERNS", "TokenPattern", "tenant_groups",
           "multi_turn"]

REPEAT_MODES = ("random", "tile", "interleave")
PATTERNS = ("long-doc-qa", "multi-tenant", "zipf")


@dataclass(frozen=True)
class Pattern:
    """A generated workload: per request its document (``docs``) and pass name."""

    name: str
    docs: np.ndarray
    pass_names: tuple[str | None, ...]
    document_length: int
    system_prompt_length: int = 0
    question_length: int = 0

    def __post_init__(self) -> None:
        lengths = (self.document_length, self.system_prompt_length, self.question_length)
        if min(lengths) < 0 or sum(lengths) < 1:
            raise ValueError(f"lengths must be >= 0 with a non-empty prompt, got {lengths}")
        if len(self.pass_names) != self.docs.size:
            raise ValueError("one pass name per request")

    @property
    def prompt_tokens(self) -> int:
        return self.system_prompt_length + self.document_length + self.question_length

    @property
    def requests_count(self) -> int:
        return int(self.docs.size)

    def requests(self) -> pl.DataFrame:
        """One row per request (``REQUEST_SCHEMA``; no timestamps)."""
        return pl.DataFrame({
            "request": np.arange(self.docs.size), "pass_name": list(self.pass_names),
            "doc": self.docs, "prompt_tokens": np.full(self.docs.size, self.prompt_tokens),
            "timestamp_ms": None}, schema=REQUEST_SCHEMA)

    def blocks(self, block_size: int) -> pl.DataFrame:
        """The block frame (``BLOCK_SCHEMA``) at ``block_size`` tokens per block."""
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        length, shared = self.prompt_tokens, self.system_prompt_length
        doc_end = shared + self.document_length
        n = -(-length // block_size)
        index = np.arange(n, dtype=np.int64)
        end = np.minimum((index + 1) * block_size, length)
        requests = self.docs.size
        docs_seen = int(self.docs.max()) + 1 if requests else 0
        doc_base, own_base = n, n + docs_seen * n          # key ranges: shared, doc, own
        block_index = np.tile(index, requests)
        request = np.repeat(np.arange(requests, dtype=np.int64), n)
        kind = np.tile(np.where(end <= shared, 0, np.where(end <= doc_end, 1, 2)), requests)
        keys = np.where(kind == 0, block_index,
                        np.where(kind == 1, doc_base + np.repeat(self.docs, n) * n + block_index,
                                 own_base + request * n + block_index))
        return pl.DataFrame({"request": request, "block_index": block_index,
                             "block_key": keys, "block_tokens": np.tile(end - index * block_size,
                                                                        requests)}
                            ).cast(dict(BLOCK_SCHEMA))

    def workload(self, block_size: int) -> Workload:
        """The pattern as the one workload type, in ``block_size``-token blocks."""
        return Workload(self.blocks(block_size), self.requests(), block_size, label=self.name)

    def documents(self) -> tuple[np.ndarray, np.ndarray]:
        """Document mode: per request (key = document, size = system prompt + document)."""
        size = self.system_prompt_length + self.document_length
        return self.docs.astype(np.int64), np.full(self.docs.size, size, dtype=np.int64)


def repeat_order(num_documents: int, repeat_count: int, repeat_mode: str,
                 shuffle_seed: int = 0) -> list[int]:
    """LMCache long_doc_qa's ``repeat_prompts`` on document numbers 0..num_documents-1."""
    if num_documents < 1 or repeat_count < 0:
        raise ValueError("need num_documents >= 1 and repeat_count >= 0")
    documents = list(range(num_documents))
    if repeat_mode == "tile":
        return documents * repeat_count
    if repeat_mode == "interleave":
        return [doc for doc in documents for _ in range(repeat_count)]
    if repeat_mode == "random":
        order = documents * repeat_count
        random.Random(shuffle_seed).shuffle(order)   # = random.seed(seed); random.shuffle
        return order
    raise ValueError(f"unknown repeat mode {repeat_mode!r}: expected one of "
                     f"{', '.join(REPEAT_MODES)}")


def long_doc_qa(num_documents: int = 8, document_length: int = 20000, repeat_count: int = 2,
                repeat_mode: str = "random", shuffle_seed: int = 0, warmup: bool = True,
                system_prompt_length: int = 0, question_length: int = 0) -> Pattern:
    """LMCache long_doc_qa (its defaults): a warm-up round, then the repeated query round.
    A shared system prompt and a unique question per request are extensions (0 = as
    LMCache's script)."""
    query = repeat_order(num_documents, repeat_count, repeat_mode, shuffle_seed)
    first = list(range(num_documents)) if warmup else []
    return Pattern(f"long_doc_qa {repeat_mode}", np.array(first + query, dtype=np.int64),
                   ("warmup",) * len(first) + ("query",) * len(query), document_length,
                   system_prompt_length, question_length)


def multi_tenant(num_users: int, documents_per_user: int, document_length: int,
                 system_prompt_length: int, repeat_count: int = 2, seed: int = 0,
                 question_length: int = 0) -> Pattern:
    """A shared system prompt + per-user documents; user u owns documents
    u * documents_per_user + (0..documents_per_user-1) and reads them ``repeat_count`` times
    in order; the users' streams are interleaved at random (seeded)."""
    if num_users < 1 or documents_per_user < 1 or repeat_count < 0:
        raise ValueError("need num_users, documents_per_user >= 1 and repeat_count >= 0")
    per_user = documents_per_user * repeat_count
    users = np.random.default_rng(seed).permutation(np.repeat(np.arange(num_users), per_user))
    occurrence = np.empty_like(users)
    order = np.argsort(users, kind="stable")
    occurrence[order] = np.tile(np.arange(per_user), num_users)   # k-th request of its user
    docs = users * documents_per_user + occurrence % documents_per_user
    return Pattern("multi-tenant", docs.astype(np.int64), (None,) * docs.size,
                   document_length, system_prompt_length, question_length)


def zipf_documents(num_documents: int, document_length: int, num_requests: int,
                   alpha: float = 1.0, seed: int = 0, system_prompt_length: int = 0,
                   question_length: int = 0) -> Pattern:
    """Requests for Zipf(``alpha``)-popular documents (document 0 the most popular)."""
    if num_documents < 1 or num_requests < 0 or alpha < 0:
        raise ValueError("need num_documents >= 1, num_requests >= 0 and alpha >= 0")
    weights = 1.0 / np.arange(1, num_documents + 1, dtype=np.float64) ** alpha
    docs = np.random.default_rng(seed).choice(num_documents, size=num_requests,
                                              p=weights / weights.sum())
    return Pattern(f"zipf {alpha:g}", docs.astype(np.int64), (None,) * num_requests,
                   document_length, system_prompt_length, question_length)


# ------------------------------------------------------------------ token-id patterns
#: Patterns generated as token ids (``TokenPattern``): routing across an engine fleet.
TOKEN_PATTERNS = ("groups", "multi-turn")
_SYSTEM_BASE, _OWN_BASE = 1 << 40, 3 << 40          # disjoint token-id ranges


@dataclass(frozen=True)
class TokenPattern:
    """A workload as token ids, per request in arrival order: its prompt, the output tokens
    it samples (None: placeholders no prompt contains), its session id, and its arrival
    offset in seconds (None: arrivals are drawn by the caller's rate)."""

    name: str
    prompts: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray | None, ...]
    sessions: tuple[str | None, ...]
    arrivals_s: np.ndarray | None = None


def _ids(base: int, key: int, length: int, stride: int = 1 << 24) -> np.ndarray:
    """``length`` token ids of item ``key`` in the range ``base``: distinct per (key, j)."""
    return base + key * stride + np.arange(length, dtype=np.int64)


def tenant_groups(groups: int, users_per_group: int, questions_per_user: int,
                  system_prompt_length: int, question_length: int,
                  seed: int = 0) -> TokenPattern:
    """llm-d's shared-prefix capacity workload: ``groups`` system prompts, each shared by
    ``users_per_group`` users who ask ``questions_per_user`` unique questions; requests are
    shuffled (seeded); session id = the user (``g<group>u<user>``)."""
    if min(groups, users_per_group, questions_per_user) < 1:
        raise ValueError("need groups, users and questions >= 1")
    if system_prompt_length + question_length < 1:
        raise ValueError("need a non-empty prompt")
    users = np.repeat(np.arange(groups * users_per_group), questions_per_user)
    order = np.random.default_rng(seed).permutation(users.size)
    prompts, sessions = [], []
    for r, user in enumerate(users[order]):
        group = int(user) // users_per_group
        prompts.append(np.concatenate((_ids(_SYSTEM_BASE, group, system_prompt_length),
                                       _ids(_OWN_BASE, r, question_length))))
        sessions.append(f"g{group}u{int(user) % users_per_group}")
    return TokenPattern(f"groups {groups}x{users_per_group}", tuple(prompts),
                        (None,) * len(prompts), tuple(sessions))


def multi_turn(sessions: int, turns: int, system_prompt_length: int, user_length: int,
               answer_length: int, think_s: float = 5.0, rate: float = 1.0,
               seed: int = 0) -> TokenPattern:
    """Multi-turn chats: session s starts at a Poisson time (``rate`` sessions/s) and sends
    a turn every ``think_s`` seconds; turn k's prompt = the shared system prompt + every
    earlier user message and answer + the new user message; the request samples its answer
    (``answer_length`` tokens), so the next turn re-sends what the engine produced.
    Arrivals are open-loop (a turn does not wait for the previous answer)."""
    if sessions < 1 or turns < 1 or user_length + system_prompt_length < 1:
        raise ValueError("need sessions, turns >= 1 and a non-empty prompt")
    if think_s < 0 or rate <= 0:
        raise ValueError("need think time >= 0 and rate > 0")
    starts = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, sessions))
    rows = []
    system = _ids(_SYSTEM_BASE, 0, system_prompt_length)
    for s in range(sessions):
        history = system
        for k in range(turns):
            turn = s * turns + k
            prompt = np.concatenate((history, _ids(_OWN_BASE, 2 * turn, user_length)))
            answer = _ids(_OWN_BASE, 2 * turn + 1, answer_length)
            rows.append((starts[s] + k * think_s, s, k, prompt, answer))
            history = np.concatenate((prompt, answer))
    rows.sort(key=lambda row: (row[0], row[1], row[2]))
    return TokenPattern(f"multi-turn {sessions}x{turns}", tuple(r[3] for r in rows),
                        tuple(r[4] for r in rows), tuple(f"chat{r[1]}" for r in rows),
                        np.array([r[0] for r in rows], dtype=np.float64))
