"""Offline replay through the core (``coder_proto.transcript._replay``): a recorded session replays to the
same outcome, deterministically, and anything the transcript lacks is a divergence, never a
hang or a stray exception (docs/architecture.md rule 2)."""

from __future__ import annotations

import json
import pathlib
import random

import attrs
import pytest

from coder_proto import CoderAgentError, Finish, StreamStart, TextDelta
from coder_proto._stream.websocket import WebSocketClient, WsText
from coder_proto.transcript._fields import TranscriptError
from coder_proto.transcript._format import Transcript, parse_transcript
from coder_proto.transcript._records import (
    Header,
    RestExchange,
    ToolRunRecord,
    TranscriptSettings,
    TurnEnd,
    TurnStarted,
    WsEnd,
    WsError,
    WsFrame,
    WsReject,
)
from coder_proto.transcript._replay import NOT_RECORDED, replay, text_frame
from fuzz.pipeline import handshake_response
from fuzz.seeds import SCENARIOS, record


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_recorded_session_replays_to_the_live_outcome(name: str) -> None:
    """Every fake-model scenario (text, reasoning, tool loops, server tools, drops, redials,
    promotions, a lost action_required, errors, a timeout, a cancellation) replays to what the
    live run produced, without divergence and using every recorded exchange."""
    text, _ = record(name)
    result = replay(parse_transcript(text))
    assert result.turns
    for turn in result.turns:
        assert turn.recorded is not None
        assert turn.summary() == json.loads(json.dumps(turn.summary()))
        assert turn.matches_recording, (turn.summary(), turn.recorded)
    assert result.divergences == ()
    assert result.unused_exchanges == ()
    assert result.faithful


@pytest.mark.parametrize("name", ["client_tool_loop", "drops_in_tool_loop", "multi_turn"])
def test_replay_is_deterministic(name: str) -> None:
    text, _ = record(name)
    transcript = parse_transcript(text)
    first, second = replay(transcript), replay(transcript)
    assert first.to_json() == second.to_json()
    assert [t.parts for t in first.turns] == [t.parts for t in second.turns]


def test_generate_mode_turns_report_every_output_part() -> None:
    """A generate turn delivers no parts live; the replay still reports all of them."""
    text, _ = record("plain_text")
    turn = replay(parse_transcript(text)).turns[0]
    assert turn.mode == "generate"
    assert isinstance(turn.parts[0], StreamStart)
    assert isinstance(turn.parts[-1], Finish)
    streamed = "".join(p.delta for p in turn.parts if isinstance(p, TextDelta))
    assert streamed == turn.result.text  # type: ignore[union-attr]
    assert turn.to_json()["parts"][0] == {"type": "stream-start", "warnings": []}


def _without(text: str, predicate: object) -> Transcript:
    transcript = parse_transcript(text)
    records = tuple(r for r in transcript.records if not predicate(r))  # type: ignore[operator]
    return attrs.evolve(transcript, records=records)


def test_a_request_missing_from_the_transcript_fails_and_is_listed() -> None:
    text, _ = record("plain_text")
    transcript = _without(text, lambda r: isinstance(r, RestExchange) and r.op == "create_chat")
    result = replay(transcript)
    assert any("create_chat" in d and NOT_RECORDED in d for d in result.divergences)
    error = result.turns[0].error
    assert isinstance(error, CoderAgentError)
    assert result.turns[0].matches_recording is False
    assert not result.faithful


def test_a_transcript_that_ends_mid_turn_cancels_the_turn() -> None:
    """Nothing left to hear and nothing to wait for: the turn is reported incomplete."""
    text, _ = record("plain_text")
    transcript = parse_transcript(text)
    frames = [i for i, r in enumerate(transcript.records) if isinstance(r, WsFrame)]
    cut = attrs.evolve(transcript, records=transcript.records[: frames[0]])
    result = replay(cut)
    error = result.turns[0].error
    assert isinstance(error, TranscriptError)
    assert "ended before the turn finished" in str(error)
    assert result.divergences


def test_missing_connections_and_tool_runs_are_divergences() -> None:
    text, _ = record("client_tool_loop")
    transcript = _without(text, lambda r: isinstance(r, ToolRunRecord))
    result = replay(transcript)
    assert any("tool call" in d for d in result.divergences)
    transcript = _without(text, lambda r: type(r).__name__.startswith("Ws"))
    result = replay(transcript)
    assert any("connection" in d for d in result.divergences)
    assert isinstance(result.turns[0].error, CoderAgentError)


def test_a_changed_request_body_is_a_divergence() -> None:
    text, _ = record("plain_text")
    transcript = parse_transcript(text)
    records = []
    for r in transcript.records:
        if isinstance(r, TurnStarted):
            r = TurnStarted(t=r.t, mode=r.mode, prompt=_prompt("something else"))  # type: ignore[arg-type]
        records.append(r)
    result = replay(attrs.evolve(transcript, records=tuple(records)))
    assert any("request body differs" in d for d in result.divergences)


def _prompt(text: str) -> tuple[object, ...]:
    from coder_proto._agent.prompt import normalize_prompt

    return normalize_prompt(text)


def _minimal(*records: object, **settings: object) -> Transcript:
    header = Header(
        base_url="http://h", settings=TranscriptSettings(organization_id="org", **settings)
    )  # type: ignore[arg-type]
    return Transcript(header=header, records=tuple(records))  # type: ignore[arg-type]


def _chat(status: int = 201) -> RestExchange:
    body = {
        "id": "chat-1",
        "organization_id": "org",
        "owner_id": "u",
        "title": "t",
        "status": "running",
        "created_at": "",
        "updated_at": "",
        "archived": False,
    }
    return RestExchange(
        t=0.01,
        sent=0.0,
        op="create_chat",
        method="POST",
        path="/api/v2/chats",
        status=status,
        response=body if status < 300 else {"message": "nope"},
    )


def test_a_recorded_network_error_and_api_error_replay_as_such() -> None:
    turn = TurnStarted(t=0, mode="generate", prompt=_prompt("hi"))  # type: ignore[arg-type]
    failed = RestExchange(
        t=0.1,
        sent=0,
        op="create_chat",
        method="POST",
        path="/api/v2/chats",
        error="connection refused",
    )
    result = replay(_minimal(turn, failed))
    assert "connection refused" in str(result.turns[0].error)
    result = replay(_minimal(turn, _chat(status=401)))
    assert getattr(result.turns[0].error, "status", None) == 401


def test_rejections_protocol_errors_and_socket_failures_replay() -> None:
    """The reader sees what it saw live: a terminal 404 rejection, a protocol violation, a
    socket failure before the upgrade."""
    turn = TurnStarted(t=0, mode="stream", prompt=_prompt("hi"))  # type: ignore[arg-type]
    reject = replay(
        _minimal(turn, _chat(), WsReject(t=0.02, conn=1, status=404, body='{"message":"gone"}'))
    )
    assert getattr(reject.turns[0].error, "status", None) == 404
    broken = replay(_minimal(turn, _chat(), WsError(t=0.02, conn=1, message="x")))
    assert isinstance(broken.turns[0].error, CoderAgentError)
    failing = replay(
        _minimal(
            turn,
            _chat(),
            *[WsEnd(t=0.02 + i, conn=i + 1, how="failed", message="refused") for i in range(5)],
        )
    )
    assert isinstance(failing.turns[0].error, CoderAgentError)
    assert "consecutive connection failures" in str(failing.turns[0].error)


def test_a_recorded_handshake_failure_replays_as_one() -> None:
    """The reader refused the upgrade's answer (recorded as a protocol failure before any
    accept): the replay answers the upgrade wrongly again, so the turn fails the same way."""
    turn = TurnStarted(t=0, mode="stream", prompt=_prompt("hi"))  # type: ignore[arg-type]
    message = "WebSocket handshake failed: the server's Sec-WebSocket-Accept does not match"
    result = replay(_minimal(turn, _chat(), WsError(t=0.02, conn=1, message=message)))
    error = result.turns[0].error
    assert isinstance(error, CoderAgentError)
    assert "WebSocket handshake failed" in str(error)
    assert "Sec-WebSocket-Accept" in str(error)


def test_invalid_settings_in_the_header_are_a_transcript_error() -> None:
    with pytest.raises(TranscriptError, match="settings"):
        replay(_minimal(max_steps=0))


def test_recorded_outcomes_attach_to_their_turn_and_sessions_without_turns_replay_empty() -> None:
    result = replay(_minimal(TurnEnd(t=0, outcome={"text": "x"})))
    assert result.turns == () and result.faithful


def test_session_calls_replay_and_report_their_outcome() -> None:
    text, world = record("multi_turn")
    result = replay(parse_transcript(text))
    assert result.calls == (("dispose", None),)
    assert result.chat_id == world.session.chat_id
    assert result.last_seen_message_id == world.session.last_seen_message_id


@pytest.mark.parametrize("size", [0, 125, 126, 65535, 65536, 70000])
def test_replayed_frames_decode_to_the_recorded_text(size: int) -> None:
    client = WebSocketClient("ws://h/", token=None)
    request = client.initiate()
    text = "é" * (size // 2) + "x" * (size % 2)
    events = client.receive_data(handshake_response(request) + text_frame(text))
    assert events[-1] == WsText(text)


def test_a_frame_that_is_not_unicode_is_refused_by_the_client() -> None:
    client = WebSocketClient("ws://h/", token=None)
    request = client.initiate()
    events = client.receive_data(handshake_response(request) + text_frame("\ud800"))
    assert type(events[-1]).__name__ == "WsFailed"


def test_interrupt_archive_and_reset_replay_in_order() -> None:
    """Session calls (H.3-H.5) replay where they were made; a reset makes the next turn create
    a fresh chat, as it did live."""
    from coder_proto.fake import Say, Script
    from coder_proto.transcript._recorder import TranscriptRecorder
    from fuzz.world import ModelWorld

    lines: list[str] = []
    world = ModelWorld(recorder=TranscriptRecorder(lines.append))
    world.model.config.scripts.push(Script([Say("one")]))
    world.model.config.scripts.push(Script([Say("two")]))
    world.turn("first")
    world.call("interrupt", wait=True, timeout=2.0)
    world.call("archive")
    world.call("reset_session")
    world.turn("second")
    world.drain()
    result = replay(parse_transcript("".join(lines)))
    assert [name for name, _ in result.calls] == ["interrupt", "archive", "reset_session"]
    assert [t.matches_recording for t in result.turns] == [True, True]
    assert result.divergences == ()
    assert result.chat_id == world.session.chat_id


def test_a_prompt_the_session_refuses_is_reported_as_the_turns_error() -> None:
    from coder_proto import AssistantMessage

    turn = TurnStarted(t=0, mode="generate", prompt=(AssistantMessage(()),))
    result = replay(_minimal(turn))
    assert isinstance(result.turns[0].error, CoderAgentError)
    assert result.turns[0].matches_recording is None


def test_a_tool_call_id_that_is_not_unicode_is_answered_not_an_internal_error() -> None:
    """Fuzz finding (mutate, retype): a replayed tool call whose id is a lone surrogate
    (``"\\ud800"`` in the frame) made the tool-results body unencodable, and the turn ended
    with an internal error. The results are now submitted with the id escaped as it came."""
    from fuzz.mutate import check_replay

    corpus = pathlib.Path(__file__).resolve().parents[3] / "fuzz" / "corpus"
    text = (corpus / "live_client_tool_loop.jsonl").read_text(encoding="utf-8")
    check_replay(text, "retype", random.Random(4025014981))


def test_what_the_reader_refused_is_recorded_as_it_saw_it_and_replays_to_the_same_error() -> None:
    """The transcript holds the stream reader's own reading of the bytes: an upgrade answered
    with a wrong Sec-WebSocket-Accept is recorded as the handshake failure the reader
    reported (not as an accepted upgrade, which a second parser that checks no key saw),
    and the replay ends the turn with the same error."""
    from coder_proto.transcript._recorder import TranscriptRecorder
    from coder_proto.transcript._records import WsAccept
    from tests.core_driver import Harness

    lines: list[str] = []
    h = Harness()
    h.driver.connection.recorder = TranscriptRecorder(lines.append)
    h.driver.auto_accept = False
    turn = h.stream("hi")
    bad_101 = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: not-the-key\r\n\r\n"
    )
    h.driver.deliver_connection(h.socket.conn_id, "data", bad_101 + text_frame("[]"))
    h.driver.settle()
    for _ in range(100):
        if turn.done:
            break
        h.advance(1.0)
    assert isinstance(turn.error, CoderAgentError)
    assert "Sec-WebSocket-Accept" in str(turn.error)
    transcript = parse_transcript("".join(lines))
    errors = transcript.of(WsError)
    assert errors and "Sec-WebSocket-Accept" in errors[0].message
    assert not transcript.of(WsAccept) and not transcript.of(WsFrame)
    result = replay(transcript)
    (replayed,) = result.turns
    assert replayed.matches_recording, (replayed.summary(), replayed.recorded)
