"""The ``/watch`` machine (wire 6, 1.5; D12, D24): preflight, frames, the backoff that doubles
after every ending and resets on delivery, terminal 4xx rejections, unparseable frames that
only redial, and prompt teardown.

``WatchDriver`` is the reference driver of ``tests.core_driver`` with connection inputs routed
to the machine it runs (the watch owns its socket; there is no session), against in-memory
wsproto server ends and a fake monotonic clock.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError, CoderNetworkError, WatchBackoff
from coder_proto._actions import CloseConnection, OpenConnection
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._stream.watch import WatchMachine
from tests.core_driver import Driver, Hang, NetworkError, Respond, chat_stub

TOKEN = "watch-secret-token"
V2 = "/api/v2/chats"
LEGACY = "/api/experimental/chats"


def event(kind: str = "status_change", chat_id: str = "c1", status: str = "waiting") -> dict:
    return {"kind": kind, "chat": chat_stub(chat_id, status=status)}


class World:
    """A watch machine, its driver and a scripted REST world."""

    def __init__(
        self,
        *,
        prefix: str | None = V2,
        rest: dict[str, Any] | None = None,
        base_url: str = "http://coder.test",
        backoff: WatchBackoff | None = None,
        auto_accept: bool = True,
    ) -> None:
        self.rest = rest or {}
        self.selector = PrefixSelector(prefix)
        session = Session(SessionConfig(base_url=base_url))
        self.driver = Driver(session, http=self.http, auto_accept=auto_accept)
        self.watch = WatchMachine(
            self.selector, base_url=base_url, token=TOKEN, now=self.driver.now, backoff=backoff
        )
        self.driver.start(self.watch)

    def http(self, request: Any) -> Any:
        key = f"{request.method} {request.path}"
        reply = self.rest.get(key, Respond(200, []))
        if isinstance(reply, list):
            reply = reply.pop(0) if len(reply) > 1 else reply[0]
        return reply

    @property
    def socket(self) -> Any:
        return self.driver.sockets[-1]

    @property
    def dials(self) -> int:
        return len(self.driver.sockets)

    def send(self, *events: dict[str, Any], raw: str | None = None) -> None:
        self.socket.send_text(raw if raw is not None else json.dumps(list(events)))
        self.driver.settle()

    def send_one(self, payload: dict[str, Any]) -> None:
        self.socket.send_text(json.dumps(payload))
        self.driver.settle()

    def advance(self, seconds: float) -> None:
        self.driver.advance(seconds)


# -- preflight and dial (wire 1.5, 6) -----------------------------------------------------------


def test_unresolved_prefix_preflights_with_op_watch_chats_then_dials_v2_watch() -> None:
    w = World(prefix=None)
    requests = w.driver.requests()
    assert [(r.op, r.method, r.path) for r in requests] == [("watch_chats", "GET", V2)]
    assert w.selector.prefix == V2
    assert w.dials == 1
    assert w.socket.request.target == f"{V2}/watch"
    assert w.socket.header("Coder-Session-Token") == TOKEN


def test_preflight_on_a_legacy_server_dials_the_experimental_watch_route() -> None:
    w = World(prefix=None, rest={f"GET {V2}": Respond(404)})
    assert [r.path for r in w.driver.requests()] == [V2, LEGACY]
    assert w.selector.prefix == LEGACY
    assert w.socket.request.target == f"{LEGACY}/watch"


def test_a_failed_preflight_propagates_and_never_dials_wire_1_5() -> None:
    w = World(prefix=None, rest={f"GET {V2}": Respond(401, {"message": "Unauthorized"})})
    assert w.watch.done and not w.watch.cancelled
    with pytest.raises(CoderApiError) as info:
        w.watch.result()
    assert info.value.status == 401 and w.dials == 0


def test_a_preflight_network_failure_propagates() -> None:
    w = World(prefix=None, rest={f"GET {V2}": NetworkError("refused")})
    with pytest.raises(CoderNetworkError):
        w.watch.result()
    assert w.selector.prefix is None and w.dials == 0


def test_a_locked_prefix_dials_at_once_without_preflight() -> None:
    w = World(prefix=LEGACY)
    assert w.driver.requests() == []
    assert w.socket.request.target == f"{LEGACY}/watch"


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://coder.test:8443/", ("coder.test", 8443, True, "coder.test")),
        ("https://coder.test", ("coder.test", 443, True, "coder.test")),
        ("http://127.0.0.1:3000", ("127.0.0.1", 3000, False, None)),
    ],
)
def test_the_dial_follows_the_base_url_scheme_wire_1_1(base_url: str, expected: tuple) -> None:
    watch = WatchMachine(PrefixSelector(V2), base_url=base_url, token=TOKEN, now=0.0)
    (action,) = watch.actions()
    assert isinstance(action, OpenConnection)
    assert (action.host, action.port, action.tls, action.server_hostname) == expected


def test_a_bad_base_url_scheme_is_a_terminal_configuration_error_d12() -> None:
    watch = WatchMachine(PrefixSelector(V2), base_url="ftp://coder.test", token=TOKEN, now=0.0)
    assert watch.done
    with pytest.raises(CoderAgentError, match="scheme"):
        watch.result()


# -- events (wire 6) ---------------------------------------------------------------------------


def test_single_object_and_array_frames_are_delivered_in_order() -> None:
    w = World()
    w.send_one(event("created", "c1", "running"))
    w.send(event("status_change", "c1", "waiting"), event("title_change", "c2"))
    taken = w.watch.take()
    assert [(e.kind, e.chat.id) for e in taken] == [
        ("created", "c1"),
        ("status_change", "c1"),
        ("title_change", "c2"),
    ]
    assert taken[0].chat.status == "running"
    assert w.watch.take() == []


def test_a_chat_s_last_error_echoing_the_token_is_delivered_redacted() -> None:
    w = World()
    chat = {
        **chat_stub("c1", status="error"),
        "title": f"about {TOKEN}",
        "last_error": {"message": f"refused {TOKEN}", "detail": TOKEN},
    }
    w.send_one({"kind": "status_change", "chat": chat})
    (ev,) = w.watch.take()
    assert ev.chat.last_error is not None
    assert (ev.chat.last_error.message, ev.chat.last_error.detail) == (
        "refused <redacted>",
        "<redacted>",
    )
    assert ev.chat.title == f"about {TOKEN}"  # the chat's content, as the server sent it


def test_action_required_carries_its_tool_calls() -> None:
    w = World()
    w.send_one(
        {
            "kind": "action_required",
            "chat": chat_stub("c1", status="requires_action"),
            "tool_calls": [{"tool_call_id": "t1", "tool_name": "get_weather", "args": '{"a":1}'}],
        }
    )
    (ev,) = w.watch.take()
    assert ev.tool_calls[0].tool_call_id == "t1" and ev.tool_calls[0].args == '{"a":1}'


def test_unknown_kinds_are_kept_and_non_object_array_entries_skipped() -> None:
    w = World()
    w.send(event("chat_summary_change"), raw=json.dumps([event("chat_summary_change"), 3, "x"]))
    assert [e.kind for e in w.watch.take()] == ["chat_summary_change"]


@pytest.mark.parametrize("raw", ["{not json", '{"kind": "created"}', "[1, {}]"])
def test_an_unparseable_frame_drops_the_connection_and_redials_wire_6(raw: str) -> None:
    w = World()
    w.send_one(event("created"))
    w.send(raw=raw)
    first = w.driver.sockets[0]
    assert first.closed_by_client and first.client_close_codes == [1000]
    assert not w.watch.done
    assert [e.kind for e in w.watch.take()] == ["created"]
    w.advance(1.0)
    assert w.dials == 2


def test_a_json_scalar_frame_is_ignored_and_the_connection_stays() -> None:
    w = World()
    w.send(raw="42")
    assert w.watch.take() == [] and w.dials == 1 and w.socket.open


def test_pings_are_answered() -> None:
    from wsproto.events import Ping

    w = World()
    sock = w.socket
    sock.send_text(json.dumps(event()))  # accept and deliver one frame
    w.driver.settle()
    written: list[bytes] = []
    original = sock.from_client

    def record(data: bytes) -> None:
        written.append(data)
        original(data)

    sock.from_client = record
    w.driver.deliver_connection(sock.conn_id, "data", sock.ws.send(Ping(payload=b"hb")))
    w.driver.settle()
    # One masked pong frame (FIN + opcode 0xA) went back; the connection stays open.
    assert len(written) == 1 and written[0][0] == 0x8A
    assert sock.open and not w.watch.done


# -- backoff (wire 6) --------------------------------------------------------------------------


def test_backoff_doubles_after_every_ending_up_to_the_cap_and_never_gives_up() -> None:
    w = World()
    sleeps = []
    for _ in range(8):
        dials = w.dials
        w.socket.drop()
        w.driver.settle()
        backoff = w.watch.backoff
        sleeps.append(backoff)
        w.advance(backoff - 0.001)
        assert w.dials == dials  # still sleeping
        w.advance(0.001)
        assert w.dials == dials + 1
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert not w.watch.done


def test_even_a_connection_that_delivered_events_sleeps_before_the_redial() -> None:
    w = World()
    w.send_one(event())
    w.socket.close(1000)
    w.driver.settle()
    w.advance(0.5)
    assert w.dials == 1
    w.advance(0.5)
    assert w.dials == 2


def test_delivering_events_to_the_consumer_resets_the_backoff_wire_6() -> None:
    w = World()
    for _ in range(3):
        w.socket.drop()
        w.driver.settle()
        w.advance(w.watch.backoff)
    assert w.watch.backoff == 8.0
    w.send_one(event())
    assert w.watch.backoff == 8.0  # received, not yet delivered
    assert len(w.watch.take()) == 1
    assert w.watch.backoff == 1.0
    w.socket.drop()
    w.driver.settle()
    w.advance(1.0)
    assert w.dials == 5


def test_a_custom_backoff_policy_is_used() -> None:
    w = World(backoff=WatchBackoff(initial=0.1, multiplier=3.0, cap=0.5))
    seen = []
    for _ in range(4):
        w.socket.drop()
        w.driver.settle()
        seen.append(w.watch.backoff)
        w.advance(w.watch.backoff)
    assert seen == [0.1, pytest.approx(0.3), 0.5, 0.5]


@pytest.mark.parametrize("ending", ["drop", "close", "fail", "reject-500", "reject-503"])
def test_transient_endings_redial(ending: str) -> None:
    w = World(auto_accept=not ending.startswith("reject"))
    sock = w.socket
    if ending == "drop":
        sock.drop()
    elif ending == "close":
        sock.close(1001, "going away")
    elif ending == "fail":
        sock.fail("connection reset")
    else:
        sock.reject(int(ending.split("-")[1]), b'{"message":"down"}')
    w.driver.settle()
    assert not w.watch.done
    w.advance(1.0)
    assert w.dials == 2


# -- terminal rejections (wire 6) ----------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 425, 429, 499])
def test_any_4xx_upgrade_rejection_is_terminal_with_the_watch_path(status: int) -> None:
    w = World(prefix=LEGACY, auto_accept=False)
    w.socket.reject(status, json.dumps({"message": "nope", "detail": "d"}).encode())
    w.driver.settle()
    assert w.watch.done and not w.watch.cancelled
    with pytest.raises(CoderApiError) as info:
        w.watch.result()
    error = info.value
    assert (error.status, error.method, error.path) == (status, "GET", f"{LEGACY}/watch")
    assert error.server_message == "nope" and error.detail == "d"
    w.advance(60.0)
    assert w.dials == 1


# -- teardown ------------------------------------------------------------------------------------


def test_cancel_while_open_closes_with_1000_at_once() -> None:
    w = World()
    w.send_one(event())
    w.driver.cancel()  # the runtime cancels the watch, through the connection
    assert w.watch.done and w.watch.cancelled
    assert w.socket.closed_by_client and w.socket.client_close_codes == [1000]
    w.advance(60.0)
    assert w.dials == 1


def test_cancel_before_the_upgrade_closes_the_connection() -> None:
    w = World()
    w.driver.auto_accept = False
    w.socket.drop()
    w.driver.settle()
    w.advance(1.0)
    assert not w.socket.accepted
    w.driver.cancel()  # the runtime cancels the watch, through the connection
    assert w.socket.closed_by_client and w.socket.client_close_codes == []


def test_cancel_during_the_backoff_sleep_never_dials_again() -> None:
    w = World()
    w.socket.drop()
    w.driver.settle()
    w.driver.cancel()  # the runtime cancels the watch, through the connection
    w.advance(60.0)
    assert w.watch.done and w.watch.cancelled and w.dials == 1
    assert w.watch.next_deadline() is None


def test_cancel_during_the_preflight_abandons_it_quietly_wire_1_5() -> None:
    w = World(prefix=None, rest={f"GET {V2}": Hang()})
    w.driver.cancel()  # the runtime cancels the watch, through the connection
    assert w.watch.done and w.watch.cancelled and w.dials == 0
    assert w.driver.sent[0].cancelled
    assert w.selector.prefix is None


def test_inputs_of_an_earlier_connection_are_ignored() -> None:
    w = World()
    old = w.socket
    old.drop()
    w.driver.settle()
    w.advance(1.0)
    assert w.dials == 2
    w.watch.data_received(old.conn_id, b"\x81\x02{}", w.driver.now)
    w.watch.connection_lost(old.conn_id, w.driver.now)
    w.driver.settle()
    assert w.socket.open and not w.watch.done


def test_every_opened_connection_gets_exactly_one_close_connection() -> None:
    selector = PrefixSelector(V2)
    watch = WatchMachine(selector, base_url="http://coder.test", token=TOKEN, now=0.0)
    opened: list[int] = []
    closed: list[int] = []
    now = 0.0
    for _ in range(3):
        for action in watch.actions():
            if isinstance(action, OpenConnection):
                opened.append(action.conn_id)
            elif isinstance(action, CloseConnection):
                closed.append(action.conn_id)
        watch.connection_failed(watch.attempt, "refused", now)
        for action in watch.actions():
            if isinstance(action, CloseConnection):
                closed.append(action.conn_id)
        deadline = watch.next_deadline()
        assert deadline is not None
        now = deadline
        watch.tick(now)
    assert opened == [1, 2, 3] and closed == [1, 2, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["drop", "deliver", "take", "garbage"]), max_size=25))
def test_backoff_stays_within_the_schedule_and_the_watch_never_ends(steps: list[str]) -> None:
    w = World()
    for step in steps:
        if step == "drop":
            w.socket.drop()
            w.driver.settle()
            assert w.watch.backoff in (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
            w.advance(w.watch.backoff)
        elif step == "deliver":
            w.send_one(event())
        elif step == "take":
            if w.watch.take():
                assert w.watch.backoff == 1.0
        else:
            w.send(raw="{garbage")
            w.advance(w.watch.backoff)
        assert not w.watch.done
        assert w.socket.open


def test_a_repeated_connection_made_sends_the_upgrade_once() -> None:
    watch = WatchMachine(PrefixSelector(V2), base_url="http://coder.test", token=TOKEN, now=0.0)
    watch.actions()
    watch.connection_made(1, 0.0)
    watch.connection_made(1, 0.0)
    sent = watch.actions()
    assert len(sent) == 1 and sent[0].data.startswith(b"GET /api/v2/chats/watch HTTP/1.1")
    assert "attempt=1" in repr(watch) and TOKEN not in repr(watch)


# -- the open accessor -------------------------------------------------------------------------


def test_open_is_true_only_while_an_accepted_connection_lasts_wire_6() -> None:
    """``open``: the upgrade was accepted and the connection has not ended. Not during the
    preflight, the handshake, a backoff sleep or after the consumer stopped."""
    w = World(prefix=None, rest={f"GET {V2}": Hang()})
    assert not w.watch.open  # the preflight is in flight
    w = World(auto_accept=False)
    assert w.dials == 1 and w.socket.request is not None
    assert not w.watch.open  # upgrade sent, not answered
    w.socket.accept()
    w.driver.settle()
    assert w.watch.open
    w.socket.drop()
    w.driver.settle()
    assert not w.watch.open  # sleeping before the redial
    w.driver.auto_accept = True
    w.advance(1.0)
    assert w.dials == 2 and w.watch.open
    w.driver.cancel()  # the runtime cancels the watch, through the connection
    assert w.watch.done and not w.watch.open


def test_open_is_false_after_a_terminal_rejection() -> None:
    w = World(prefix=LEGACY, auto_accept=False)
    w.socket.reject(403, b'{"message": "Forbidden"}')
    w.driver.settle()
    assert w.watch.done and not w.watch.open
