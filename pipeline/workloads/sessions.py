"""Session ids of trace requests, for session affinity (``fleet --router session``).

A Mooncake-format line may say which conversation it belongs to: ``session_id`` (AIPerf's
Mooncake traces; a string or an integer), or ``chat_id`` with ``parent_chat_id`` (the
Qwen-Bailian traces in Mooncake's format: each turn's chat points at the chat it continues,
``-1`` or absent at a conversation's first turn). A request's session is its
``session_id``, else the first chat of its ``chat_id`` chain, else none. The same optional
fields are read from token-id traces.
"""

from __future__ import annotations

import polars as pl

from pipeline.workloads.jsonl import Field

__all__ = ["SESSION_FIELDS", "session_ids"]

#: Optional fields naming a request's conversation (none is required).
SESSION_FIELDS = (Field("session_id", "key"), Field("chat_id", "key"),
                  Field("parent_chat_id", "key"))


def _first_chats(frame: pl.DataFrame) -> pl.DataFrame:
    """chat -> the first chat of its ``parent_chat_id`` chain (followed through the chats
    of this trace; a cycle stops after as many steps as there are chats)."""
    links = (frame.filter(pl.col("chat_id").is_not_null())
             .group_by("chat_id", maintain_order=True).agg(pl.col("parent_chat_id").first())
             .rename({"chat_id": "up", "parent_chat_id": "next"}))
    state = links.select(chat="up", root="up", up="next")
    for _ in range(links.height):
        state = state.join(links, on="up", how="left")
        moving = pl.col("up").is_in(links["up"].implode())
        if not state.select(moving.any()).item():
            break
        state = state.select("chat", root=pl.when(moving).then("up").otherwise("root"),
                             up=pl.when(moving).then("next").otherwise(None))
    return state.select("chat", "root")


def session_ids(frame: pl.DataFrame) -> list[str | None]:
    """Each row's session (see the module docstring), None where the line names none."""
    if frame.height == 0:
        return []
    roots = _first_chats(frame)
    found = (frame.select("session_id", chat="chat_id")
             .join(roots, on="chat", how="left", maintain_order="left")
             .select(pl.coalesce(pl.col("session_id"),
                                 pl.lit("chat ") + pl.col("root")).alias("session")))
    return found["session"].to_list()
