"""One CLI over the pipeline: ``python -m pipeline COMMAND`` (also installed as ``kvlab``).

Each command is a module in ``COMMANDS`` that offers ``HELP`` (one line),
``add_arguments(parser)`` and ``main(args) -> int``; this module builds one argparse parser
from them and turns a ``CLIError`` into one line on stderr and exit status 1, a closed
stdout (``| head``) into a quiet exit 1, and Ctrl-C into one line and exit status 130
(``interrupted; nothing written``, or what a command's ``interrupted(args)`` says was kept).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from types import ModuleType

from pipeline.arguments import Parser
from pipeline.errors import CLIError

PROG = "python -m pipeline"
#: command name -> module offering HELP, add_arguments(parser) and main(args).
COMMANDS = {
    "run": "pipeline.run",
    "measured": "pipeline.measured",
    "synth-ttft": "pipeline.synthetic_ttft",
    "bench": "pipeline.bench.run",
    "blocks": "pipeline.blocks.command",
    "trace": "pipeline.trace.command",
    "policies": "pipeline.policies.command",
    "measure": "pipeline.measure.cli",
    "plan": "pipeline.plan",
    "fit": "pipeline.fit.command",
    "simulate": "pipeline.engine.command",
    "fleet": "pipeline.fleet.command",
}


def command_module(name: str) -> ModuleType:
    """The module behind command ``name``."""
    return importlib.import_module(COMMANDS[name])


def _description(module: ModuleType) -> str:
    """A module docstring's first paragraph, without reST markup."""
    return (module.__doc__ or "").split("\n\n")[0].replace("``", "")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The parser of every command."""
    parser = Parser(
        prog=prog,
        description="kvlab: how much prefix KV cache survives on the GPU, what a CPU tier "
                    "buys, and what that does to time-to-first-token.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = command_module(name)
        sub = commands.add_parser(name, help=module.HELP, description=_description(module),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv`` and run the command; 1 with one line on stderr on a user error, 130
    with one line on Ctrl-C."""
    if prog is None:
        prog = "kvlab" if sys.argv and sys.argv[0].endswith("kvlab") else PROG
    from pipeline import staging

    args = None
    staging.committed.clear()                 # this command's commits only (see interrupted)
    try:
        parser = build_parser(prog)
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        status = args.handler(args)
        sys.stdout.flush()
        return status
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except KeyboardInterrupt:
        print(interrupted(args), file=sys.stderr)
        return 130


def interrupted(args: argparse.Namespace | None) -> str:
    """The one line Ctrl-C prints: what the command says it keeps (its ``interrupted(args)``,
    e.g. ``measure``'s lines so far), else whether ``pipeline.staging`` had committed."""
    from pipeline import staging

    name = getattr(args, "command", None)
    says = getattr(command_module(name), "interrupted", None) if name in COMMANDS else None
    if says:
        return says(args)
    if staging.committed:
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
