"""``instrument``, as every adapter re-exports it, and where it finds what it turns on.

The adapters stand below ``coder_integrations`` and import nothing of it. ``instrument`` calls
the instrumenter registered under the name ``"otel"``: the one a module handed to
``register_instrumenter`` (``coder_integrations.otel`` registers its own ``instrument`` when
it is imported), or else the one an installed distribution declares in the entry-point group
``coder_agents.instrumentation`` (the ``coder-agents`` distribution declares
``otel = coder_integrations.otel:instrument``), loaded on the first call. So importing an
adapter never loads OpenTelemetry, and calling ``instrument`` loads it through the package
metadata rather than through an import of the layer above (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ENTRY_POINT_GROUP", "instrument", "register_instrumenter"]

#: The entry-point group in which installed distributions declare their instrumenters.
ENTRY_POINT_GROUP = "coder_agents.instrumentation"

#: The instrumenters known so far, by name: registered, or loaded from an entry point.
_instrumenters: dict[str, Callable[..., Any]] = {}


def register_instrumenter(name: str, instrumenter: Callable[..., Any]) -> None:
    """Make ``instrumenter`` the one ``instrument`` calls for ``name`` (``"otel"``), ahead of
    any entry point of that name. A module registers itself when it is imported."""
    _instrumenters[name] = instrumenter


def _instrumenter(name: str) -> Callable[..., Any]:
    """The instrumenter registered under ``name``, or else the one the first distribution on
    the path declares under that name in ``ENTRY_POINT_GROUP`` (loaded now, and kept)."""
    found = _instrumenters.get(name)
    if found is not None:
        return found
    from importlib.metadata import entry_points

    declared = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not declared:
        raise ImportError(
            f"no instrumenter named {name!r}: none is registered, and no installed "
            f"distribution declares one in the entry-point group {ENTRY_POINT_GROUP!r} "
            "(install coder-agents with the 'otel' extra, or import coder_integrations.otel "
            "first when running from a source tree that is not installed)"
        )
    loaded: Callable[..., Any] = declared[0].load()
    return _instrumenters.setdefault(name, loaded)


def instrument(
    target: Any,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    agent_name: str | None = None,
) -> Any:
    """Turn on OpenTelemetry tracing and metrics for ``target``, a ``CoderAgent`` or a
    ``CoderChatClient`` of any adapter (docs/observability.md); needs the ``otel`` extra
    (``opentelemetry-api``). ``tracer_provider`` / ``meter_provider`` default to the global
    ones. Call it before the first turn. Returns ``target``. OpenTelemetry is imported only
    when this is called: the implementation, ``coder_integrations.otel.instrument``, is found
    through the entry-point group ``coder_agents.instrumentation`` (or its registration, once
    ``coder_integrations.otel`` is imported); without either it raises ``ImportError``."""
    return _instrumenter("otel")(
        target,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        agent_name=agent_name,
    )
