"""A traced agent turn, against the fake Coder server: the span tree and the metrics it records.

Run it with ``python examples/otel/traced_agent.py`` (needs ``opentelemetry-sdk``; the
``otel`` extra brings the API). It starts a fake deployment on loopback, instruments a blocking
agent with a client tool, drops the chat stream once in the middle of the answer, and prints
the spans as a tree and the metrics' totals with their units. The dropped stream is the point
of the example, so the library's warning about the redial is not printed: the span events
show the drop and the redial. To send the spans to a collector instead, add a
``BatchSpanProcessor(OTLPSpanExporter())`` to the provider (docs/observability.md).
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent, instrument, tool
from coder_proto.fake import CallClientTool, Say, Script

exporter = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
reader = InMemoryMetricReader()
meter_provider = MeterProvider(metric_readers=[reader])
tracer = tracer_provider.get_tracer("weather-app")


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    # The tool's own span nests under execute_tool.
    with tracer.start_as_current_span("weather station lookup"):
        return {"city": city, "temp_c": 21}


def print_tree(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    ids = {span.context.span_id for span in spans}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        events = "".join(f"  [{event.name}]" for event in span.events)
        print(f"{'  ' * depth}{span.name}{events}")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


def unit_of(unit: str, total: float) -> str:
    """A metric's unit as a reader says it: ``s`` as it is, ``{token}`` as ``token(s)``."""
    if unit.startswith("{") and unit.endswith("}"):
        return unit[1:-1] + ("" if total == 1 else "s")
    return unit


def main() -> None:
    # The stream drop below is on purpose: the spans record it, the library's log need not.
    for name in ("coder_proto", "coder_io_sync", "coder_io_common"):
        logging.getLogger(name).addHandler(logging.NullHandler())
    with FakeCoderServer(chunk_delay=0.002) as server:
        server.config.scripts.add(
            "weather",
            Script(
                (
                    CallClientTool(name="get_weather", args={"city": "Oslo"}),
                    Say(
                        "In {tool_result.city} it is {tool_result.temp_c} degrees today, with"
                        " clear skies, a light breeze from the fjord and no rain expected"
                        " before the evening."
                    ),
                )
            ),
        )
        server.faults.drop_stream_at("message_part", occurrence=8)
        with CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            tools=[get_weather],
        ) as agent:
            instrument(
                agent,
                tracer_provider=tracer_provider,
                meter_provider=meter_provider,
                agent_name="weather-bot",
            )
            with tracer.start_as_current_span("handle request"):
                result = agent.generate("What is the weather in Oslo?")
        print(result.text)
    print()
    print_tree(list(exporter.get_finished_spans()))
    print()
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                total = sum(
                    getattr(p, "sum", None) or getattr(p, "value", 0)
                    for p in metric.data.data_points
                )
                print(f"{metric.name}: {total:g} {unit_of(metric.unit or '', total)}".rstrip())


if __name__ == "__main__":
    main()
