"""The router registry: one line per router (name -> module defining ``ROUTER``).

A new router is one file in this package (a ``Router`` subclass, ``ROUTER = Class``) plus
its line in ``ROUTERS``; ``register_router(Class)`` adds one from anywhere at run time
(``unregister_router(name)`` drops it), and ``fleet``'s worker processes get it with the
sweep (``pipeline.fleet.sweep.Registered``). ``--router``'s choices, its ``--help`` and
``--list-routers`` read ``ROUTERS``.

>>> sorted(ROUTERS)[:3]
['kv-cost', 'least-loaded', 'prefix-approx']
"""

from __future__ import annotations

import importlib
from typing import Any

from pipeline.fleet.routers.base import Router

__all__ = ["ROUTERS", "router_class", "make_router", "parse_router_options",
           "register_router", "unregister_router", "added_routers"]

#: name -> the module whose ``ROUTER`` it is, or the class (``register_router``)
ROUTERS: dict[str, str | type[Router]] = {
    "round-robin": "pipeline.fleet.routers.round_robin",
    "random": "pipeline.fleet.routers.random_choice",
    "least-loaded": "pipeline.fleet.routers.least_loaded",
    "session": "pipeline.fleet.routers.session",
    "prefix-approx": "pipeline.fleet.routers.prefix_approx",
    "prefix-estimate": "pipeline.fleet.routers.prefix_estimate",
    "prefix-precise": "pipeline.fleet.routers.prefix_precise",
    "kv-cost": "pipeline.fleet.routers.kv_cost",
}
_BUILTIN = frozenset(ROUTERS)


def register_router(cls: type[Router]) -> type[Router]:
    """Add router class ``cls`` under its ``NAME`` (ValueError when empty or taken)."""
    if not cls.NAME or cls.NAME in ROUTERS:
        raise ValueError(f"router name {cls.NAME!r} is empty or already registered")
    ROUTERS[cls.NAME] = cls
    return cls


def unregister_router(name: str) -> None:
    """Drop a router (KeyError when absent)."""
    del ROUTERS[name]


def added_routers() -> list[type[Router]]:
    """The router classes registered at run time, in registration order."""
    return [router_class(name) for name in ROUTERS if name not in _BUILTIN]


def router_class(name: str) -> type[Router]:
    """The router class registered as ``name``; ValueError naming the choices if none."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r} (choose from {', '.join(ROUTERS)})")
    target = ROUTERS[name]
    return target if isinstance(target, type) else importlib.import_module(target).ROUTER


def make_router(name: str, num_instances: int, block_size: int, seed: int = 0,
                **options: Any) -> Router:
    """A fresh router ``name`` over ``num_instances`` instances."""
    return router_class(name)(num_instances, block_size, seed, **options)


def parse_router_options(items: list[str], routers: list[str]) -> dict[str, dict[str, Any]]:
    """``ROUTER.OPTION=VALUE`` items -> per router its options (typed); ValueError naming
    the item when the router is unknown, not among ``routers``, or has no such option."""
    options: dict[str, dict[str, Any]] = {name: {} for name in routers}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not option:
            raise ValueError(f"--router-option {item!r}: expected ROUTER.OPTION=VALUE")
        cls = router_class(name)
        if name not in routers:
            raise ValueError(f"--router-option {item!r}: router {name} is not among "
                             f"--router {','.join(routers)}")
        parameter = cls.PARAMETERS.get(option)
        if parameter is None:
            raise ValueError(f"--router-option {item!r}: router {name} has no option "
                             f"{option!r} (options: {', '.join(cls.PARAMETERS) or 'none'})")
        try:
            options[name][option] = parameter.kind(value)
        except ValueError:
            raise ValueError(f"--router-option {item!r}: bad value {value!r} for "
                             f"{parameter.kind.__name__}") from None
    return options
