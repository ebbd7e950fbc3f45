"""One CLI over the pipeline: ``python -m pipeline COMMAND`` (also installed as ``kvlab``).

``COMMANDS`` names each command's module and its one-line help; the module offers
``add_arguments(parser)`` and ``main(options) -> int``: the options are parsed once into a
frozen dataclass (``pipeline.base.arguments.freeze``) that no command changes. A command's
module is imported only when that command runs (``python -m pipeline --help`` lists every command without importing any).
This module builds one argparse parser from them and turns a ``CLIError`` into one line on
stderr and exit status 1 (a ``UsageError``: 2), a closed stdout (``| head``) into a quiet
exit 1, and Ctrl-C into one line and exit status 130 (``interrupted; nothing written``, or what a command's
``interrupted(args)`` says was kept); ``pipeline.entry`` extends that to every moment of a
process, its imports and its exit included.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import NamedTuple

from pipeline import entry
from pipeline.base.arguments import Parser, freeze
from pipeline.base.errors import CLIError, UsageError

PROG = "python -m pipeline"


class Command(NamedTuple):
    """A command: the module offering add_arguments(parser) and main(args), and its help."""

    module: str
    help: str


#: command name -> its module and one-line help (the module is imported only to run it).
COMMANDS = {
    "run": Command("pipeline.commands.run",
                   "exports, sweeps, aggregates, measured summary, report"),
    "measured": Command("pipeline.commands.measured",
                        "summarize a measured TTFT file and attribute its requests to tiers"),
    "synth-ttft": Command("pipeline.commands.synth_ttft", "regenerate the synthetic data/ttft.jsonl"),
    "bench": Command("pipeline.bench.run", "time the default run and the one-pass curves; "
                     "--with adds the others (figures)"),
    "blocks": Command("pipeline.commands.blocks", "the lab's scenario in block mode "
                      "(tail-first / head-first tiers), JSON"),
    "trace": Command("pipeline.commands.trace", "replay a trace (Mooncake, token ids) or a "
                     "pattern: GPU/CPU/recomputed tokens"),
    "policies": Command("pipeline.commands.policies", "hit ratio per cache policy (LRU ... ARC, "
                        "OPT) per capacity: lab or Mooncake trace"),
    "measure": Command("pipeline.commands.measure", "measure TTFT on a real server (or a local "
                       "llama.cpp one) into a JSON-lines file"),
    "plan": Command("pipeline.commands.plan", "the smallest CPU tier (or, with --fleet, the "
                    "smallest or cheapest fleet) that meets a TTFT, TPOT or hit-ratio target"),
    "fit": Command("pipeline.commands.fit", "fit step-time coefficients to measured requests "
                   "(llama.cpp's, or a vLLM bench run's efficiency factors)"),
    "simulate": Command("pipeline.simulate", "an engine's loop step by step (vLLM's, or "
                        "SGLang's): per-request hits, tiers, TTFT and TPOT under load"),
    "fleet": Command("pipeline.commands.fleet", "N engine instances behind each router: hit "
                     "ratio, TTFT, imbalance (a sweep)"),
}


def command_module(name: str) -> ModuleType:
    """The module behind command ``name`` (imported now)."""
    return importlib.import_module(COMMANDS[name].module)


def _description(module: ModuleType) -> str:
    """A module docstring's first paragraph, without reST markup."""
    return (module.__doc__ or "").split("\n\n")[0].replace("``", "")


def build_parser(prog: str = PROG, load: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; only the commands in ``load`` (default: all) get their
    options, and only their modules are imported."""
    loaded = set(COMMANDS if load is None else load)
    parser = Parser(
        prog=prog,
        description="kvlab: how much prefix KV cache survives on the GPU, what a CPU tier "
                    "buys, and what that does to time-to-first-token.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        if name not in loaded:
            commands.add_parser(name, help=command.help)
            continue
        module = command_module(name)
        sub = commands.add_parser(name, help=command.help, description=_description(module),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.main)
    return parser


def _named_command(argv: list[str]) -> list[str]:
    """The command ``argv`` runs (as a list of at most one name): its first word, when that
    is a command; nothing for ``--help`` or a mistyped command (argparse then says which)."""
    return argv[:1] if argv and argv[0] in COMMANDS else []


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv`` and run the command; 1 with one line on stderr on a user error (2 on a
    usage error), 130 with one line on Ctrl-C."""
    if prog is None:
        prog = "kvlab" if sys.argv and sys.argv[0].endswith("kvlab") else PROG
    args = None
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(prog, load=_named_command(argv))
        args = freeze(parser.parse_args(argv))
        from pipeline.base import staging     # polars: not needed for --help

        staging.committed.clear()             # this command's commits only (see interrupted)
        entry.take_over()                     # a guarded process: Ctrl-C is ours from here
        status = args.handler(args)
        sys.stdout.flush()
        entry.finished()                      # outputs complete: a late Ctrl-C is ignored
        return status
    except BaseException as exc:
        return _ended(exc, args, prog)


def _ended(exc: BaseException, args: argparse.Namespace | None, prog: str) -> int:
    """``main``'s answer to what ended the command: Ctrl-C (also when an import or a library
    turned it into another exception, ``entry.interrupted``), a usage or user error, a
    closed stdout; anything else (argparse's exit, a bug) goes on up."""
    entry.finished()
    if isinstance(exc, KeyboardInterrupt) or entry.interrupted():
        print(interrupted(args), file=sys.stderr)
        entry.said_interrupted()
        return 130
    if isinstance(exc, UsageError):           # as argparse's own: one line, exit 2
        print(f"{prog} {args.command}: error: {exc}", file=sys.stderr)
        return exc.status
    if isinstance(exc, CLIError):
        print(f"error: {exc}", file=sys.stderr)
        return exc.status
    if isinstance(exc, BrokenPipeError):
        _silence_stdout()
        return 1
    raise exc


def interrupted(args: argparse.Namespace | None) -> str:
    """The one line Ctrl-C prints: what the command says it keeps (its ``interrupted(args)``,
    e.g. ``measure``'s lines so far), else whether ``pipeline.base.staging`` had committed."""
    staging = sys.modules.get("pipeline.base.staging")   # None: interrupted before it

    name = getattr(args, "command", None)
    module = sys.modules.get(COMMANDS[name].module) if name in COMMANDS else None
    says = getattr(module, "interrupted", None)      # not imported again: it may be what broke
    if says:
        return says(args)
    if staging is not None and staging.committed:
        return f"interrupted; {len(staging.committed)} output file(s) were already written"
    return "interrupted; nothing written"


def _silence_stdout() -> None:
    """The reader of stdout left (``... | head``): as the Python docs (signal, "Note on
    SIGPIPE") recommend, point stdout at devnull so that the flush at exit raises no second
    BrokenPipeError, and exit 1 without a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass                                          # stdout is no real file (tests)


def run_command(name: str, argv: list[str] | None = None) -> int:
    """``python -m pipeline.<module>`` entry: the same as ``python -m pipeline name ...``."""
    return main([name, *(sys.argv[1:] if argv is None else argv)])
