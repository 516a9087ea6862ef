"""Names of a package imported on first use (PEP 562).

A package's ``__init__`` lists where each of its exported names is defined; the module that
defines one is imported the first time the name is looked up (an attribute access,
``from package import name``, a star import), and the value is then kept in the package's
namespace, so later lookups cost nothing. A program pays at import time only for what it
uses. Static type checkers see the names through the package's ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, sources: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), whose names
    ``sources`` maps from the module defining them (relative to ``package``, e.g.
    ``"._errors"``) to the names taken from it. ``__dir__`` lists the names already present
    and those not imported yet alike."""
    where = {name: module for module, names in sources.items() for name in names}
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
