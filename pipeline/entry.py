"""Ctrl-C at every moment of a CLI process: one line on stderr, exit 130, nothing half-written.

A process that runs the CLI (``python -m pipeline``, ``python -m pipeline.<command module>``,
the ``kvlab`` console script, told by its name) is *guarded* from its first import of
``pipeline`` on (``pipeline/__init__.py``; standard library only here, so that happens within
milliseconds of the start):

1. until ``pipeline.cli.main`` runs the command (imports, argparse), nothing has been
   written: a Ctrl-C prints ``interrupted; nothing written`` and exits 130 at once (an
   interrupted import can surface as ImportError or RuntimeError: this stage avoids that);
2. while a command runs, the first Ctrl-C raises ``KeyboardInterrupt`` (``main`` answers it:
   staging removes its temporary files, one line, 130) and any later one is ignored, so
   that handling it cannot be interrupted into a traceback; one that lands in code C calls
   back into (numba compiling) is sent again 20 ms later, as ctypes would swallow it; after
   the line, the process's stderr is closed (interrupted libraries' noise at exit);
3. once ``main`` has its answer (outputs complete), a Ctrl-C while the process exits is
   ignored: the exit status is the command's.

In a process that is not guarded (tests calling ``main`` in-process) nothing changes.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["ENTRY_MODULES", "NOTHING_WRITTEN", "guard", "guard_if_entry", "take_over",
           "finished", "interrupted", "said_interrupted"]

NOTHING_WRITTEN = "interrupted; nothing written"

#: The modules ``python -m`` runs as the CLI: the package and each command module whose
#: ``__main__`` block calls ``pipeline.cli.run_command`` (tests/test_interrupts.py checks).
ENTRY_MODULES = frozenset({
    "pipeline", "pipeline.__main__", "pipeline.commands.fit", "pipeline.commands.policies",
    "pipeline.commands.plan", "pipeline.commands.measure", "pipeline.commands.synth_ttft",
    "pipeline.commands.measured"})


def _before_main(signum, frame) -> None:
    """Stage 1: nothing started, nothing written: the line, and exit now."""
    os.write(2, (NOTHING_WRITTEN + "\n").encode())
    os._exit(130)


#: Code that C calls back into (numba's compiler, through llvmlite): an exception raised
#: there is printed and swallowed by ctypes, so a Ctrl-C that lands there is sent again.
_CALLBACK_CODE = (f"{os.sep}llvmlite{os.sep}",)
_RETRY_S = 0.02


def _in_callback(frame) -> bool:
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _CALLBACK_CODE):
            return True
        frame = frame.f_back
    return False


_raised = False


def _first_only(signum, frame) -> None:
    """Stage 2: the first Ctrl-C is the command's ``KeyboardInterrupt``; later ones wait."""
    global _raised
    if _in_callback(frame):
        import threading

        threading.Timer(_RETRY_S, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _raised = True
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether this process's command was interrupted (stage 2), whatever exception that
    became on its way up (an import turns it into ImportError or RuntimeError)."""
    return _raised


_guarded = False


def guard() -> None:
    """Make this process guarded (stage 1); a no-op outside the main thread."""
    global _guarded
    try:
        signal.signal(signal.SIGINT, _before_main)
        _guarded = True
    except ValueError:                        # not the main thread: signals are not ours
        pass


def said_interrupted() -> None:
    """The one line is printed: in a guarded process, what the interrupted libraries print
    while the process exits (half-built objects' ``__del__``, ...) goes to /dev/null."""
    if not _guarded:
        return
    sys.stderr.flush()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    except OSError:
        pass


def _entry_module(argv: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE ...`` in ``argv``, else None."""
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("-m"):
            return word[2:]
        if word in ("-X", "-W") or not word.startswith("-") or word.startswith("-c"):
            if word not in ("-X", "-W"):
                return None                   # a script or -c: not a module run
            i += 1                            # the option's value
        i += 1
    return None


def guard_if_entry() -> None:
    """``guard()`` when this process is ``python -m`` one of ``ENTRY_MODULES`` or the
    ``kvlab`` console script."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    if script == "kvlab" or \
            _entry_module(list(getattr(sys, "orig_argv", []))) in ENTRY_MODULES:
        guard()


def take_over() -> None:
    """Stage 2, in a guarded process (``main`` has entered its ``try``)."""
    if signal.getsignal(signal.SIGINT) is _before_main:
        signal.signal(signal.SIGINT, _first_only)


def finished() -> None:
    """Stage 3, in a guarded process (``main`` has its exit status). A KeyboardInterrupt
    that escaped an ``exec``/``eval`` of a string (dataclasses, numba) leaves CPython's
    "unhandled KeyboardInterrupt" flag set, which makes the process kill itself with SIGINT
    at exit whatever its status: one ``exec`` that completes clears it."""
    if signal.getsignal(signal.SIGINT) in (_before_main, _first_only):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        exec("pass")                                # noqa: S102 (clears the flag above)
