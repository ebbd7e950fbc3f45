"""A registry of classes by name, with run-time additions (routers, engines): the built-in
entries are its first contents (a class, or the module whose ``attribute`` it is, imported
when first asked for); ``register(cls)`` adds one under ``cls.NAME``."""

from __future__ import annotations

import importlib

__all__ = ["NamedClasses"]


class NamedClasses(dict):
    """name -> class (or the importable module holding it as ``attribute``)."""

    def __init__(self, kind: str, entries: dict, attribute: str = "") -> None:
        super().__init__(entries)
        self.kind, self.attribute, self.builtin = kind, attribute, frozenset(entries)

    def lookup(self, name: str) -> type:
        """The class registered as ``name`` (ValueError naming the choices)."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r} (choose from {', '.join(self)})")
        target = self[name]
        return target if isinstance(target, type) else \
            getattr(importlib.import_module(target), self.attribute)

    def register(self, cls: type) -> type:
        """Add ``cls`` under its ``NAME`` (ValueError when it has none or it is taken)."""
        name = getattr(cls, "NAME", None)
        if not name or name in self:
            raise ValueError(f"{self.kind} {name!r}: no NAME, or the name is taken "
                             f"(already registered)")
        self[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Drop a registered class (KeyError when absent)."""
        del self[name]

    def added(self) -> list[type]:
        """The classes registered at run time, in registration order."""
        return [self.lookup(name) for name in self if name not in self.builtin]
