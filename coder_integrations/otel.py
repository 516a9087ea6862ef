"""OpenTelemetry tracing and metrics for agents and clients of every adapter
(docs/observability.md); needs the ``otel`` extra (``opentelemetry-api``).

``instrument(agent_or_client, tracer_provider=None, meter_provider=None, agent_name=None)``
turns it on for one object. Every adapter re-exports an ``instrument`` that finds this one
without importing it, through the entry-point group ``coder_agents.instrumentation``, and
loads this module only when it is called; importing this module registers its ``instrument``
there too (``coder_io_common.instrumentation``). Spans follow the OpenTelemetry GenAI semantic conventions:

* ``invoke_agent`` per turn (``generate`` or ``stream``), a child of the caller's current
  span;
* ``chat`` per model round trip (a segment: one step of the turn), a child of the turn;
* ``execute_tool <name>`` per client tool call, a child of the turn, current while the tool
  runs (on asyncio, trio and blocking alike), so the tool's own spans nest under it;
* ``<METHOD> <route template>`` per REST call (an HTTP client span), a child of the step or
  turn it belongs to; never the token, never a body;
* span events for stream redials, drops and promotions.

Metrics: ``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` (histograms
as the conventions name them), ``coder.stream.redials`` and ``coder.stream.drops``
(counters). Events and results only are read: the instrumentation never touches a header.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from coder_io_common.instrumentation import register_instrumenter
from coder_io_common.observer import (
    AgentObserver,
    ToolObservation,
    TurnObservation,
    observe,
    tee_events,
)
from coder_proto.adapter import CANCELLED_MESSAGE, ToolOutcome, TransportEventSink

__all__ = ["PROVIDER_NAME", "instrument", "route_template"]

PROVIDER_NAME = "coder"
"""``gen_ai.provider.name`` of every span and metric: the model runs behind Coder."""
_SCOPE = "coder_agents"

# Bucket boundaries the GenAI conventions advise for their two histograms.
_TOKEN_BUCKETS = [
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
]
_DURATION_BUCKETS = [
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
]

#: A route segment that names an item of the collection before it, and its placeholder.
_COLLECTIONS = {
    "chats": "chat",
    "files": "file",
    "organizations": "organization",
    "messages": "message",
    "queue": "message",
    "users": "user",
    "workspaces": "workspace",
    "workspaceagents": "agent",
}
#: Route words that follow a collection without naming an item.
_ROUTE_WORDS = frozenset(
    {"models", "model-configs", "watch", "me", "files", "messages", "cost", "stream", "host"}
)
_ID_LIKE = re.compile(r"[0-9A-Z_%.:]")
_VERSION = re.compile(r"v[0-9]+")


def route_template(path: str) -> str:
    """The route template of a request path, for ``url.template`` and the span name: the
    query is dropped and every item id replaced by a placeholder
    (``/api/experimental/chats/{chat}/messages``)."""
    parts = path.partition("?")[0].split("/")
    out: list[str] = []
    for index, segment in enumerate(parts):
        before = parts[index - 1] if index else ""
        if before in _COLLECTIONS and segment and segment not in _ROUTE_WORDS:
            out.append("{" + _COLLECTIONS[before] + "}")
        elif _ID_LIKE.search(segment) and not _VERSION.fullmatch(segment):
            out.append("{id}")
        else:
            out.append(segment)
    return "/".join(out)


def _ns(timestamp: float | None) -> int | None:
    """Epoch nanoseconds of a transport event's wall-clock ``timestamp`` (none when unset)."""
    if not timestamp:
        return None
    return int(timestamp * 1e9)


def _failure_type(message: str) -> str:
    """``error.type`` of a REST call that got no response, from its ``http:error`` message
    (``"ConnectError: ..."``): the exception's class, ``cancelled`` for a call the library
    cancelled, ``_OTHER`` otherwise."""
    if message == CANCELLED_MESSAGE:
        return "cancelled"
    name = message.partition(":")[0].strip()
    return name if name.isidentifier() else "_OTHER"


def _error_type(error: BaseException) -> str:
    return type(error).__name__


def _record_error(span: Span, error: BaseException) -> None:
    """The error's class as ``error.type``, its retryability (library errors), the exception
    event, and the span's error status."""
    span.set_attribute("error.type", _error_type(error))
    retryable = getattr(error, "retryable", None)
    if isinstance(retryable, bool):
        span.set_attribute("coder.error.retryable", retryable)
    kind = getattr(error, "kind", None)
    if isinstance(kind, str):
        span.set_attribute("coder.error.kind", kind)
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, _error_type(error)))


class _Instruments:
    """The tracer, the histograms and the counters of one instrumentation."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from coder_proto import __version__

        self.tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used per turn.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of agent turns (invoke_agent) and model round trips (chat).",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.redials = meter.create_counter(
            "coder.stream.redials",
            unit="{redial}",
            description="Chat stream redials after a dropped or failed connection.",
        )
        self.drops = meter.create_counter(
            "coder.stream.drops",
            unit="{drop}",
            description="Chat stream connections the server or the network ended.",
        )


class _Server:
    """``server.address`` / ``server.port`` of a base URL."""

    def __init__(self, base_url: str) -> None:
        split = urlsplit(base_url)
        self.address = split.hostname or ""
        port = split.port
        if port is None:
            port = 443 if split.scheme in ("https", "wss") else 80
        self.port = port
        self.attributes: dict[str, Any] = {"server.address": self.address, "server.port": port}


# -- the client: HTTP spans ------------------------------------------------------------------


class _ClientTracer:
    """HTTP client spans for the ``http:*`` events of one client's sink."""

    def __init__(self, instruments: _Instruments, base_url: str) -> None:
        self.instruments = instruments
        self.server = _Server(base_url)
        # The instrumented agents on this client, as long as they live.
        self._agents: weakref.WeakSet[_AgentTracer] = weakref.WeakSet()
        self._spans: dict[int, Span] = {}
        self._lock = threading.Lock()

    def add_agent(self, agent: _AgentTracer) -> None:
        with self._lock:
            self._agents.add(agent)

    def _parent(self, path: str) -> Any:
        """The context an HTTP span belongs to: the running turn of an instrumented agent on
        this client whose chat the path names, else the only running turn, else the
        caller's current context."""
        with self._lock:
            agents = list(self._agents)
        turns = [agent.turn for agent in agents if agent.turn is not None]
        for turn in turns:
            chat_id = turn.chat_id
            if chat_id and f"/{chat_id}" in path:
                return turn.current_context()
        if len(turns) == 1:
            return turns[0].current_context()
        return None

    def event(self, event: Any) -> None:
        kind = event.type
        if kind == "http:request":
            template = route_template(event.path)
            span = self.instruments.tracer.start_span(
                f"{event.method} {template}",
                context=self._parent(event.path),
                kind=SpanKind.CLIENT,
                start_time=_ns(event.timestamp),
                attributes={
                    "http.request.method": event.method,
                    "url.template": template,
                    **self.server.attributes,
                    "coder.operation": event.op,
                },
            )
            with self._lock:
                self._spans[event.id] = span
        elif kind in ("http:response", "http:error"):
            with self._lock:
                ended: Span | None = self._spans.pop(event.id, None)
            if ended is None:
                return
            span = ended
            if kind == "http:response":
                span.set_attribute("http.response.status_code", event.status)
                if event.status >= 400:
                    span.set_attribute("error.type", str(event.status))
                    span.set_status(Status(StatusCode.ERROR))
            else:
                error_type = _failure_type(event.message)
                span.set_attribute("error.type", error_type)
                span.set_status(Status(StatusCode.ERROR, error_type))
            span.end(end_time=_ns(event.timestamp))


# -- the agent: turns, steps, tools, stream events ---------------------------------------------


class _Step:
    """One segment's ``chat`` span, ended when the turn ends (its usage is known then) at
    the time it settled."""

    def __init__(self, span: Span, started: float) -> None:
        self.span = span
        self.started = started
        self.settled: int | None = None
        self.clean = False
        self.finish_reason: str | None = None


class _Turn(TurnObservation):
    """One turn's ``invoke_agent`` span and the ``chat`` spans of its segments."""

    def __init__(self, tracer: _AgentTracer, agent: Any, *, streaming: bool) -> None:
        self.tracer = tracer
        self.chat_id: str | None = agent.chat_id
        self.started = time.monotonic()
        self.steps: list[_Step] = []
        self.open_step: _Step | None = None
        self._lock = threading.Lock()
        attributes = {
            **tracer.common,
            "gen_ai.operation.name": "invoke_agent",
            "coder.turn.streaming": streaming,
        }
        if tracer.agent_name:
            attributes["gen_ai.agent.name"] = tracer.agent_name
        if self.chat_id:
            attributes["gen_ai.conversation.id"] = self.chat_id
        name = "invoke_agent" + (f" {tracer.agent_name}" if tracer.agent_name else "")
        self.span = tracer.instruments.tracer.start_span(
            name, kind=SpanKind.CLIENT, attributes=attributes
        )
        self.context = trace.set_span_in_context(self.span)

    def current_context(self) -> Any:
        """The open step's context, else the turn's."""
        step = self.open_step
        return self.context if step is None else trace.set_span_in_context(step.span)

    def current_span(self) -> Span:
        step = self.open_step
        return self.span if step is None else step.span

    def _chat(self, chat_id: str | None) -> None:
        if chat_id and chat_id != self.chat_id:
            self.chat_id = chat_id
            self.span.set_attribute("gen_ai.conversation.id", chat_id)

    # -- segments ------------------------------------------------------------------------------

    def segment_started(self, event: Any) -> None:
        tracer = self.tracer
        self._chat(event.chat_id)
        attributes = {
            **tracer.common,
            "gen_ai.operation.name": "chat",
            "coder.segment": event.segment,
        }
        if self.chat_id:
            attributes["gen_ai.conversation.id"] = self.chat_id
        model = tracer.model
        span = tracer.instruments.tracer.start_span(
            "chat" + (f" {model}" if model else ""),
            context=self.context,
            kind=SpanKind.CLIENT,
            start_time=_ns(event.timestamp),
            attributes=attributes,
        )
        step = _Step(span, time.monotonic())
        with self._lock:
            self.steps.append(step)
            self.open_step = step

    def segment_settled(self, event: Any) -> None:
        with self._lock:
            step = self.open_step
            self.open_step = None
        if step is None:
            return
        self._chat(event.chat_id)
        span = step.span
        if event.chat_id:
            span.set_attribute("gen_ai.conversation.id", event.chat_id)
        if event.status:
            span.set_attribute("coder.chat.status", event.status)
        metric = {**self.tracer.common, "gen_ai.operation.name": "chat"}
        if event.finish_reason:
            step.finish_reason = event.finish_reason
            step.clean = event.error is None
            span.set_attribute("gen_ai.response.finish_reasons", [event.finish_reason])
        if event.error:
            name = str(event.error.get("name") or "_OTHER")
            span.set_attribute("error.type", name)
            span.set_status(Status(StatusCode.ERROR, name))
            metric["error.type"] = name
        step.settled = _ns(event.timestamp) or time.time_ns()
        self.tracer.instruments.duration.record(event.duration, metric)

    # -- the end ---------------------------------------------------------------------------------

    def finished(self, result: Any, error: BaseException | None) -> None:
        with self._lock:
            steps = list(self.steps)
            self.open_step = None
        tracer = self.tracer
        span = self.span
        metric = {**tracer.common, "gen_ai.operation.name": "invoke_agent"}
        if result is not None:
            self._chat(result.chat_id)
            span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
            span.set_attribute("coder.turn.steps", len(result.steps))
            if result.settled_by:
                span.set_attribute("coder.turn.settled_by", result.settled_by)
                if result.settled_by == "promotion":
                    span.add_event("coder.turn.promotion")
            _set_usage(span, result.usage)
            self._record_tokens(result.usage, metric)
            self._step_usage(steps, result.steps)
            if result.error is not None:
                _record_error(span, result.error)
                metric["error.type"] = _error_type(result.error)
        elif error is not None:
            _record_error(span, error)
            metric["error.type"] = _error_type(error)
        for step in steps:
            step.span.end(end_time=step.settled)
        tracer.instruments.duration.record(time.monotonic() - self.started, metric)
        span.end()
        tracer.turn_ended(self)

    def _record_tokens(self, usage: Any, metric: dict[str, Any]) -> None:
        histogram = self.tracer.instruments.token_usage
        if usage.input_tokens is not None:
            histogram.record(usage.input_tokens, {**metric, "gen_ai.token.type": "input"})
        if usage.output_tokens is not None:
            histogram.record(usage.output_tokens, {**metric, "gen_ai.token.type": "output"})

    @staticmethod
    def _step_usage(steps: list[_Step], results: Sequence[Any]) -> None:
        """Each cleanly settled segment's usage from the result's steps, in order (when they
        pair one to one)."""
        clean = [step for step in steps if step.clean]
        if len(clean) != len(results):
            return
        for step, result in zip(clean, results, strict=True):
            if result.usage is not None:
                _set_usage(step.span, result.usage)


def _set_usage(span: Span, usage: Any) -> None:
    for attribute, value in (
        ("gen_ai.usage.input_tokens", usage.input_tokens),
        ("gen_ai.usage.output_tokens", usage.output_tokens),
        ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
        ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
        ("coder.usage.reasoning_tokens", usage.reasoning_tokens),
    ):
        if value is not None:
            span.set_attribute(attribute, value)


class _FailureReporter:
    """The invocation a tool runner is handed: the ``ToolInvocation`` itself for everything
    but ``failed``, which also notes the exception the tool raised."""

    def __init__(self, invocation: Any) -> None:
        self._invocation = invocation
        self.error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._invocation, name)

    def failed(self, exc: BaseException) -> ToolOutcome:
        self.error = exc
        outcome: ToolOutcome = self._invocation.failed(exc)
        return outcome


class _Tool(ToolObservation):
    """One ``execute_tool`` span, current in the task or thread running the tool."""

    def __init__(self, tracer: _AgentTracer, invocation: Any) -> None:
        reporter = _FailureReporter(invocation)
        super().__init__(reporter)
        self._reporter = reporter
        tool = invocation.tool
        turn = tracer.turn
        attributes = {
            **tracer.common,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.call.id": invocation.tool_call_id,
            "gen_ai.tool.type": "function",
        }
        description = getattr(tool, "description", None)
        if isinstance(description, str) and description:
            attributes["gen_ai.tool.description"] = description
        if turn is not None and turn.chat_id:
            attributes["gen_ai.conversation.id"] = turn.chat_id
        self.span = tracer.instruments.tracer.start_span(
            f"execute_tool {tool.name}",
            context=None if turn is None else turn.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._token: Any = None

    def __enter__(self) -> _Tool:
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None:
                _record_error(self.span, exc)
            self.span.end()
        finally:
            otel_context.detach(self._token)

    def outcome(self, outcome: ToolOutcome) -> ToolOutcome:
        if outcome.is_error:
            error = self._reporter.error
            if error is not None:
                _record_error(self.span, error)
            else:
                self.span.set_attribute("error.type", "tool_error")
                self.span.set_status(Status(StatusCode.ERROR, "tool_error"))
        return outcome


class _AgentTracer(AgentObserver):
    """The OpenTelemetry observer of one agent."""

    def __init__(
        self, instruments: _Instruments, agent: Any, client: _ClientTracer, agent_name: str | None
    ) -> None:
        self.instruments = instruments
        self.client = client
        self.agent_name = agent_name
        self.model: str | None = agent._core.options.model
        self.common: dict[str, Any] = {
            "gen_ai.provider.name": PROVIDER_NAME,
            **client.server.attributes,
        }
        if self.model:
            self.common["gen_ai.request.model"] = self.model
        self.turn: _Turn | None = None

    def turn_started(self, agent: Any, *, streaming: bool) -> TurnObservation:
        turn = _Turn(self, agent, streaming=streaming)
        self.turn = turn
        return turn

    def turn_ended(self, turn: _Turn) -> None:
        if self.turn is turn:
            self.turn = None

    def tool_started(self, invocation: Any) -> ToolObservation:
        return _Tool(self, invocation)

    def transport_event(self, event: Any) -> None:
        kind = event.type
        turn = self.turn
        if kind == "segment:start":
            if turn is not None:
                turn.segment_started(event)
        elif kind == "segment:settle":
            if turn is not None:
                turn.segment_settled(event)
        elif kind == "ws:redial":
            self.instruments.redials.add(1, self.common)
            self._span_event(
                turn,
                "coder.stream.redial",
                event,
                {
                    "coder.stream.attempt": event.attempt,
                    "coder.stream.consecutive_failures": event.consecutive_failures,
                    "coder.stream.backoff": event.backoff,
                },
            )
        elif kind == "ws:close" and (event.code is not None or event.reason is not None):
            self.instruments.drops.add(1, self.common)
            attributes: dict[str, Any] = {"coder.stream.attempt": event.attempt}
            if event.code is not None:
                attributes["coder.stream.close_code"] = event.code
            if event.reason:
                attributes["coder.stream.close_reason"] = event.reason
            self._span_event(turn, "coder.stream.drop", event, attributes)
        elif kind == "ws:error":
            self._span_event(
                turn,
                "coder.stream.error",
                event,
                {"coder.stream.attempt": event.attempt, "coder.stream.error": event.message},
            )

    @staticmethod
    def _span_event(turn: _Turn | None, name: str, event: Any, attributes: dict[str, Any]) -> None:
        if turn is not None:
            turn.current_span().add_event(name, attributes, timestamp=_ns(event.timestamp))


# -- turning it on ------------------------------------------------------------------------------


def _client_tracer(client: Any, instruments: _Instruments) -> _ClientTracer:
    """The client's HTTP tracer, made and attached to its sink on first use."""
    tracer: _ClientTracer | None = getattr(client, "_otel_tracer", None)
    if tracer is None:
        tracer = _ClientTracer(instruments, client.settings.base_url)
        client._otel_tracer = tracer
        client_tracer = tracer

        def http_only(event: Any) -> None:
            if event.type.startswith("http:"):
                client_tracer.event(event)

        tee_events(client.sink, http_only)
    return tracer


def _own_session_sink(agent: Any) -> None:
    """Give the agent's session a sink of its own when it shares its client's (every event
    is forwarded to the client's sink), so the agent's observer sees only its session."""
    session = agent._core.session
    client_sink: TransportEventSink = agent.client.sink
    if session.sink is client_sink:
        session.sink = TransportEventSink(client_sink.emit, wall_clock=client_sink.wall_clock)


def instrument(
    target: Any,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    agent_name: str | None = None,
) -> Any:
    """Turn on OpenTelemetry spans and metrics for ``target``, a ``CoderAgent`` or a
    ``CoderChatClient`` of any adapter; returns ``target``.

    For an agent: a span per turn, per model round trip, per client tool call, per REST call
    of its client, and stream events and metrics (docs/observability.md). For a client: its
    REST calls' HTTP spans. ``tracer_provider`` / ``meter_provider`` default to the global
    providers; ``agent_name`` is ``gen_ai.agent.name`` and ends the turn spans' name.
    Instrument before the first turn: a stream already open keeps reporting to no one.
    Instrumenting again is harmless (the client's HTTP spans stay with its first
    instrumentation)."""
    instruments = _Instruments(tracer_provider, meter_provider)
    if hasattr(target, "_core") and hasattr(target, "client"):
        client = _client_tracer(target.client, instruments)
        existing = getattr(target, "_observer", None)
        if isinstance(existing, _AgentTracer):
            return target
        tracer = _AgentTracer(instruments, target, client, agent_name)
        client.add_agent(tracer)
        _own_session_sink(target)
        observe(target, tracer)
        return target
    if hasattr(target, "settings") and hasattr(target, "sink"):
        _client_tracer(target, instruments)
        return target
    raise TypeError(
        f"instrument() takes a CoderAgent or a CoderChatClient, not {type(target).__name__}"
    )


register_instrumenter("otel", instrument)
