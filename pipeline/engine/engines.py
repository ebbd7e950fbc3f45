"""The engine registry: name -> an engine class, read by ``simulate --engine``, ``fleet
--engine``, ``plan --fleet --engine``, their ``--help`` and the ``models`` record.

An engine class says what it is and how it turns options and requests into a run:

- ``NAME``, ``SUMMARY`` (one line: what it models, its source and version);
- ``OPTIONS``: the ``EngineOption``s it owns (each offered by every engine command; given
  with another engine, one is a usage error naming it, exit 2);
- ``config(args, num_gpu_blocks, max_model_len)``: its scheduler config (a frozen
  dataclass with ``block_size``, ``num_gpu_blocks`` and ``max_model_len``);
- ``instance(config, cpu_tier)``: one engine, stepped by ``fleet`` (``EngineSim``'s
  interface: ``add_request``, ``has_work``, ``run_until``, ``request_rows``, the counts and
  cache queries of ``pipeline.fleet.view``); ValueError on a CPU tier it cannot take;
- ``simulate(requests, config, *, cpu_tier, clock, step_ms, concurrency, decode_run_ms)``:
  a whole run, ``pipeline.engine.loop.SimResult``'s frames;
- ``COMPILED``: its instances run the compiled loop (``EngineSim.load`` +
  ``compiled.compiled_run``), fleet's fast path for oblivious routers.

``ENGINES`` holds the built-in ones (one line each); ``register_engine(Class)`` adds one at
run time (``unregister_engine(NAME)`` drops it), and ``fleet``'s worker processes get it
with the sweep (``pipeline.fleet.sweep.Registered``).
"""

from __future__ import annotations

from pipeline.engine.config import EngineOption
from pipeline.engine.vllm import VLLM

__all__ = ["EngineOption", "ENGINES", "DEFAULT_ENGINE", "engine_class", "register_engine",
           "unregister_engine", "added_engines", "engine_options"]

DEFAULT_ENGINE = "vllm"


ENGINES: dict[str, type] = {
    VLLM.NAME: VLLM,
}
_BUILTIN = frozenset(ENGINES)


def engine_class(name: str) -> type:
    """The engine class registered as ``name`` (ValueError naming the choices)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (choose from {', '.join(ENGINES)})")
    return ENGINES[name]


def register_engine(cls: type) -> type:
    """Add ``cls`` under its ``NAME`` (ValueError when taken); return it."""
    if not getattr(cls, "NAME", None) or cls.NAME in ENGINES:
        raise ValueError(f"engine {getattr(cls, 'NAME', None)!r}: no NAME, or taken")
    ENGINES[cls.NAME] = cls
    return cls


def unregister_engine(name: str) -> None:
    """Drop a registered engine (KeyError when absent)."""
    del ENGINES[name]


def added_engines() -> list[type]:
    """The engines registered at run time, in registration order."""
    return [cls for name, cls in ENGINES.items() if name not in _BUILTIN]


def engine_options() -> dict[str, tuple[str, EngineOption]]:
    """Every registered engine's options by dest: (its owner, the option), each once."""
    found: dict[str, tuple[str, EngineOption]] = {}
    for name, cls in ENGINES.items():
        for option in getattr(cls, "OPTIONS", ()):
            found.setdefault(option.dest, (name, option))
    return found
