"""Benchmarks (layer: commands): scripts that print figures, never tests.

``python -m pipeline bench`` (``pipeline.bench.run``) times the default run and then runs
``pipeline.bench.curve`` (one-pass LRU curves against kvlab's LRUCache and libCacheSim);
``blocks``, ``engine_caches``, ``policies``, ``trace`` and ``fleet`` time the others.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any


def timed(function: Callable, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``function(*args, **kwargs)`` and the wall seconds it took."""
    start = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - start


def standalone(module: str, doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
               main: Callable[[argparse.Namespace], int]) -> None:
    """``python -m module``: parse ``add_arguments``'s options and exit with ``main``'s status
    (a CLIError is one line and status 1)."""
    from pipeline.base.errors import CLIError

    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])
    add_arguments(parser)
    try:
        sys.exit(main(parser.parse_args()))
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
