"""The agent session (state machines D.1, H.1, H.2, H.6; wire 2.3): configuration checks,
the resume cursor, reset, the cleanup ledger, single flight, and the paused stream between
turns."""

from __future__ import annotations

import math
from typing import Any

import pytest

from coder_proto import CoderAgentError, DynamicTool
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import MAX_TIMER, SessionConfig, sanitize_duration
from tests.core_driver import Harness, action_required, message, status, weather_tool

BASE = "https://coder.test"


def config(**kwargs: Any) -> SessionConfig:
    kwargs.setdefault("base_url", BASE)
    return SessionConfig(**kwargs)


# -- configuration (D.1, H.2) ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "12"])
def test_last_seen_message_id_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(CoderAgentError, match="last_seen_message_id"):
        config(chat_id="c1", last_seen_message_id=bad)


def test_last_seen_message_id_needs_its_chat_id() -> None:
    with pytest.raises(CoderAgentError, match="needs the chat_id"):
        config(last_seen_message_id=5)


def test_a_valid_cursor_is_the_session_cursor_and_construction_does_no_io() -> None:
    session = Session(config(chat_id="c1", last_seen_message_id=42))
    assert session.chat_id == "c1" and session.last_known_chat_id == "c1"
    assert session.last_seen_message_id == 42
    assert session.actions() == [] and session.next_deadline() is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": ""},
        {"chat_id": "  "},
        {"chat_id": 7},
        {"token": 5},
        {"organization_id": 1},
        {"busy_behavior": "later"},
        {"tools": ["not a tool"]},
        {"mcp_server_ids": [""]},
        {"max_steps": 0},
        {"max_steps": True},
        {"max_retries": -1},
        {"request_timeout": math.nan},
        {"request_timeout": "5"},
    ],
)
def test_bad_settings_raise_a_typed_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(CoderAgentError):
        config(**kwargs)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 15.0),
        (math.nan, 15.0),
        (-1.0, 15.0),
        ("soon", 15.0),
        (True, 15.0),
        (math.inf, MAX_TIMER),
        (1e12, MAX_TIMER),
        (2.5, 2.5),
        (0, 0.0),
    ],
)
def test_settle_durations_are_sanitized(value: object, expected: float) -> None:
    """H.2: missing/NaN/negative -> default; +inf and huge values clamp to 2**31-1 ms."""
    assert sanitize_duration(value, 15.0) == expected
    assert config(settle_deadline=value).settle_deadline == expected


@pytest.mark.parametrize(("value", "expected"), [(None, None), (0, None), (-5, None), (30, 30.0)])
def test_request_timeout_unset_zero_or_negative_means_no_limit(
    value: float | None, expected: float | None
) -> None:
    assert config(request_timeout=value).timeout == expected


def test_the_token_never_appears_in_reprs() -> None:
    cfg = config(token="tok-very-secret", chat_id="c1")
    session = Session(cfg)
    assert "tok-very-secret" not in repr(cfg)
    assert "tok-very-secret" not in repr(session)


def test_dynamic_tool_names_are_the_configured_tools() -> None:
    tools = (weather_tool("a"), DynamicTool(name="b", input_schema={}))
    assert config(tools=tools).dynamic_tool_names == frozenset({"a", "b"})


def test_session_needs_a_config() -> None:
    with pytest.raises(CoderAgentError):
        Session({"base_url": BASE})  # type: ignore[arg-type]


# -- cursor, reset, ledger (D.1, H.1) ---------------------------------------------------------------


def test_the_cursor_only_moves_forward_until_a_reset() -> None:
    """J.19: L never decreases except through a session reset (to 0)."""
    session = Session(config(chat_id="c1", last_seen_message_id=10))
    session.advance_cursor(7)
    assert session.last_seen_message_id == 10
    session.advance_cursor(12)
    assert session.last_seen_message_id == 12
    submitted = {"t1"}
    session.submitted_tool_call_ids = submitted
    session.add_stranded("old")
    assert session.reset_session(0.0) == []
    assert session.chat_id is None and session.last_seen_message_id is None
    # Cleared in place: a running segment's translator reads the same set (A.7).
    assert session.submitted_tool_call_ids is submitted and submitted == set()
    # A reset keeps the cleanup targets and adds nothing to the ledger.
    assert session.last_known_chat_id == "c1" and session.stranded_chat_ids == ("old",)


def test_note_chat_cleaned_up_is_match_guarded() -> None:
    session = Session(config(chat_id="c1"))
    session.add_stranded("s1")
    session.add_stranded("s2")
    session.add_stranded("s1")
    assert session.stranded_chat_ids == ("s1", "s2")
    session.note_chat_cleaned_up("s1")
    assert session.stranded_chat_ids == ("s2",) and session.last_known_chat_id == "c1"
    session.note_chat_cleaned_up("c1")
    assert session.last_known_chat_id is None and session.chat_id == "c1"


# -- single flight (G.2) -----------------------------------------------------------------------------


def test_a_second_turn_while_one_is_in_flight_is_refused() -> None:
    h = Harness()
    turn = h.generate("first")
    with pytest.raises(CoderAgentError, match="single-flight"):
        h.session.generate("second", now=h.now)
    with pytest.raises(CoderAgentError, match="single-flight"):
        h.session.stream("second", now=h.now)
    with pytest.raises(CoderAgentError, match="single-flight"):
        h.session.segment("second", now=h.now)
    h.send(status("running"), message(2, "ok"), status("waiting"))
    assert turn.done and turn.result().text == "ok"
    assert h.session.in_flight is None
    again = h.generate("second")
    assert not again.done


def test_a_failed_turn_releases_the_single_flight_guard() -> None:
    h = Harness()
    turn = h.generate("")
    assert turn.done and turn.error is not None
    assert h.session.in_flight is None


def test_an_unsupported_prompt_raises_before_anything_starts() -> None:
    h = Harness()
    with pytest.raises(CoderAgentError):
        h.session.generate(12, now=h.now)
    assert h.session.in_flight is None


# -- the paused stream between turns (H.6) ----------------------------------------------------------


def paused_session() -> Harness:
    h = Harness(tools=(weather_tool(),))
    turn = h.segment("weather?")
    h.send(
        status("running"),
        message(
            2, [{"type": "tool-call", "tool_call_id": "c1", "tool_name": "get_weather", "args": {}}]
        ),
        status("requires_action"),
        action_required(("c1", "get_weather", "{}")),
    )
    assert turn.done and turn.result().finish_reason == "tool-calls"
    return h


def test_between_turns_the_session_keeps_reading_its_paused_stream() -> None:
    h = paused_session()
    stream = h.session.retained_stream
    assert stream is not None and stream.reusable
    h.send(status("running"))  # routed to the session: no turn is running
    assert [e.status for e in stream.events] == ["running"]


def test_a_drop_while_paused_is_redialed_in_the_background() -> None:
    """Wire 5: a drop while the client runs a tool is redialed in the background."""
    h = paused_session()
    h.socket.drop(1006)
    h.driver.settle()
    assert len(h.driver.sockets) == 1
    assert h.session.next_deadline() is not None
    h.advance(1.0)
    assert len(h.driver.sockets) == 2  # redialed with the original cursor
    assert h.driver.sockets[1].request is not None


def test_reset_closes_the_retained_stream_with_a_close_frame() -> None:
    h = paused_session()
    h.driver.reset()
    assert h.socket.closed_by_client and h.session.retained_stream is None
    assert h.socket.client_close_codes == [1000]


def test_a_stream_failed_between_turns_connection_is_routed_and_closed() -> None:
    h = paused_session()
    h.socket.fail("reset by peer")
    h.driver.settle()
    h.advance(1.0)
    assert len(h.driver.sockets) == 2
    h.session.tick(h.now)
    assert h.session.close_paused_stream(h.now)
    assert h.session.close_paused_stream(h.now) == []


def test_the_default_reader_dials_a_real_websocket() -> None:
    from tests.core_driver import Driver, Respond, chat_stub

    session = Session(config(token="tok", organization_id="org-1"))
    driver = Driver(session, http=lambda request: Respond(201, chat_stub()))
    turn = driver.start(session.segment("hi", now=driver.now))
    (sock,) = driver.sockets
    assert sock.request is not None and sock.request.target == "/api/v2/chats/chat-1/stream"
    assert not turn.done


def test_connection_inputs_for_unknown_connections_are_ignored() -> None:
    session = Session(config())
    session.connection_made(99, 0.0)
    session.connection_failed(99, "x", 0.0)
    session.data_received(99, b"x", 0.0)
    session.connection_lost(99, 0.0)
    session.tick(1.0)
    assert session.actions() == []


def test_inputs_reach_the_stream_that_owns_the_connection() -> None:
    """Two readers of one session (a paused one still closing while a fresh one dials) get
    their own inputs (H.6, wire 11 ``reader``)."""
    from tests.core_driver import ScriptedReader

    readers: list[ScriptedReader] = []

    class Recording(ScriptedReader):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(
                chat_id=kwargs["chat_id"], reader_id=kwargs["reader_id"], after_id=None
            )
            self.made: list[int] = []
            readers.append(self)

        def start(self, now: float) -> None:
            self.opened = True

        def actions(self) -> list[Any]:
            from coder_proto._actions import OpenConnection

            if getattr(self, "opened", False):
                self.opened = False
                return [OpenConnection(conn_id=1, host="h", port=1, tls=False)]
            return []

        def connection_made(self, conn_id: int, now: float) -> None:
            self.made.append(conn_id)

    session = Session(config(), reader_factory=Recording)  # type: ignore[arg-type]
    session.open_stream(chat_id="c1", prefix="/api/v2/chats", after_id=None, now=0.0)
    session.open_stream(chat_id="c1", prefix="/api/v2/chats", after_id=None, now=0.0)
    first, second = (a.conn_id for a in session.actions())
    session.connection_made(second, 0.0)
    session.connection_made(first, 0.0)
    assert [r.made for r in readers] == [[1], [1]]
    assert first != second
    # Where a driver that holds the route sends each socket's bytes: the same streams.
    streams = list(session._streams)
    assert session.route(first) == (streams[0], readers[0], 1)
    assert session.route(second) == (streams[1], readers[1], 1)
    assert session.route(99) is None


def test_an_observer_set_on_the_session_reaches_the_readers_of_its_open_streams() -> None:
    readers: list[Any] = []

    class Observed:
        def __init__(self, **_: Any) -> None:
            self.observer: Any = None
            readers.append(self)

        def start(self, now: float) -> None:
            pass

    class Heard:
        def upgrade_sent(self, conn_id: int, target: str, now: float) -> None: ...

        def ws_events(self, conn_id: int, events: Any, now: float) -> None: ...

    session = Session(config(), reader_factory=Observed)  # type: ignore[arg-type]
    first = session.open_stream(chat_id="c1", prefix="/api/v2/chats", after_id=None, now=0.0)
    assert session.ws_observer is None and readers[0].observer is None
    heard = Heard()
    session.ws_observer = heard
    second = session.open_stream(chat_id="c1", prefix="/api/v2/chats", after_id=None, now=0.0)
    assert session.ws_observer is heard
    assert [r.observer for r in readers] == [first, second]
    session.ws_observer = None
    assert [r.observer for r in readers] == [None, None]
