"""argparse types shared by the commands (one definition each)."""

from __future__ import annotations

import argparse
import math
import re

from kvlab.scenario import OneLineParser, non_negative_int, pass_list

__all__ = ["Parser", "checked", "int_list", "non_negative_int", "pass_list", "plural", "positive_int",
           "positive_float", "non_negative_float", "unit_ratio"]


#: What argparse should read as a value, never as an option: a minus sign and a digit
#: (``-1``, ``-1GiB``, ``-.5``), so that the option's own type says what it accepts.
_NEGATIVE = re.compile(r"^-\.?[0-9]")


class Parser(OneLineParser):
    """The pipeline's parser: usage errors are one line (``OneLineParser``, exit 2), and a
    value that starts with a minus sign and a digit (``--gpu -1GiB``) is a value, so the
    option's type refuses it with its own bound instead of "expected one argument"."""

    def _parse_optional(self, arg_string):  # type: ignore[override]
        if _NEGATIVE.match(arg_string) and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)


def int_list(text: str) -> list[int]:
    """argparse type: comma-separated integers >= 0, at least one."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"empty capacity list {text!r}")
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if any(value < 0 for value in values):
        raise argparse.ArgumentTypeError(f"capacities must be >= 0, got {text!r}")
    return values


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (one message for every value it refuses)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def plural(count: int, noun: str) -> str:
    """``"1 request"``, ``"2 requests"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _finite_float(text: str, bound: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
    if math.isnan(value) or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _finite_float(text, "> 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def unit_ratio(text: str) -> float:
    """argparse type: a finite number in (0, 1] (a share such as a hit ratio)."""
    value = _finite_float(text, "in (0, 1]")
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = _finite_float(text, ">= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def checked(check):
    """An argparse type: the text unchanged when ``check(text)`` accepts it, else a usage
    error (exit 2) with ``check``'s ValueError as the message."""
    def kind(text: str) -> str:
        try:
            check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    kind.__name__ = check.__name__
    return kind
