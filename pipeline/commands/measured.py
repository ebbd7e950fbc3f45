"""Summarize a measured TTFT file and attribute its requests to cache tiers.

The ``measured`` command: its options and its run are the stage's (``pipeline.measured``);
``python -m pipeline.commands.measured FILE`` runs it as ``python -m pipeline measured FILE``.
"""

from pipeline.measured import add_arguments, main

__all__ = ["add_arguments", "main"]

if __name__ == "__main__":
    from pipeline.cli import run_command

    raise SystemExit(run_command("measured"))
