"""Every limit the commands enforce, and their checks: one place. Each limit is refused up
front, before anything is allocated, with one line naming the arguments (or the file and
field) that set it.

Values:

* ``MAX_VALUE`` (2**62): the largest capacity or token count of the document-mode commands
  (``run``) and of a measured file's sidecar (``*.setup.json``): sums of two stay within int64.
* ``MAX_CAPACITY`` (2**63 - 1): a block command's capacity (``blocks``, ``trace``) and any
  size ``pipeline.sizes.units`` parses must fit an int64: the engines and the Parquet columns are
  int64.
* ``MAX_BLOCK_SIZE`` (2**32 - 1): tokens of one block (``block_tokens`` is a UInt32 column).

Work:

* A block run holds at most ``MAX_BLOCKS`` block accesses (prompt blocks, plus the blocks the
  ``vllm`` model adds for output tokens): 10x the 10M-block benchmark trace of
  ``pipeline.bench.trace``. Beyond it the arrays alone need tens of GiB, so the commands say
  so instead of swapping, hanging or dying on a MemoryError.
* ``run`` sweeps at most ``MAX_PAIRS`` (GPU, CPU) capacity pairs, as ``trace`` does, and its
  events (one per access and capacity pair) stay within ``MAX_EVENTS``. ``run --docs 3000``
  (3.3 M events) peaks at about 0.5 GB (2-core machine, 2026-12-01), so the limit is a few GB.
* ``policies`` on the lab's documents or a trace holds at most ``MAX_EVENTS`` (policy,
  capacity, access) cells; ``policies --docs 100000 --tokens 1`` (16 M) took 47 s.
* ``plan`` in document mode searches at most ``MAX_ACCESSES`` accesses (documents x
  passes); ``plan --docs 300000`` (0.9 M accesses) peaks at about 0.46 GB and 24 s.

What depends on a block stream (the block count of a document run, the clipped capacities of
a model run) is in ``pipeline.workloads.stream_limits``, built on these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pipeline.base.errors import CLIError

__all__ = ["MAX_VALUE", "MAX_CAPACITY", "MAX_BLOCK_SIZE", "MAX_BLOCKS", "MAX_PAIRS",
           "MAX_EVENTS", "MAX_ACCESSES", "check_count", "check_value", "check_capacities",
           "check_capacity_list", "check_block_size", "check_block_count"]

MAX_VALUE = 2**62
MAX_CAPACITY = 2**63 - 1
MAX_BLOCK_SIZE = 2**32 - 1
MAX_BLOCKS = 100_000_000
MAX_PAIRS = 65535
MAX_EVENTS = 20_000_000
MAX_ACCESSES = 10_000_000


def check_count(count: int, limit: int, what: str, noun: str, verb: str = "hold") -> None:
    """CLIError ``"<what>: <count> <noun>, more than the <limit> a run may <verb>"`` when
    ``count`` is beyond ``limit`` (``what`` names the arguments that set it)."""
    if count > limit:
        raise CLIError(f"{what}: {count} {noun}, more than the {limit} a run may {verb}")


def check_value(where: str, value: object, null: bool = False) -> int | None:
    """``value`` when it is an integer in 0..``MAX_VALUE`` (or None, with ``null``); else
    CLIError ``"<where> must be an integer in 0..2**62[ or null], got <value>"``."""
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VALUE:
        raise CLIError(f"{where} must be an integer in 0..2**62{' or null' if null else ''}, "
                       f"got {value!r}")
    return value


def check_capacities(argument: str, capacities: int | Iterable[int] | None) -> None:
    """CLIError naming ``argument`` unless every capacity is an integer in 0..MAX_CAPACITY."""
    if capacities is None:
        return
    values = [capacities] if isinstance(capacities, int) else list(capacities)
    for value in values:
        if not 0 <= value <= MAX_CAPACITY:
            raise CLIError(f"{argument} {value}: capacities must be 0 .. {MAX_CAPACITY} tokens")


def check_capacity_list(name: str, capacities: Sequence[int]) -> list[int]:
    """The capacities as ints (the simulation's own check, ValueError: the Python API's);
    ValueError if the list is empty or any is negative."""
    values = [int(c) for c in capacities]
    if not values:
        raise ValueError(f"{name}: the capacity list is empty")
    negative = [c for c in values if c < 0]
    if negative:
        raise ValueError(f"{name}: capacities must be >= 0, got {negative[0]}")
    return values


def check_block_size(block_size: int | None) -> None:
    """CLIError unless ``--block-size`` (None: the default) is at most ``MAX_BLOCK_SIZE``."""
    if block_size is not None and block_size > MAX_BLOCK_SIZE:
        raise CLIError(f"--block-size {block_size}: at most {MAX_BLOCK_SIZE} tokens")


def check_block_count(blocks: int, what: str) -> None:
    """CLIError unless ``blocks`` (block accesses of a run; ``what`` names the arguments
    that set it) is at most ``MAX_BLOCKS``."""
    check_count(blocks, MAX_BLOCKS, what, "block accesses")
