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

from pipeline.base.named import NamedClasses
from pipeline.engine.config import EngineOption
from pipeline.engine.sglang import SGLang
from pipeline.engine.vllm import VLLM

__all__ = ["EngineOption", "ENGINES", "DEFAULT_ENGINE", "engine_class", "register_engine",
           "unregister_engine", "added_engines", "engine_options"]

DEFAULT_ENGINE = "vllm"


ENGINES: NamedClasses = NamedClasses("engine", {
    VLLM.NAME: VLLM,
    SGLang.NAME: SGLang,
})
engine_class = ENGINES.lookup
register_engine = ENGINES.register
unregister_engine = ENGINES.unregister
added_engines = ENGINES.added


def engine_options() -> dict[str, tuple[str, EngineOption]]:
    """Every registered engine's options by dest: (its owner, the option), each once."""
    found: dict[str, tuple[str, EngineOption]] = {}
    for name, cls in ENGINES.items():
        for option in getattr(cls, "OPTIONS", ()):
            found.setdefault(option.dest, (name, option))
    return found
