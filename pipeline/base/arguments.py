"""argparse types shared by the commands (one definition each), and the frozen options
object every command runs on (``freeze``, changed only by ``derive``)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from kvlab.scenario import OneLineParser, non_negative_int, pass_list

__all__ = ["Options", "Parser", "add_document_arguments", "checked", "deprecated_alias",
           "derive", "freeze", "queue_warning", "int_list", "non_negative_int", "pass_list",
           "plural", "positive_int", "positive_float", "non_negative_float", "unit_ratio"]


@dataclasses.dataclass(frozen=True)
class Options:
    """A command's parsed options, frozen (``freeze``): a command never changes what it was
    given; what it works out (tokens of a size, the clock, one run's load) is a new options
    object (``derive``) or a value of its own."""

    def __contains__(self, name: str) -> bool:         # as argparse.Namespace
        return name in self.__dict__


@functools.cache
def _options_type(name: str, fields: tuple[str, ...]) -> type:
    return dataclasses.make_dataclass(name, [(field, Any) for field in fields],
                                      bases=(Options,), frozen=True)


def freeze(namespace: argparse.Namespace | Options) -> Options:
    """``namespace`` as a frozen dataclass (``FooOptions`` for command ``foo``), one field
    per parsed option; an ``Options`` unchanged."""
    if isinstance(namespace, Options):
        return namespace
    values = vars(namespace)
    command = str(values.get("command") or "command").title().replace("-", "")
    return _options_type(f"{command}Options", tuple(values))(**values)


def derive(options: argparse.Namespace | Options, /, **changes: Any) -> Options:
    """A frozen copy of ``options`` with ``changes`` (new names may be added: what a command
    works out from its options); ``options`` itself is unchanged."""
    return freeze(argparse.Namespace(**{**vars(options), **changes}))


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

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        strings = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(strings, namespace)
        for action in self._actions:
            if isinstance(action, _DeprecatedAlias) and \
                    getattr(namespace, _ALIASED, {}).get(action.new) and \
                    any(s == action.new or s.startswith(action.new + "=") for s in strings):
                self.error(f"{action.option_strings[0]} is the deprecated spelling of "
                           f"{action.new}: give {action.new} once")
        for line in getattr(namespace, _WARNINGS, ()):
            print(line, file=sys.stderr)
        for name in (_ALIASED, _WARNINGS):
            if hasattr(namespace, name):
                delattr(namespace, name)
        return namespace, extras


#: the namespace attributes that record which new options an alias set while parsing, and
#: the deprecation lines printed once parsing succeeded
_ALIASED, _WARNINGS = "_deprecated_aliases_used", "_deprecated_alias_warnings"


class _DeprecatedAlias(argparse.Action):
    """An old spelling of option ``new``: the value (``convert``ed to the new option's text)
    goes through the new option's type to its dest, and one line on stderr says so."""

    def __init__(self, option_strings, dest, new: str, convert: Callable[[str], str] | None,
                 **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS, **kwargs)
        self.new, self.convert = new, convert

    def __call__(self, parser, namespace, values, option_string=None):
        target = parser._option_string_actions[self.new]
        text = self.convert(values) if self.convert is not None else values
        try:
            value = target.type(text) if target.type is not None else text
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument {option_string}: {exc}")
        same = f"{self.new} {text}" if self.convert is not None else self.new
        warnings = list(getattr(namespace, _WARNINGS, ()))
        warnings.append(f"warning: {option_string} is deprecated; use {same} (same meaning)")
        setattr(namespace, _WARNINGS, warnings)
        setattr(namespace, target.dest, value)
        used = dict(getattr(namespace, _ALIASED, {}))
        used[self.new] = option_string
        setattr(namespace, _ALIASED, used)


def queue_warning(namespace: argparse.Namespace, line: str) -> None:
    """Queue one ``warning: ...`` line, printed on stderr with the deprecated spellings'
    once parsing succeeds (``Parser``)."""
    setattr(namespace, _WARNINGS, [*getattr(namespace, _WARNINGS, ()), line])


def deprecated_alias(parser, old: str, new: str,
                     convert: Callable[[str], str] | None = None) -> argparse.Action:
    """Add ``old`` as a hidden, deprecated spelling of the option ``new`` (already added to
    ``parser`` or its parent): it sets ``new``'s dest through ``new``'s type, after
    ``convert`` (old text -> new text, e.g. ``2048`` -> ``2048blocks``), and prints one line
    ``warning: OLD is deprecated; use NEW (same meaning)`` on stderr. Giving both is a usage
    error. ``parser`` may be an argument group."""
    return parser.add_argument(old, action=_DeprecatedAlias, new=new, convert=convert)


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


def add_document_arguments(group, count: Callable[[str], int] = positive_int,
                           passes_note: str = "") -> None:
    """``--docs``, ``--tokens`` and ``--passes``: the lab's documents, its defaults (one
    definition); ``count`` is the type of --docs and --tokens (``blocks`` takes 0)."""
    from pipeline.base.config import LAB_DOCS, LAB_PASSES, LAB_TOKENS
    group.add_argument("--docs", type=count, default=LAB_DOCS,
                       help="documents (default %(default)s)")
    group.add_argument("--tokens", type=count, default=LAB_TOKENS,
                       help="KV tokens per document (default %(default)s)")
    group.add_argument("--passes", type=pass_list, default=list(LAB_PASSES),
                       help=f"reading orders, comma-separated fwd/rev{passes_note} (default "
                            f"fwd,fwd,rev)")
