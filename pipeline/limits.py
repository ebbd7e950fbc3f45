"""Work limits of the document-mode commands (``run``, ``plan``, ``policies``): what they
refuse before allocating anything, one line naming the arguments (as the block commands do
with ``pipeline.blocks.limits``).

* ``run`` sweeps at most ``MAX_PAIRS`` (GPU, CPU) capacity pairs, as ``trace`` does, and its
  events (one per access and capacity pair) stay within ``MAX_EVENTS``. ``run --docs 3000``
  (3.3 M events) peaks at about 0.5 GB (2-core machine, 2026-12-01), so the limit is a few GB.
* ``policies`` on the lab's documents or a trace holds at most ``MAX_EVENTS`` (policy,
  capacity, access) cells; ``policies --docs 100000 --tokens 1`` (16 M) took 47 s.
* ``plan`` in document mode searches at most ``MAX_ACCESSES`` accesses (documents x
  passes); ``plan --docs 300000`` (0.9 M accesses) peaks at about 0.46 GB and 24 s.
"""

from __future__ import annotations

from pipeline.errors import CLIError

__all__ = ["MAX_PAIRS", "MAX_EVENTS", "MAX_ACCESSES", "check_count"]

MAX_PAIRS = 65535
MAX_EVENTS = 20_000_000
MAX_ACCESSES = 10_000_000


def check_count(count: int, limit: int, what: str, noun: str, verb: str = "hold") -> None:
    """CLIError ``"<what>: <count> <noun>, more than the <limit> a run may <verb>"`` when
    ``count`` is beyond ``limit`` (``what`` names the arguments that set it)."""
    if count > limit:
        raise CLIError(f"{what}: {count} {noun}, more than the {limit} a run may {verb}")
