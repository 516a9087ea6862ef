"""``instrument``, as every adapter re-exports it: OpenTelemetry for one agent or client
(docs/observability.md), importing OpenTelemetry (``coder_integrations.otel``) only when it is
called, so importing an adapter never loads it."""

from __future__ import annotations

from typing import Any

__all__ = ["instrument"]


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
    when this is called."""
    from coder_integrations.otel import instrument as otel_instrument

    return otel_instrument(
        target,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        agent_name=agent_name,
    )
