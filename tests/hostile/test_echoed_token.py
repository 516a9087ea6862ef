"""A server that sends the session token back, on every runtime (docs/robustness.md).

The hostile server echoes the token in a REST error body (JSON ``message``, ``detail`` and
``validations``, and a body that is not JSON), in a response header and reason phrase, in a
chat's ``last_error``, in a stream ``error`` event, in a WebSocket close reason and in a
rejected upgrade's body. Whatever
the user can see afterwards holds ``<redacted>`` in its place and never the token: the
exception (``str``, ``repr``, every attribute, notes, the whole chain), the log records (the
suite's autouse check), the transport events, the transcript and the OpenTelemetry spans.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from coder_integrations.otel import instrument
from coder_proto import CoderApiError, CoderChatError
from coder_proto.transcript import TranscriptRecorder
from tests.runtimes import RUNTIMES as RUNTIME_FACADES
from tests.runtimes import Recorder

from .runtimes import PREFIX, RUNTIMES, TOKEN
from .server import Conn, HostileServer
from .test_rest import _chain
from .ws_cases import CHAT_ID, ORG, accept, events, frame, own, serve

#: How a JSON body may spell the token: as it is, percent-encoded, JSON-escaped.
ECHOES = (TOKEN, quote(TOKEN, safe=""), json.dumps(TOKEN)[1:-1])


class Seen:
    """Everything a user can observe of one call."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.value: Any = None
        self.events: list[Any] = []
        self.lines: list[str] = []
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def span_texts(self) -> list[str]:
        texts: list[str] = []
        for span in self.exporter.get_finished_spans():
            texts.append(span.name)
            texts.extend(repr(v) for v in (span.attributes or {}).values())
            texts.append(span.status.description or "")
            for event in span.events:
                texts.append(event.name)
                texts.extend(repr(v) for v in (event.attributes or {}).values())
        return texts

    def error_texts(self) -> list[str]:
        assert self.error is not None
        texts: list[str] = []
        for error in _chain(self.error):
            texts += [str(error), repr(error), repr(vars(error))]
            texts += [str(note) for note in getattr(error, "__notes__", ())]
        return texts

    def assert_clean(self) -> None:
        """No token anywhere, and at least one ``<redacted>`` where the echo was."""
        texts = {
            "error": self.error_texts(),
            "transport events": [repr(e) for e in self.events],
            "transcript": self.lines,
            "spans": self.span_texts(),
        }
        for where, found in texts.items():
            leaks = [t for t in found if TOKEN in t]
            assert not leaks, f"the token is in the {where}: {leaks[:2]}"
        assert self.lines, "nothing was recorded"
        assert self.exporter.get_finished_spans(), "no span was recorded"


@pytest.fixture
def seen() -> Iterator[Seen]:
    out = Seen()
    yield out
    out.provider.shutdown()


def _client_call(runtime: str, url: str, seen: Seen) -> None:
    """``client.get_chat`` with a recorder, a transport-event callback and spans."""
    kwargs: dict[str, Any] = {
        "prefix": PREFIX,
        "recorder": TranscriptRecorder(seen.lines.append),
        "on_transport_event": seen.events.append,
    }

    async def scenario(rt: Any) -> None:
        client = rt.client_class(url, TOKEN, **kwargs)
        instrument(client, tracer_provider=seen.provider)
        try:
            seen.value = await rt.call(client, "get_chat", "c1")
        except Exception as exc:
            seen.error = exc
        finally:
            await rt.close_client(client)

    RUNTIME_FACADES[runtime](Recorder()).run(scenario)


def _generate(runtime: str, url: str, seen: Seen) -> None:
    """``agent.generate`` with a recorder, a transport-event callback and spans."""
    kwargs: dict[str, Any] = {
        "base_url": url,
        "token": TOKEN,
        "organization_id": ORG,
        "request_timeout": 2.0,
        "recorder": TranscriptRecorder(seen.lines.append),
        "on_transport_event": seen.events.append,
    }

    async def scenario(rt: Any) -> None:
        agent = rt.agent_class(**kwargs)
        instrument(agent, tracer_provider=seen.provider)
        try:
            await rt.generate(agent, "hello")
        except Exception as exc:
            seen.error = exc
        finally:
            await rt.close(agent, archive=False)

    RUNTIME_FACADES[runtime](Recorder()).run(scenario)


def _answer(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nX-Echo: {TOKEN}\r\n\r\n"
    )
    return head.encode() + body


def _rest_json_error(conn: Conn) -> None:
    while conn.read_request()[0]:
        body = {
            "message": f"token {TOKEN} was refused",
            "detail": f"sent as {ECHOES[1]} and {ECHOES[2]}",
            "validations": [{"field": "token", "detail": f"{TOKEN} is invalid"}],
        }
        conn.send(_answer(f"401 Who is {TOKEN}", json.dumps(body).encode(), "application/json"))


def _rest_text_error(conn: Conn) -> None:
    while conn.read_request()[0]:
        conn.send(_answer("502 Bad Gateway", f"upstream said: {TOKEN}".encode(), "text/plain"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_json_error_body_echoing_the_token_reaches_no_one(runtime: str, seen: Seen) -> None:
    with HostileServer(_rest_json_error) as server:
        _client_call(runtime, server.url, seen)
    error = seen.error
    assert isinstance(error, CoderApiError), repr(error)
    assert error.status == 401
    assert error.server_message == "token <redacted> was refused"
    assert error.detail == "sent as <redacted> and <redacted>"
    assert error.validations == ({"field": "token", "detail": "<redacted> is invalid"},)
    seen.assert_clean()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_text_error_body_echoing_the_token_reaches_no_one(runtime: str, seen: Seen) -> None:
    with HostileServer(_rest_text_error) as server:
        _client_call(runtime, server.url, seen)
    assert isinstance(seen.error, CoderApiError), repr(seen.error)
    assert seen.error.status == 502
    seen.assert_clean()
    assert any("upstream said: <redacted>" in line for line in seen.lines)


def _chat_with_last_error(conn: Conn) -> None:
    chat = {
        "id": CHAT_ID,
        "organization_id": ORG,
        "owner_id": ORG,
        "title": f"notes on {TOKEN}",
        "status": "error",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "archived": False,
        "last_error": {"message": f"provider refused {TOKEN}", "retryable": False},
    }
    while conn.read_request()[0]:
        conn.send(_answer("200 OK", json.dumps(chat).encode(), "application/json"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_chat_s_last_error_loses_the_token_and_its_content_keeps_it(
    runtime: str, seen: Seen
) -> None:
    with HostileServer(_chat_with_last_error) as server:
        _client_call(runtime, server.url, seen)
    assert seen.error is None, repr(seen.error)
    chat = seen.value
    assert chat.last_error is not None
    assert chat.last_error.message == "provider refused <redacted>"
    # The title is the chat's content: it comes as the server sent it.
    assert chat.title == f"notes on {TOKEN}"
    assert not any("refused " + TOKEN in line for line in seen.lines)


def _error_event(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    error = {"message": f"provider refused {TOKEN}", "detail": TOKEN, "kind": "generic"}
    conn.send(events(own("error", error=error), own("status", status={"status": "error"})))
    conn.drain()


def _close_reason(conn: Conn, head: bytes) -> None:
    accept(conn, head)
    reason = f"bye {TOKEN}".encode()
    conn.send(frame((4000).to_bytes(2, "big") + reason, opcode=0x8))
    conn.drain()


def _rejected(conn: Conn, head: bytes) -> None:
    body = json.dumps({"message": f"no stream for {TOKEN}"}).encode()
    conn.send(_answer("403 Forbidden", body, "application/json"))
    conn.drain()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_stream_error_event_echoing_the_token_reaches_no_one(runtime: str, seen: Seen) -> None:
    with HostileServer(serve(_error_event)) as server:
        _generate(runtime, server.url, seen)
    error = seen.error
    assert isinstance(error, CoderChatError), repr(error)
    assert error.server_message == "provider refused <redacted>"
    assert error.detail == "<redacted>"
    seen.assert_clean()
    # The turn's span reports the error as the user sees it.
    assert any("provider refused <redacted>" in text for text in seen.span_texts())
    assert any("provider refused <redacted>" in line for line in seen.lines)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_close_reason_echoing_the_token_reaches_no_one(
    runtime: str, seen: Seen, caplog: pytest.LogCaptureFixture
) -> None:
    with HostileServer(serve(_close_reason)) as server:
        _generate(runtime, server.url, seen)
    # The server closes every connection at once: the turn runs out of its time redialing.
    assert isinstance(seen.error, CoderChatError) and seen.error.kind == "timeout"
    seen.assert_clean()
    reasons = [e.reason for e in seen.events if getattr(e, "type", "") == "ws:close" and e.code]
    assert reasons and all(reason == "bye <redacted>" for reason in reasons)
    assert any("bye <redacted>" in record.getMessage() for record in caplog.records)
    assert any('"reason":"bye <redacted>"' in line for line in seen.lines)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_rejected_upgrade_echoing_the_token_reaches_no_one(runtime: str, seen: Seen) -> None:
    with HostileServer(serve(_rejected)) as server:
        _generate(runtime, server.url, seen)
    error = seen.error
    assert isinstance(error, CoderApiError), repr(error)
    assert (error.status, error.server_message) == (403, "no stream for <redacted>")
    seen.assert_clean()
