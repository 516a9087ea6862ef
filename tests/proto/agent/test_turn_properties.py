"""Hypothesis properties of the session, segment and turn machines (state machines J.19-J.24).

Each example drives the real machines through the in-memory driver with generated server
behaviour: messages above and below the cursor, pauses for client tools, drops, errors,
timeouts, cancellations, queued prompts, and archive answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coder_proto import CoderStreamError, FileContent, TextContent
from tests.core_driver import (
    CHAT,
    Hang,
    Harness,
    NetworkError,
    Respond,
    action_required,
    chat_stub,
    delta,
    error_event,
    message,
    queue_update,
    status,
    tool_call_part,
    weather_tool,
)

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INTERRUPT = "POST /api/v2/chats/chat-1/interrupt"

ENDINGS = ("settle", "error", "drops", "timeout", "cancel", "promotion", "pause", "closed")


def _committed(message_id: int) -> dict[str, Any]:
    return {
        "message": {"id": message_id, "chat_id": CHAT, "role": "user", "content": []},
        "queued": False,
    }


def _exhaust(h: Harness) -> None:
    for _ in range(5):
        if h.driver.sockets and h.socket.open:
            h.socket.drop(1006)
            h.driver.settle()
        h.advance(30.0)


def _end(h: Harness, ending: str, next_id: int) -> None:
    """Drive the running segment to one of its endings."""
    if ending == "settle":
        h.send(message(next_id, "done"), status("waiting"))
    elif ending == "error":
        h.send(error_event("bad"), status("error"))
    elif ending == "drops":
        _exhaust(h)
    elif ending == "timeout":
        h.advance(10.0)
    elif ending == "cancel":
        h.driver.cancel()
    elif ending == "promotion":
        # On a chat the turn created, the first user message above the cursor is its own
        # prompt (the D3 exemption); the next one is someone else's promotion.
        h.send(message(next_id, "own", role="user"), message(next_id + 1, "other", role="user"))
    elif ending == "pause":
        call_id = f"c{next_id}"
        h.send(
            message(next_id, [tool_call_part(call_id, "get_weather", args={})]),
            status("requires_action"),
            action_required((call_id, "get_weather", "{}")),
        )
    else:  # "closed": the stream is closed under the segment
        h.session.close_retained_stream(h.now)
        h.driver.settle()


# -- J.19: the cursor --------------------------------------------------------------------------------


@PROPERTY
@given(
    turns=st.lists(
        st.tuples(
            st.lists(st.integers(1, 60), max_size=6),
            st.sampled_from(ENDINGS),
        ),
        min_size=1,
        max_size=4,
    ),
    resumed=st.booleans(),
)
def test_j19_the_cursor_never_decreases_and_covers_every_observed_id(
    turns: list[tuple[list[int], str]], resumed: bool
) -> None:
    """J.19: L never decreases except through a session reset (to 0); after any segment
    L >= the largest message id it observed."""
    h = Harness(
        request_timeout=5,
        tools=(weather_tool(),),
        **({"chat_id": CHAT, "last_seen_message_id": 3} if resumed else {}),
    )
    next_user = 100
    for ids, ending in turns:
        before = h.session.cursor
        next_user += 10
        h.env.rest[f"POST {'/api/experimental/chats'}/{CHAT}/messages"] = _committed(next_user)
        turn = h.segment("hi")
        if turn.done:  # refused before streaming (never here) - nothing observed
            continue
        h.send(status("running"), *(message(i, f"m{i}") for i in ids))
        _end(h, ending, next_user + 1)
        h.driver.drain_background()
        assert turn.done
        observed = max([*ids, next_user + 1 if ending in ("settle", "promotion", "pause") else 0])
        if ending == "promotion" and turn.segment is not None and turn.segment.created:
            observed = next_user + 2
        if h.session.chat_id is None:
            # The fresh chat's stream failed: discarded (C.5), cursor reset to 0.
            assert isinstance(turn.error, CoderStreamError)
            assert h.session.cursor == 0
        else:
            assert h.session.cursor >= before
            assert h.session.cursor >= observed
        if h.session.retained_stream is not None:
            h.session.close_retained_stream(h.now)
            h.driver.settle()


# -- J.20: one interrupt or withdrawal per segment ---------------------------------------------------


@PROPERTY
@given(
    queued=st.sampled_from(["no", "with-id", "without-entry"]),
    anchor=st.booleans(),
    ending=st.sampled_from(["timeout", "cancel", "error-no-status", "drops", "dead-end", "settle"]),
)
def test_j20_at_most_one_teardown_and_never_the_wrong_kind(
    queued: str, anchor: bool, ending: str
) -> None:
    """J.20: at most one interrupt or withdrawal command per segment; a queued-and-gated
    turn never interrupts; an anchored or non-queued turn never withdraws."""
    if queued == "no":
        answer: dict[str, Any] = _committed(10)
    elif queued == "with-id":
        answer = {"queued": True, "queued_message": {"id": 7, "chat_id": CHAT, "content": []}}
    else:
        answer = {"queued": True}
    h = Harness(
        chat_id=CHAT,
        last_seen_message_id=5,
        request_timeout=5,
        rest={"POST /api/v2/chats/chat-1/messages": answer},
    )
    turn = h.segment("hi")
    gated = queued != "no"
    if gated and anchor:
        stamp = {"queued_message_id": 7} if queued == "with-id" else {}
        h.send(message(11, "", role="user", **stamp), queue_update())
        gated = False
    h.send(status("running"))
    if ending == "timeout":
        h.advance(5.0)
    elif ending == "cancel":
        h.driver.cancel()
    elif ending == "error-no-status":
        h.send(error_event("bad"))
        h.session.close_retained_stream(h.now)
        h.driver.settle()
    elif ending == "drops":
        _exhaust(h)
    elif ending == "dead-end" and gated and queued == "with-id":
        h.send(queue_update())  # our entry left the queue without a candidate (E.2)
    elif ending == "dead-end":
        h.driver.cancel()
    else:
        h.send(message(12, "done"), status("waiting"))
    if not turn.done:
        # A gated turn does not settle on the other run's status: its caller gives up.
        assert gated
        h.driver.cancel()
    h.driver.drain_background()
    assert turn.done
    interrupts = h.routes().count(INTERRUPT)
    withdrawals = len(h.routes("DELETE"))
    assert interrupts + withdrawals <= 1
    if gated:
        assert interrupts == 0
    else:
        assert withdrawals == 0


# -- J.21: stream error retryability ------------------------------------------------------------------


@PROPERTY
@given(
    existing=st.booleans(),
    workspace=st.booleans(),
    mcp=st.booleans(),
    server_workspace=st.booleans(),
    server_mcp=st.booleans(),
    upload=st.booleans(),
    progress=st.lists(st.integers(1, 20), max_size=3),
)
def test_j21_a_stream_error_is_retryable_iff_the_turn_created_an_effect_free_chat(
    existing: bool,
    workspace: bool,
    mcp: bool,
    server_workspace: bool,
    server_mcp: bool,
    upload: bool,
    progress: list[int],
) -> None:
    chat_fields: dict[str, Any] = {}
    if server_workspace:
        chat_fields["workspace_id"] = "ws-server"
    if server_mcp:
        chat_fields["mcp_server_ids"] = ["m-server"]
    config: dict[str, Any] = {}
    if existing:
        config.update(chat_id=CHAT, last_seen_message_id=2)
    if workspace:
        config["workspace_id"] = "ws-1"
    if mcp:
        config["mcp_server_ids"] = ("m1",)
    h = Harness(
        rest={
            "POST /api/v2/chats": Respond(201, chat_stub(**chat_fields)),
            "POST /api/v2/chats/chat-1/messages": _committed(3),
        },
        **config,
    )
    prompt: list[Any] = [TextContent("hi")]
    if upload:
        prompt.append(FileContent(data=b"x", media_type="text/plain"))
    turn = h.segment(prompt)
    h.send(*(message(10 + i, "x") for i in progress))
    _exhaust(h)
    _exhaust(h)
    error = turn.error
    assert isinstance(error, CoderStreamError)
    created = not existing
    effectful = workspace or mcp or upload or (created and (server_workspace or server_mcp))
    assert error.retryable is (created and not effectful)
    assert error.chat_id == CHAT
    if created:
        assert CHAT in h.session.stranded_chat_ids and h.session.chat_id is None
    else:
        assert h.session.chat_id == CHAT and h.session.stranded_chat_ids == ()


# -- J.22: settle events --------------------------------------------------------------------------------


@PROPERTY
@given(
    endings=st.lists(st.sampled_from(ENDINGS), min_size=1, max_size=4),
    modes=st.lists(st.sampled_from(["stream", "generate"]), min_size=4, max_size=4),
)
def test_j22_every_start_has_exactly_one_settle_and_never_error_with_finish_reason(
    endings: list[str], modes: list[str]
) -> None:
    from coder_proto import ToolMessage, ToolResultContent

    h = Harness(request_timeout=5, tools=(weather_tool(),))
    for index, ending in enumerate(endings):
        if h.session.retained_stream is not None:
            call_id = f"c{100 + index - 1}"  # the previous segment's pause
            prompt: Any = [ToolMessage((ToolResultContent(tool_call_id=call_id, output=1),))]
        else:
            prompt = "hi"
        turn = h.segment(prompt, mode=modes[index])
        if not turn.done:
            h.send(status("running"), delta(f"part {index}"))
            _end(h, ending, 100 + index)
        h.driver.drain_background()
        assert turn.done
    events = [e for e in h.env.events if e.type.startswith("segment:")]
    starts = [e.segment for e in events if e.type == "segment:start"]
    assert starts == list(range(1, len(starts) + 1))
    for position, event in enumerate(events):
        expected = "segment:start" if position % 2 == 0 else "segment:settle"
        assert event.type == expected
        if event.type == "segment:settle":
            assert event.segment == events[position - 1].segment
            assert not (event.error is not None and event.finish_reason is not None)


# -- J.23: archive ----------------------------------------------------------------------------------------

ARCHIVE_ANSWERS = st.sampled_from(["204", "already", "409", "404", "500", "network", "hang"])


@PROPERTY
@given(
    stranded=st.lists(st.sampled_from(["s1", "s2", "s3", CHAT]), max_size=5),
    primary_known=st.sampled_from(["chat", "last-known", "none"]),
    answers=st.dictionaries(
        st.sampled_from(["s1", "s2", "s3", CHAT]), st.lists(ARCHIVE_ANSWERS, min_size=1, max_size=6)
    ),
    deadline=st.sampled_from([0.5, 2.5, 15.0]),
    retry=st.sampled_from([0.25, 1.0]),
)
def test_j23_archive_targets_order_ledger_and_time(
    stranded: list[str],
    primary_known: str,
    answers: dict[str, list[str]],
    deadline: float,
    retry: float,
) -> None:
    def reply(kind: str) -> Any:
        return {
            "204": Respond(204),
            "already": Respond(400, {"message": "Chat is already archived."}),
            "409": Respond(409, {"message": "active"}),
            "404": Respond(404, {"message": "gone"}),
            "500": Respond(500, {"message": "down"}),
            "network": NetworkError(),
            "hang": Hang(),
        }[kind]

    rest = {f"PATCH /api/v2/chats/{c}": [reply(k) for k in seq] for c, seq in answers.items()}
    config: dict[str, Any] = {"settle_deadline": deadline, "settle_retry_delay": retry}
    if primary_known != "none":
        config["chat_id"] = CHAT
    h = Harness(rest=rest, **config)
    h.session.selector._lock("/api/v2/chats")  # a locked client never falls back on a 404
    if primary_known == "last-known":
        h.session.reset_session(h.now)
    for chat in stranded:
        h.session.add_stranded(chat)
    if primary_known == "none":
        h.session.last_known_chat_id = None
    ledger_before = h.session.stranded_chat_ids
    last_known_before = h.session.last_known_chat_id
    primary = h.session.chat_id or h.session.last_known_chat_id
    start = h.now
    machine = h.driver.start(h.session.archive(now=h.now))
    while not machine.done:
        due = h.driver.next_due()
        assert due is not None
        h.driver.now = due
        h.driver.settle()
    if primary is None:
        assert not machine.result().archived and h.routes() == []
        return
    targets = list(dict.fromkeys([*ledger_before, primary]))
    outcomes, elapsed = _archive_oracle(targets, primary, answers, deadline, retry)
    # Every target is attempted, in order (H.4, D10).
    assert list(dict.fromkeys(r.split("/")[-1] for r in h.routes())) == targets
    assert h.now - start == pytest.approx(elapsed, abs=1e-9)
    assert elapsed <= deadline + 0.001 * len(targets) + 1e-9
    # An id leaves the ledger (and last_known_chat_id) only after its own archive succeeded
    # (or, for a stranded id, its chat turned out not to exist).
    cleaned = {t for t, o in outcomes.items() if o in ("archived", "dropped")}
    assert h.session.stranded_chat_ids == tuple(t for t in ledger_before if t not in cleaned)
    expected_last_known = None if last_known_before in cleaned else last_known_before
    assert h.session.last_known_chat_id == expected_last_known
    if all(o in ("archived", "dropped") for o in outcomes.values()):
        result = machine.result()
        assert result.archived and result.chat_id == primary
        assert result.archived_chat_ids == tuple(t for t in targets if outcomes[t] == "archived")
    else:
        assert machine.error is not None


def _archive_oracle(
    targets: list[str], primary: str, answers: dict[str, list[str]], deadline: float, retry: float
) -> tuple[dict[str, str], float]:
    """H.4 with D10, computed directly: each target's outcome and the time it all took."""
    now = 0.0
    outcomes: dict[str, str] = {}
    for target in targets:
        sequence = answers.get(target, ["204"])
        local = now + max(deadline - now, 0.001)
        index = 0
        while True:
            kind = sequence[min(index, len(sequence) - 1)]
            index += 1
            if kind in ("204", "already"):
                outcomes[target] = "archived"
            elif kind == "409" and now + retry <= local:
                now += retry
                if now >= local:
                    # The retry lands exactly on the deadline: the attempt has no budget left
                    # and times out at once (the reference's timeout signal fires first).
                    outcomes[target] = "failed"
                    break
                continue
            elif kind == "hang":
                now = local
                outcomes[target] = "failed"
            elif kind == "404" and target != primary:
                outcomes[target] = "dropped"
            else:
                outcomes[target] = "failed"
            break
    return outcomes, now


# -- J.24: the paused stream adopts every event ------------------------------------------------------


@PROPERTY
@given(
    chunks=st.lists(st.text(alphabet="abcxyz ", min_size=1, max_size=4), min_size=1, max_size=8),
    split=st.integers(0, 12),
    frames=st.integers(1, 4),
    redial=st.booleans(),
)
def test_j24_events_buffered_while_paused_are_delivered_once_in_order(
    chunks: list[str], split: int, frames: int, redial: bool
) -> None:
    """H.6 / J.24: whatever part of the resumed generation arrives before the resume
    segment attaches is adopted by it; nothing is lost and nothing is delivered twice."""
    h = Harness(tools=(weather_tool(),))
    first = h.segment("weather?")
    h.send(
        status("running"),
        message(2, [tool_call_part("c", "get_weather", args={})]),
        status("requires_action"),
        action_required(("c", "get_weather", "{}")),
    )
    assert first.result().finish_reason == "tool-calls"
    generation = [status("running")]
    generation += [delta(text, seq, hv=2) for seq, text in enumerate(chunks, start=1)]
    generation += [message(4, "".join(chunks)), status("waiting")]
    early, late = generation[:split], generation[split:]
    size = max(1, len(early) // frames)
    for start in range(0, len(early), size):
        h.send(*early[start : start + size])  # delivered to the session: no turn runs
    if redial:
        h.socket.drop(1006)
        h.driver.settle()
        h.advance(1.0)
        # The server replays the committed history and the episode from seq 1.
        h.send(*generation[: max(split, 1)])
    from coder_proto import ToolMessage, ToolResultContent

    resume = h.segment([ToolMessage((ToolResultContent(tool_call_id="c", output=1),))])
    if late:
        h.send(*late)
    elif not resume.done and redial:
        h.send(*generation)
    result = resume.result()
    assert result.text == "".join(chunks)
    assert result.finish_reason == "stop"


# -- D34: session errors are drops -------------------------------------------------------------------


@PROPERTY
@given(
    chunks=st.lists(st.text(alphabet="ab ", min_size=1, max_size=3), min_size=1, max_size=8),
    outages=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 3)), max_size=3),
    at_start=st.integers(0, 3),
    mode=st.sampled_from(["stream", "generate"]),
)
def test_d34_text_is_delivered_exactly_once_across_stream_session_errors(
    chunks: list[str], outages: list[tuple[int, int]], at_start: int, mode: str
) -> None:
    """D34: the server's stream session errors (one ``error`` event, then the close), on the
    first dial and on redials after drops mid-generation, are dropped connections: the turn
    ends normally with its text exactly once and no error part."""
    session_failed = error_event("failed to load initial snapshot", retryable=False)
    h = Harness()
    turn = h.segment("hi", mode=mode)

    def fail_sessions(count: int) -> None:
        for _ in range(count):
            h.send(session_failed)
            h.driver.sockets[-1].close(1000)
            h.advance(8.0)  # past any backoff a budget of five allows here

    generation = [delta(text, seq) for seq, text in enumerate(chunks, start=1)]
    # Each drop comes after fresh deltas (progress), so a drop and its session errors stay
    # within the budget of five endings in a row.
    cuts = {min(at, len(generation)): count for at, count in outages}
    fail_sessions(at_start)
    sent = 0
    h.send(status("running"))
    for at in sorted(cuts):
        h.send(*generation[sent:at])
        sent = at
        h.socket.drop(1006)
        h.driver.settle()
        h.advance(1.0)
        fail_sessions(cuts[at])
        h.send(status("running"), *generation[:sent])  # the episode replayed from seq 1
    if sent < len(generation):
        h.send(*generation[sent:])
    h.send(message(2, "".join(chunks)), status("waiting"))
    result = turn.result()
    assert result.text == "".join(chunks)
    assert (result.finish_reason, result.error) == ("stop", None)
    if mode == "stream":
        assert [p for p in turn.parts if type(p).__name__ == "ErrorPart"] == []


# -- garbage in, typed errors out ---------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 60)
    | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
EVENT_TYPES = [
    "message_part",
    "message",
    "status",
    "error",
    "queue_update",
    "retry",
    "action_required",
    "preview_reset",
    "history_reset",
    "brand_new",
]
PAYLOAD_KEYS = [
    "message_part",
    "message",
    "status",
    "error",
    "queued_messages",
    "retry",
    "action_required",
]
EVENTS = st.one_of(
    st.builds(
        lambda kind, payload: {"type": kind, "chat_id": CHAT, **payload},
        st.sampled_from(EVENT_TYPES),
        st.dictionaries(st.sampled_from(PAYLOAD_KEYS), JSON, max_size=2),
    ),
    st.sampled_from(
        [
            status("running"),
            status("requires_action"),
            delta("x", 1),
            message(9, "ok"),
            action_required(("c", "get_weather", "{")),
            error_event("bad"),
        ]
    ),
)


def _assert_typed(turn: Any) -> None:
    from coder_proto import CoderAgentError

    if turn.done and turn.error is not None:
        assert isinstance(turn.error, CoderAgentError | TimeoutError), repr(turn.error)
        assert "internal error" not in str(turn.error), repr(turn.error.__cause__)


@PROPERTY
@given(
    frames=st.lists(st.lists(EVENTS, min_size=1, max_size=4), max_size=6),
    mode=st.sampled_from(["stream", "generate"]),
)
def test_arbitrary_stream_events_end_in_a_result_or_a_typed_error(
    frames: list[list[dict[str, Any]]], mode: str
) -> None:
    h = Harness(tools=(weather_tool(),), request_timeout=30)
    turn = h.segment("hi", mode=mode)
    for frame in frames:
        if turn.done or not h.socket.open:
            break
        h.send(*frame)
    if not turn.done and h.socket.open:
        h.send(status("waiting"))
    if not turn.done:
        h.advance(31.0)  # whatever it still waits for, the budget ends it
    assert turn.done
    _assert_typed(turn)
    h.driver.drain_background()


@PROPERTY
@given(
    status_code=st.sampled_from([200, 201, 204, 400, 404, 409, 429, 500]),
    body=JSON,
    existing=st.booleans(),
)
def test_arbitrary_rest_answers_end_in_a_typed_error_or_go_on(
    status_code: int, body: Any, existing: bool
) -> None:
    route = "POST /api/v2/chats/chat-1/messages" if existing else "POST /api/v2/chats"
    config: dict[str, Any] = {"chat_id": CHAT, "last_seen_message_id": 2} if existing else {}
    h = Harness(rest={route: Respond(status_code, body)}, request_timeout=30, **config)
    turn = h.segment("hi")
    if not turn.done:
        h.advance(31.0)
    assert turn.done
    _assert_typed(turn)
