"""llama.cpp's prompt cache as served by llama-cpp-python 0.3.36, as a model of its own.

The server is a two-tier cache:

* the **live context** (tier ``gpu`` in kvlab's names): the tokens the model last evaluated,
  one entry. ``Llama.generate`` (``llama_cpp/llama.py``) reuses the longest common prefix of
  the live tokens and the new prompt (one token less when the whole prompt matches, so that a
  token is evaluated to refresh the logits; nothing at all when the live context is exactly
  the prompt and was decoded live, not restored), drops the rest with ``kv_cache_seq_rm`` and
  evaluates the remainder.
* the **RAM cache** (tier ``cpu``): ``LlamaRAMCache`` (``llama_cpp/llama_cache.py``), an
  OrderedDict from the full token tuple of each finished request (prompt + completion) to a
  whole-context ``LlamaState``. ``__getitem__`` scans every key, oldest first, for the LONGEST
  common prefix with the prompt (strictly longer wins, so ties go to the oldest key), of ANY
  length >= 1, and moves that key to the end (most recent) even when only the
  beginning-of-sequence token matches. ``__setitem__`` deletes an equal key, appends the new
  one and then pops the oldest entries while the summed ``llama_state_size`` exceeds
  ``capacity_bytes`` (the new entry itself goes too if it alone is larger).
* ``Llama._create_completion`` looks the prompt up in the RAM cache first and loads the found
  state only if its prefix (``longest_token_prefix(state.input_ids, prompt)``) is longer than
  the live context's; after every completion it saves the state under prompt + completion.

State size: ``llama_state_get_size`` grows linearly with the tokens in the context
(``StateSize``; measured by ``pipeline.measure.llamacpp.engine.measure_state_size``). A
completion of C tokens that stops on length leaves prompt + C - 1 tokens evaluated (the last
sampled token is never fed back).

Not modelled: ``input_ids`` past ``n_tokens`` in a saved state hold stale tokens of an earlier,
longer context; they can only matter for a prompt longer than the entry's context.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LlamaCppPromptCache", "Outcome", "StateSize", "common_prefix"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (``Llama.longest_token_prefix``)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class StateSize:
    """Bytes of a saved state holding ``n`` tokens: ``fixed + per_token * n``."""

    fixed: int
    per_token: int

    def __call__(self, n_tokens: int) -> int:
        return self.fixed + self.per_token * n_tokens


@dataclass(frozen=True)
class Outcome:
    """What one request did to the caches.

    ``source``: where the reused prefix came from (``live``, ``ram`` or ``none``);
    ``reused``/``evaluated``: prompt tokens reused and evaluated; ``tier``: kvlab's name for
    the outcome (``gpu`` = live context, ``cpu`` = loaded from RAM, ``miss`` when less than
    half the prompt was reused); ``refreshed``: the RAM entry the lookup moved to the end
    (its number in insertion order, or None); ``ram_entries``/``ram_bytes`` after the save.
    """

    tier: str
    source: str
    reused: int
    evaluated: int
    refreshed: int | None
    ram_entries: int
    ram_bytes: int


class LlamaCppPromptCache:
    """The live context and (``ram_capacity`` bytes, or None for no RAM cache) the RAM cache."""

    def __init__(self, ram_capacity: int | None, state_size: StateSize) -> None:
        if ram_capacity is not None and ram_capacity < 0:
            raise ValueError(f"RAM capacity must be >= 0 bytes, got {ram_capacity}")
        self.ram_capacity = ram_capacity
        self.state_size = state_size
        self.live: tuple[int, ...] = ()
        self.live_restored = False         # Llama._requires_eval after load_state / reuse
        # key (prompt + completion) -> (entry number, evaluated tokens, state bytes)
        self.ram: OrderedDict[tuple[int, ...], tuple[int, tuple[int, ...], int]] = OrderedDict()
        self._entries = 0

    @property
    def ram_bytes(self) -> int:
        return sum(size for _, _, size in self.ram.values())

    def _lookup(self, prompt: tuple[int, ...]) -> tuple[tuple[int, ...] | None, int | None]:
        """LlamaRAMCache.__getitem__: the longest-prefix key (oldest on ties), refreshed."""
        best, best_len = None, 0
        for key in self.ram:
            length = common_prefix(key, prompt)
            if length > best_len:
                best, best_len = key, length
        if best is None:
            return None, None
        self.ram.move_to_end(best)
        return self.ram[best][1], self.ram[best][0]

    def request(self, prompt: Sequence[int], completion: Sequence[int]) -> Outcome:
        """Serve one completion of ``prompt`` that generated ``completion`` (>= 1 token)."""
        prompt, completion = tuple(prompt), tuple(completion)
        if not prompt or not completion:
            raise ValueError("a request needs a non-empty prompt and completion")
        loaded, refreshed = False, None
        if self.ram_capacity is not None:
            tokens, refreshed = self._lookup(prompt)
            if tokens is not None and (common_prefix(tokens, prompt)
                                       > common_prefix(self.live, prompt)):
                self.live, self.live_restored, loaded = tokens, True, True
        longest = common_prefix(self.live, prompt)
        consumed = longest == len(prompt)
        if consumed and len(self.live) == len(prompt) and not self.live_restored:
            reused = len(prompt)
        else:
            reused = longest - 1 if consumed else longest
        evaluated = len(prompt) - reused
        self.live = prompt + completion[:-1]
        self.live_restored = False
        if self.ram_capacity is not None:
            key = prompt + completion
            number = self.ram.pop(key)[0] if key in self.ram else self._next_entry()
            self.ram[key] = (number, self.live, self.state_size(len(self.live)))
            while self.ram and self.ram_bytes > self.ram_capacity:
                self.ram.popitem(last=False)
        if reused * 2 < len(prompt):
            tier = "miss"
        else:
            tier = "cpu" if loaded else "gpu"
        source = "ram" if loaded else ("live" if reused > 0 else "none")
        return Outcome(tier, source, reused, evaluated, refreshed, len(self.ram), self.ram_bytes)

    def _next_entry(self) -> int:
        self._entries += 1
        return self._entries - 1
