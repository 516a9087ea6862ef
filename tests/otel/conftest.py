"""Fixtures of the OpenTelemetry tests: an SDK tracer provider with an in-memory exporter, a
meter provider with an in-memory reader, fake servers over loopback, and the token check every
test gets for free (no span, event or metric attribute holds the session token). The runtime
facades (``runtime``, ``loop_runtime``) are ``tests/runtimes.py``'s, from
``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coder_integrations.fake_server import FakeCoderServer

FAST: dict[str, Any] = {"chunk_delay": 0.0005, "interrupt_delay": 0.05}


@attrs.define
class Telemetry:
    """The providers a test instruments with, and what they collected."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def named(self, prefix: str) -> list[ReadableSpan]:
        """The spans named ``prefix`` exactly or ``prefix`` then a space and more."""
        return [s for s in self.spans() if s.name == prefix or s.name.startswith(prefix + " ")]

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        for other in self.spans():
            if other.context.span_id == span.parent.span_id:
                return other
        return None

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> its data points."""
        out: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def texts(self) -> list[str]:
        """Every string the telemetry holds: span names, attribute keys and values, event
        names and attributes, metric names and point attributes."""
        texts: list[str] = []

        def attributes(values: Any) -> None:
            for key, value in (values or {}).items():
                texts.append(str(key))
                texts.append(repr(value))

        for span in self.spans():
            texts.append(span.name)
            attributes(span.attributes)
            if span.status.description:
                texts.append(span.status.description)
            for event in span.events:
                texts.append(event.name)
                attributes(event.attributes)
        for name, points in self.metrics().items():
            texts.append(name)
            for point in points:
                attributes(point.attributes)
        return texts


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(tracer_provider, meter_provider, exporter, reader)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def server(telemetry: Telemetry) -> Iterator[FakeCoderServer]:
    """A fake server; at the end, the session token appears nowhere in the telemetry."""
    server = FakeCoderServer(**FAST)
    server.start()
    try:
        yield server
    finally:
        server.stop()
    leaks = [text for text in telemetry.texts() if server.token in text]
    assert not leaks, f"the session token leaked into the telemetry: {leaks[:3]}"
