"""Prose verdicts: does each pass's measured TTFT separate by predicted tier?

``separation_notes(attributed)`` gives one sentence per (config, pass) with two or more
predicted tiers, and one per config that kvlab does not model.
"""

from __future__ import annotations

from itertools import combinations

import polars as pl

from pipeline.ttft.summary import FIRST_LINE, N, tier_table

__all__ = ["separation_notes"]


def _ms_pair(a: float, b: float) -> tuple[str, str]:
    """a and b in ms with 1 decimal, or more if needed to tell them apart."""
    for digits in range(1, 7):
        left, right = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if left != right or a == b:
            return left, right
    return repr(a), repr(b)


def _tier_range(row: dict) -> str:
    return f"{row['tier']} (n={row['n']}, {row['min_ms']:.1f}-{row['max_ms']:.1f} ms)"


def _and_join(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _pair_verdict(faster: dict, slower: dict) -> tuple[bool, str]:
    """(separates, clause) for two tiers, ``faster`` the one predicted faster."""
    fast, slow = faster["tier"], slower["tier"]
    if faster["max_ms"] < slower["min_ms"]:
        top, bottom = _ms_pair(faster["max_ms"], slower["min_ms"])
        return True, f"every {fast} TTFT is below every {slow} TTFT ({top} < {bottom} ms)"
    if slower["max_ms"] < faster["min_ms"]:
        top, bottom = _ms_pair(slower["max_ms"], faster["min_ms"])
        return False, (f"every {slow} TTFT is below every {fast} TTFT ({top} < {bottom} ms), "
                       f"the reverse of the prediction")
    top, bottom = _ms_pair(faster["max_ms"], slower["min_ms"])
    return False, (f"the {fast} and {slow} ranges overlap (slowest {fast} {top} ms >= "
                   f"fastest {slow} {bottom} ms)")


def _separation_note(config: str, name: str, tiers: list[dict]) -> str:
    """One sentence for one (config, pass); ``tiers`` fastest first."""
    head = f"{config} {name}: predicted {_and_join([_tier_range(row) for row in tiers])}"
    failures = [clause for ok, clause in (_pair_verdict(faster, slower)
                                          for faster, slower in combinations(tiers, 2)) if not ok]
    if failures:
        return f"{head} DO NOT separate: {'; '.join(failures)}."
    steps = [_pair_verdict(faster, slower)[1] for faster, slower in zip(tiers, tiers[1:])]
    return f"{head} separate cleanly: {_and_join(steps)}."


def separation_notes(attributed: pl.DataFrame) -> list[str]:
    """One sentence per (config, pass) with two or more predicted tiers, then skipped configs.

    Tiers separate when each tier's slowest TTFT is below the next slower tier's fastest
    (gpu < cpu < miss); otherwise the note says DO NOT separate and lists every pair of
    tiers whose ranges overlap or run in the reverse order.
    """
    table = tier_table(attributed)
    notes = [_separation_note(config, name, group.rows(named=True))
             for (config, name), group in table.group_by(["config", "pass"], maintain_order=True)
             if group.height >= 2]
    skipped = (attributed.filter(pl.col("tier").is_null())
                         .group_by("config").agg(FIRST_LINE, n=N).sort("line"))
    notes += [f"{row['config']}: {row['n']} request(s) not attributed to tiers (kvlab models "
              f"only baseline = GPU tier and lmcache = GPU + CPU tiers)"
              for row in skipped.iter_rows(named=True)]
    return notes
