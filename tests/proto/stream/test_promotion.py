"""The queued-prompt gate and the teardown decision (state machines E.1-E.5; D8, D9)."""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto import CoderChatError, CoderProtocolError
from coder_proto._stream.promotion import (
    QUEUED_SUBMISSION_LOST,
    GateAnchored,
    GateDeadEnd,
    QueuedGate,
    QueuedSubmission,
    teardown_action,
)
from coder_proto._wire import (
    ChatMessage,
    ChatQueuedMessage,
    MessageEvent,
    StreamEvent,
    TextPart,
    parse_event,
)

HI = [{"type": "text", "text": "hi again"}]


def message(msg_id: int, role: str = "user", content: Any = HI, **extra: Any) -> StreamEvent:
    body = {"id": msg_id, "chat_id": "chat-1", "role": role, "created_at": "", **extra}
    if content is not None:
        body["content"] = content
    return parse_event({"type": "message", "chat_id": "chat-1", "message": body})


def queue(*ids: int) -> StreamEvent:
    event: dict[str, Any] = {"type": "queue_update", "chat_id": "chat-1"}
    if ids:
        event["queued_messages"] = [
            {"id": i, "chat_id": "chat-1", "content": HI, "created_at": ""} for i in ids
        ]
    return parse_event(event)


def error(message_text: str = "boom", detail: str | None = None) -> StreamEvent:
    payload: dict[str, Any] = {"message": message_text}
    if detail is not None:
        payload["detail"] = detail
    return parse_event({"type": "error", "chat_id": "chat-1", "error": payload})


def gate(queued_id: int | None = 7, content: Any = HI, cursor: int = 40) -> QueuedGate:
    return QueuedGate(QueuedSubmission(queued_id, content), turn_cursor=cursor, chat_id="chat-1")


def ids(messages: tuple[ChatMessage, ...]) -> list[int]:
    return [m.id for m in messages]


# -- QueuedSubmission (E.1) --------------------------------------------------------------------


def test_e1_submission_from_a_response_without_queued_message_matches_anything() -> None:
    assert QueuedSubmission.from_entry(None) == QueuedSubmission(None, None)


def test_e1_submission_keeps_the_entry_id_and_wire_content() -> None:
    entry = ChatQueuedMessage.from_json({"id": 7, "content": HI})
    assert QueuedSubmission.from_entry(entry) == QueuedSubmission(7, HI)


def test_d8_an_empty_content_list_is_present() -> None:
    entry = ChatQueuedMessage.from_json({"id": 7, "content": []})
    assert QueuedSubmission.from_entry(entry).content == []


def test_e1_submission_from_an_entry_built_in_code_serializes_its_parts() -> None:
    entry = ChatQueuedMessage.from_json({"id": 7, "content": HI})
    built = ChatQueuedMessage(id=7, content=entry.content)
    assert QueuedSubmission.from_entry(built).content == HI
    assert QueuedSubmission.from_entry(ChatQueuedMessage(id=3)).content is None


# -- E.2 messages ------------------------------------------------------------------------------


def test_e2_messages_at_or_below_the_pre_turn_cursor_are_ignored() -> None:
    g = gate(queued_id=None)
    assert g.feed(message(40)) is None
    assert g.feed(message(12)) is None
    assert g.up


def test_e2_without_a_queued_id_the_first_matching_user_message_anchors_at_once() -> None:
    g = gate(queued_id=None)
    assert g.feed(message(41, content=[{"type": "text", "text": "other"}])) is None
    outcome = g.feed(message(42))
    assert outcome == GateAnchored(42, ())
    assert not g.up
    assert g.outcome == outcome


def test_d8_absent_content_matches_any_user_message() -> None:
    g = gate(queued_id=None, content=None)
    assert g.feed(message(41, role="assistant")) is None
    assert isinstance(g.feed(message(42, content=None)), GateAnchored)


def test_d8_empty_content_matches_only_an_empty_user_message() -> None:
    g = gate(queued_id=None, content=[])
    assert g.feed(message(41)) is None
    outcome = g.feed(message(42, content=[]))
    assert isinstance(outcome, GateAnchored)
    assert outcome.anchor_id == 42


def test_e2_content_match_is_canonical_json_key_order_and_number_format() -> None:
    queued = [{"type": "text", "text": "n", "extra": {"b": 1, "a": 2.0}}]
    g = gate(queued_id=None, content=queued)
    wire_content = [{"extra": {"a": 2, "b": 1.0}, "text": "n", "type": "text"}]
    assert isinstance(g.feed(message(41, content=wire_content)), GateAnchored)


def test_e2_a_match_with_a_queued_id_becomes_the_candidate_and_later_messages_buffer() -> None:
    g = gate()
    assert g.feed(message(39, role="assistant")) is None  # below the cursor
    assert g.feed(message(41, role="assistant")) is None  # before any candidate: dropped
    assert g.feed(message(42)) is None
    assert g.candidate_id == 42
    assert g.feed(message(43, role="assistant", content=[{"type": "text", "text": "x"}])) is None
    assert g.feed(message(44, content=[{"type": "text", "text": "someone else"}])) is None
    assert ids(g.buffered) == [43, 44]


def test_e2_the_latest_match_wins_and_resets_the_buffer() -> None:
    g = gate()
    g.feed(message(41))
    g.feed(message(42, role="assistant"))
    g.feed(message(43))
    assert g.candidate_id == 43
    assert g.buffered == ()


# -- E.2 queue_update --------------------------------------------------------------------------


def test_e2_queue_update_without_our_entry_anchors_at_the_candidate_and_replays_buffer() -> None:
    g = gate()
    g.feed(message(42))
    g.feed(message(43, role="assistant"))
    outcome = g.feed(queue())
    assert isinstance(outcome, GateAnchored)
    assert outcome.anchor_id == 42
    assert ids(outcome.replay) == [43]
    assert g.candidate_id is None
    assert g.buffered == ()


def test_e2_j15_queue_update_still_listing_our_entry_clears_the_candidate() -> None:
    g = gate()
    g.feed(message(41))
    g.feed(message(42, role="assistant"))
    assert g.feed(queue(7)) is None
    assert g.candidate_id is None
    assert g.buffered == ()
    # The identical earlier entry's answer is not ours; the next match is (promotion-07).
    g.feed(message(43))
    outcome = g.feed(queue())
    assert isinstance(outcome, GateAnchored)
    assert outcome.anchor_id == 43


def test_e2_j15_our_entry_vanishing_without_a_candidate_is_a_dead_end() -> None:
    g = gate()
    outcome = g.feed(queue(8))
    assert isinstance(outcome, GateDeadEnd)
    err = outcome.error
    assert isinstance(err, CoderChatError)
    assert err.kind == QUEUED_SUBMISSION_LOST
    assert err.retryable is False
    assert err.chat_id == "chat-1"
    assert "left the chat's queue without materializing" in str(err)
    assert g.up  # nothing is ours: teardown withdraws (E.5)


def test_e2_queue_update_is_ignored_without_a_queued_id() -> None:
    g = gate(queued_id=None)
    assert g.feed(queue()) is None
    assert g.feed(queue(7)) is None
    assert g.outcome is None


# -- E.2 error and other events ------------------------------------------------------------------


def test_e2_j15_an_error_while_gated_is_a_dead_end_with_the_error_as_detail() -> None:
    outcome = gate().feed(error("provider down", detail="503"))
    assert isinstance(outcome, GateDeadEnd)
    err = outcome.error
    assert err.kind == QUEUED_SUBMISSION_LOST
    assert err.retryable is False
    assert err.detail == "provider down: 503"
    assert str(err).startswith("The chat's active run failed while this turn's submission")
    assert str(err).endswith(": provider down: 503")


def test_e2_an_error_without_detail_uses_its_message() -> None:
    outcome = gate().feed(error("provider down"))
    assert isinstance(outcome, GateDeadEnd)
    assert outcome.error.detail == "provider down"


def test_e2_an_error_event_without_payload_is_not_a_dead_end() -> None:
    assert gate().feed(parse_event({"type": "error", "chat_id": "chat-1"})) is None


@pytest.mark.parametrize(
    "event",
    [
        {"type": "status", "status": {"status": "running"}},
        {"type": "message_part", "message_part": {"role": "assistant", "part": {"type": "text"}}},
        {"type": "action_required", "action_required": {"tool_calls": []}},
        {"type": "retry", "retry": {"attempt": 1}},
        {"type": "preview_reset"},
        {"type": "mystery"},
    ],
)
def test_e2_everything_else_is_withheld(event: dict[str, Any]) -> None:
    g = gate()
    g.feed(message(42))
    assert g.feed(parse_event(event)) is None
    assert g.candidate_id == 42
    assert g.buffered == ()


def test_e2_after_an_outcome_the_gate_ignores_everything() -> None:
    g = gate(queued_id=None)
    first = g.feed(message(41))
    assert g.feed(message(42)) is None
    assert g.feed(error()) is None
    assert g.outcome == first


# -- E.3 / D8 stamps ---------------------------------------------------------------------------


def test_d8_a_stamp_equal_to_our_entry_anchors_at_once_whatever_the_content() -> None:
    g = gate()
    g.feed(message(41))  # an unstamped candidate
    g.feed(message(42, role="assistant"))
    outcome = g.feed(message(43, content=[{"type": "text", "text": "edited"}], queued_message_id=7))
    assert isinstance(outcome, GateAnchored)
    assert outcome.anchor_id == 43
    assert ids(outcome.replay) == [42]


def test_d8_a_stamp_for_another_entry_is_never_a_candidate() -> None:
    g = gate()
    assert g.feed(message(41, queued_message_id=6)) is None
    assert g.candidate_id is None
    assert isinstance(g.feed(queue()), GateDeadEnd)


def test_d8_another_entrys_stamped_prompt_after_our_candidate_is_buffered() -> None:
    g = gate()
    g.feed(message(41))
    g.feed(message(42, queued_message_id=8))
    outcome = g.feed(queue())
    assert isinstance(outcome, GateAnchored)
    assert outcome.anchor_id == 41
    assert ids(outcome.replay) == [42]


def test_a_stamp_cannot_be_compared_when_our_entry_id_is_unknown_so_content_decides() -> None:
    g = gate(queued_id=None)
    outcome = g.feed(message(41, queued_message_id=99))
    assert isinstance(outcome, GateAnchored)


def test_content_too_deep_to_canonicalize_is_a_protocol_error() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(CoderProtocolError):
        gate(content=[deep])


# -- E.5 teardown ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queued_turn", "gate_up", "entry", "chat", "action"),
    [
        # A queued turn before its translator exists, or while gated, withdraws (D9).
        (True, None, 7, "chat-1", "withdraw"),
        (True, True, 7, "chat-1", "withdraw"),
        (True, True, None, "chat-1", "none"),
        (True, None, 7, None, "none"),
        # Anchored: the run is ours, so it is interrupted.
        (True, False, 7, "chat-1", "interrupt"),
        (False, None, None, "chat-1", "interrupt"),
        (False, False, None, "chat-1", "interrupt"),
        (False, True, 7, "chat-1", "interrupt"),
        (False, False, None, None, "none"),
        (True, False, 7, None, "none"),
    ],
)
def test_e5_teardown_withdraws_a_gated_queued_prompt_and_otherwise_interrupts(
    queued_turn: bool, gate_up: bool | None, entry: int | None, chat: str | None, action: str
) -> None:
    assert (
        teardown_action(
            queued_turn=queued_turn, gate_up=gate_up, queued_entry_id=entry, chat_id=chat
        )
        == action
    )


def test_e2_messages_built_in_code_match_by_their_serialized_parts() -> None:
    g = gate(queued_id=None)
    built = ChatMessage(id=41, role="user", content=(TextPart("hi again"),))
    assert isinstance(g.feed(MessageEvent(built)), GateAnchored)
