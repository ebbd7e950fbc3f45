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

from typing import Any

from pipeline.base.named import NamedClasses
from pipeline.fleet.routers.base import Router

__all__ = ["ROUTERS", "router_class", "make_router", "parse_router_options",
           "register_router", "unregister_router", "added_routers"]

#: name -> the module whose ``ROUTER`` it is, or the class (``register_router``)
ROUTERS: NamedClasses = NamedClasses("router", {
    "round-robin": "pipeline.fleet.routers.round_robin",
    "random": "pipeline.fleet.routers.random_choice",
    "least-loaded": "pipeline.fleet.routers.least_loaded",
    "session": "pipeline.fleet.routers.session",
    "prefix-approx": "pipeline.fleet.routers.prefix_approx",
    "prefix-estimate": "pipeline.fleet.routers.prefix_estimate",
    "prefix-precise": "pipeline.fleet.routers.prefix_precise",
    "kv-cost": "pipeline.fleet.routers.kv_cost",
}, attribute="ROUTER")
router_class = ROUTERS.lookup
register_router = ROUTERS.register
unregister_router = ROUTERS.unregister
added_routers = ROUTERS.added


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
