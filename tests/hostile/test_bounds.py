"""Bounds a hostile server cannot lift, each checked on every runtime (D29-D32).

The REST and stream case tables (``test_rest.py``, ``test_stream.py``) run one call per case;
these tests cover what they do not: a turn's ``request_timeout`` and the caller's own
deadline are totals too, the size limit on the calls of a turn, the default bounds, what a
transcript keeps of a rejection, a call to a tool the agent does not know, a wrong upgrade
answer, and the fake server's own limits as each client meets them. Times are checked only
against generous outer bounds that catch a hang.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import trio

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderApiError, CoderProtocolError
from coder_proto._rest.settings import HTTP_TIMEOUT, MAX_RESPONSE_BYTES
from coder_proto._stream.websocket import MAX_REJECTION_BODY
from coder_proto.transcript import TranscriptRecorder, WsReject, parse_transcript
from tests.runtimes import RUNTIMES as RUNTIME_FACADES
from tests.runtimes import Recorder

from . import cases, ws_cases
from .runtimes import ALLOWED, TOKEN, call, dispose, generate, open_sockets
from .server import Conn, HostileServer, response
from .test_rest import _chain
from .ws_cases import CHAT_ID, ORG, accept, events, own, serve

BOUND = cases.BOUND
MARGIN = cases.MARGIN
SLOW: dict[str, Callable[[Conn], None]] = {
    "trickled-head": cases._trickled_head,
    "trickled-body": cases._trickled_body,
    "continue-flood": cases._continue_flood,
}


def _no_token(error: BaseException) -> None:
    for item in _chain(error):
        assert TOKEN not in str(item) and TOKEN not in repr(item)


# -- D29: every deadline is a total --------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", sorted(SLOW))
def test_a_turns_request_timeout_bounds_a_slowly_answered_call(runtime: str, shape: str) -> None:
    """The chat's creation is answered a byte at a time (or with endless ``100 Continue``):
    the turn still ends at its ``request_timeout``, whatever ``http_timeout`` allows."""
    sockets = open_sockets()
    with HostileServer(SLOW[shape]) as server:
        out = generate(
            runtime, server.url, "hi", agent={"organization_id": ORG, "request_timeout": BOUND}
        )
    assert isinstance(out.error, ALLOWED), repr(out.error)
    _no_token(out.error)
    assert out.elapsed < BOUND + MARGIN, f"the turn took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left
    assert open_sockets() <= sockets


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", sorted(SLOW))
def test_the_callers_own_deadline_bounds_a_slowly_answered_call(runtime: str, shape: str) -> None:
    """``generate(timeout=)`` on the blocking adapter, ``asyncio.timeout`` and
    ``trio.fail_after`` on the event loops: the runtime's own deadline error, on time."""
    with HostileServer(SLOW[shape]) as server:
        out = generate(runtime, server.url, "hi", agent={"organization_id": ORG}, timeout=BOUND)
    assert isinstance(out.error, TimeoutError | trio.TooSlowError), repr(out.error)
    assert out.elapsed < BOUND + MARGIN, f"the turn took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", sorted(SLOW))
def test_closing_an_agent_ends_by_its_settle_deadline_against_a_slow_answerer(
    runtime: str, shape: str
) -> None:
    """An agent resumed on a chat is closed while the server answers its interrupt and its
    archive a byte at a time (or with endless ``100 Continue``): the close, which never
    raises, returns by ``settle_deadline`` (plus a margin), every request of it included."""
    settle = 2.0
    with HostileServer(SLOW[shape]) as server:
        out = dispose(
            runtime,
            server.url,
            agent={"organization_id": ORG, "chat_id": CHAT_ID, "settle_deadline": settle},
        )
        attempts = server.connections
    assert out.error is None, repr(out.error)
    assert out.closing < settle + 2.5, f"closing took {out.closing:.1f} s"
    assert attempts >= 1
    assert not out.threads_left, out.threads_left


def test_the_default_bounds_are_applied_by_every_client(runtime: str) -> None:
    """With no settings: 60 s per REST call (D29) and 32 MiB per body (D30); both can be
    changed, and ``http_timeout=None`` lifts the time bound."""
    rt = RUNTIME_FACADES[runtime](Recorder())
    cls = rt.client_class
    defaults = cls("http://127.0.0.1:9", TOKEN)
    assert defaults.driver.http_timeout == HTTP_TIMEOUT == 60.0
    assert defaults.driver.max_response_bytes == MAX_RESPONSE_BYTES == 32 * 1024 * 1024
    custom = cls("http://127.0.0.1:9", TOKEN, http_timeout=None, max_response_bytes=1024)
    assert custom.driver.http_timeout is None
    assert custom.driver.max_response_bytes == 1024

    async def close_both(rt: Any) -> None:
        for client in (defaults, custom):
            await rt.close_client(client)

    rt.run(close_both)


@pytest.mark.timeout(90)
def test_an_upgrade_never_answered_ends_the_turn_without_any_deadline_set(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``request_timeout``, no caller deadline: the dial bound (30 s, here shortened)
    still fails each dial, and the turn ends with a library error instead of hanging."""
    monkeypatch.setattr("coder_proto._stream.reader.DIAL_TIMEOUT", 0.3)

    def never(conn: Conn, head: bytes) -> None:
        conn.pause(cases.GIVE_UP * 4)

    with HostileServer(serve(never)) as server:
        out = generate(runtime, server.url, "hi", agent={"organization_id": ORG})
    assert isinstance(out.error, ALLOWED), repr(out.error)
    _no_token(out.error)
    assert server.upgrades >= 1
    assert out.elapsed < 60, f"the turn took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left


# -- D30: bounded memory ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_an_endless_answer_to_a_turns_call_fails_at_the_size_limit(runtime: str) -> None:
    """The chat's creation is answered with an endless chunked body: the turn fails with
    ``CoderProtocolError`` once the body passes ``max_response_bytes`` (32 MiB by default),
    long before its ``request_timeout``."""
    with HostileServer(cases._endless_chunked) as server:
        out = generate(
            runtime, server.url, "hi", agent={"organization_id": ORG, "request_timeout": 30.0}
        )
    assert any(isinstance(e, CoderProtocolError) for e in _chain(out.error)), repr(out.error)
    assert "max_response_bytes" in str(out.error)
    assert out.elapsed < 30.0
    assert not out.threads_left, out.threads_left


@pytest.mark.timeout(60)
def test_listing_models_stops_reading_at_the_size_limit(runtime: str) -> None:
    with HostileServer(cases._endless_chunked) as server:
        out = call(
            runtime,
            server.url,
            "list_model_configs",
            ORG,
            client={"http_timeout": BOUND, "max_response_bytes": cases.LIMIT},
        )
    assert isinstance(out.error, CoderProtocolError), repr(out.error)
    assert out.elapsed < BOUND + MARGIN
    assert not out.threads_left, out.threads_left


_HUGE_MESSAGE = response(500, json.dumps({"message": "m" * (4 * 1024 * 1024)}).encode())


@pytest.mark.timeout(60)
def test_an_error_keeps_no_more_than_8_kib_of_a_huge_server_message(runtime: str) -> None:
    """A 4 MiB error message, within the body limit: the ``CoderApiError`` holds at most
    8 KiB of it, with a note of its real size (D30)."""

    def handler(conn: Conn) -> None:
        if conn.read_request()[0] and conn.send_patiently(_HUGE_MESSAGE):
            conn.drain()

    with HostileServer(handler) as server:
        out = call(runtime, server.url, "get_chat", "c1", client={"http_timeout": 20.0})
    assert isinstance(out.error, CoderApiError), repr(out.error)
    assert out.error.status == 500
    for error in _chain(out.error):
        assert len(str(error)) <= 8192 + 512 and len(repr(error)) <= 2 * (8192 + 512)
    assert len(out.error.server_message or "") <= 8192
    assert not out.threads_left, out.threads_left


@pytest.mark.timeout(60)
def test_a_transcript_keeps_no_more_of_a_rejection_than_the_client(runtime: str) -> None:
    """The upgrade is refused with an 8 MiB body: the recorded rejection holds at most the
    64 KiB the client keeps, however many times the turn dials."""
    lines: list[str] = []
    with HostileServer(serve(ws_cases._reject_huge)) as server:
        out = generate(
            runtime,
            server.url,
            "hi",
            agent={
                "organization_id": ORG,
                "request_timeout": 2.0,
                "recorder": TranscriptRecorder(lines.append),
            },
        )
    assert isinstance(out.error, ALLOWED), repr(out.error)
    rejects = [r for r in parse_transcript("".join(lines)).records if isinstance(r, WsReject)]
    assert rejects
    assert all(r.body is None or len(r.body) <= MAX_REJECTION_BODY for r in rejects)
    assert len("".join(lines)) < len(rejects) * 2 * MAX_REJECTION_BODY + 256 * 1024


@pytest.mark.timeout(60)
def test_closing_after_a_peer_that_reads_nothing_is_bounded_and_leaves_no_socket(
    runtime: str,
) -> None:
    """Pongs pile up for a peer that floods pings and reads nothing: the connection is
    dropped past 1 MiB unsent, and closing the agent waits at most about 1 s per socket for
    the peer before aborting (D30); no socket is left open."""
    sockets = open_sockets()
    with HostileServer(serve(ws_cases._ping_flood_never_reads)) as server:
        out = generate(
            runtime, server.url, "hi", agent={"organization_id": ORG, "request_timeout": 5.0}
        )
    assert open_sockets() <= sockets, "a socket outlived close"
    assert isinstance(out.error, ALLOWED), repr(out.error)
    assert server.upgrades >= 2, "the client kept a connection whose peer reads nothing"
    assert out.closing < 5.0, f"closing took {out.closing:.1f} s"
    assert not out.threads_left, out.threads_left


# -- wire answers reach the user right -----------------------------------------------------------


def _forgotten_tool(submitted: list[Any]) -> Callable[[Conn], None]:
    """A turn whose server asks for a client tool the agent never registered, waits for the
    results, then answers."""

    def stream(conn: Conn, head: bytes) -> None:
        accept(conn, head)
        call = {"type": "tool-call", "tool_call_id": "c9", "tool_name": "forgotten_tool"}
        call["args"] = {"x": 1}
        conn.send(
            events(
                own("status", status={"status": "running"}),
                own(
                    "message",
                    message={
                        "id": 3,
                        "chat_id": CHAT_ID,
                        "role": "assistant",
                        "created_at": "2026-01-01T00:00:01Z",
                        "content": [call],
                    },
                ),
                own("status", status={"status": "requires_action"}),
                own(
                    "action_required",
                    action_required={
                        "tool_calls": [
                            {"tool_call_id": "c9", "tool_name": "forgotten_tool", "args": '{"x":1}'}
                        ]
                    },
                ),
            )
        )
        while not submitted and conn.pause(0.02):
            pass
        conn.send(
            events(own("status", status={"status": "running"}))
            + ws_cases.answer_text("done after the tool", message_id=5)
        )
        conn.drain()

    inner = serve(stream)

    def handler(conn: Conn) -> None:
        # The results may come on any connection, kept alive or new: take them from the
        # bytes the turn's handler reads.
        reader = conn.read_request

        def read_request() -> tuple[bytes, bytes]:
            head, body = reader()
            if b"/tool-results" in head.split(b"\r\n", 1)[0]:
                submitted.append(json.loads(body))
            return head, body

        conn.read_request = read_request  # type: ignore[method-assign]
        inner(conn)

    return handler


def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"sunny in {city}"


@pytest.mark.timeout(60)
def test_a_call_to_a_tool_the_agent_does_not_know_is_delivered_once(runtime: str) -> None:
    submitted: list[Any] = []
    with HostileServer(_forgotten_tool(submitted)) as server:
        out = generate(
            runtime,
            server.url,
            "hi",
            agent={"organization_id": ORG, "request_timeout": 10.0, "tools": [get_weather]},
        )
    assert out.error is None, repr(out.error)
    assert out.value.text == "done after the tool"
    calls = [c.tool_call_id for step in out.value.steps for c in step.tool_calls]
    assert calls == ["c9"]
    assert [[r["tool_call_id"] for r in s["results"]] for s in submitted] == [["c9"]]


@pytest.mark.timeout(60)
def test_a_wrong_upgrade_answer_is_reported_as_such(runtime: str) -> None:
    with HostileServer(serve(ws_cases._bad_accept)) as server:
        out = generate(
            runtime, server.url, "hi", agent={"organization_id": ORG, "request_timeout": 2.0}
        )
    assert isinstance(out.error, ALLOWED), repr(out.error)
    text = " ".join(str(e) for e in _chain(out.error))
    assert "Sec-WebSocket-Accept" in text, text
    assert "parse" not in text.lower()


@pytest.mark.timeout(60)
def test_an_answer_nested_100000_deep_is_reported_as_such(runtime: str) -> None:
    """Not as "expected a JSON object, got NoneType": the message names the nesting and its
    limit."""
    deep = cases._answer(response(200, b"[" * 100_000 + b"]" * 100_000))
    with HostileServer(deep) as server:
        out = call(runtime, server.url, "get_chat", "c1")
    assert isinstance(out.error, CoderProtocolError), repr(out.error)
    assert "the body is JSON nested too deeply" in str(out.error)
    assert "recursion limit" in str(out.error) and "NoneType" not in str(out.error)


# -- the fake server's own limits ----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_the_fake_server_refuses_an_oversized_request_at_once(runtime: str) -> None:
    """A chat created with a 1 MiB prompt: the fake answers 413 from the ``Content-Length``
    (before reading the body) and every client reports it as the server's refusal."""
    with FakeCoderServer(chunk_delay=0) as server:
        out = call(
            runtime,
            server.url,
            "create_chat",
            # The fake serves the chat routes under /api/v2 only, as the newest server (D36).
            client={"prefix": "/api/v2/chats"},
            options={"organization_id": server.organization_id, "content": "x" * (1024 * 1024)},
            token=server.token,
        )
    assert isinstance(out.error, CoderApiError), repr(out.error)
    assert out.error.status == 413
    assert not out.threads_left, out.threads_left
