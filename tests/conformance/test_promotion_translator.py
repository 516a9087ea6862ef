"""Conformance: the translator-level ``promotion`` cases (a queued prompt finding its own turn
in the stream). Session-level promotion cases run in ``test_promotion_session.py``.
"""

from __future__ import annotations

import pathlib
from typing import Any

import attrs
import pytest

from coder_proto._errors import CoderChatError
from coder_proto._outputs import OutputPart

from .corpus import Case, Unreadable, case_of, cases
from .mapping import (
    BlockIds,
    assert_parts_match,
    check_trace,
    make_translator,
    model_loop,
    wire_events,
)
from .session import check_error

STATE_KEYS = ("anchored_turn_cursor",)


@pytest.mark.parametrize("case", cases("promotion", level="translator"))
def test_promotion_case_at_translator_level(case: Case | Unreadable) -> None:
    case = case_of(case)
    given, expect = case.given, case.expect
    translator = make_translator(given["translator"])
    events = wire_events(given["events"])
    state: dict[str, Any] = {}

    if given["procedure"] == "model_loop":
        error: CoderChatError | None = None
        parts: list[OutputPart] = []
        try:
            parts = model_loop(translator, events, parts)
        except CoderChatError as exc:
            error = exc
        if "dead_end" in expect or "error" in expect:
            check_error(expect.get("dead_end") or expect["error"], error)
            # Beside a dead end, ``parts`` are the parts emitted before it (often none).
            if "parts" in expect:
                assert_parts_match(expect["parts"], parts, BlockIds())
            others = set(expect) - {"dead_end", "error", "parts", *STATE_KEYS}
            assert not others, f"a dead end emits no trace to check {sorted(others)} against"
        else:
            assert error is None, error
            check_trace(expect, parts, skip=STATE_KEYS, subset=True)
    else:
        assert given["procedure"] == "ingest_each_then_finish", given["procedure"]
        per_event = [translator.ingest(event) for event in events]
        finish = translator.finish()
        ids = BlockIds()
        for key, want in expect.items():
            if key == "per_event":
                assert len(per_event) == len(want)
                for want_parts, got in zip(want, per_event, strict=True):
                    assert_parts_match(want_parts, got, ids)
            elif key == "finish":
                assert_parts_match(want, finish, ids)
            else:
                assert key in STATE_KEYS, f"expected key {key!r} is not part of the vocabulary"
    state["anchored_turn_cursor"] = translator.turn_cursor
    for key in STATE_KEYS:
        if key in expect:
            assert state[key] == expect[key], key


def _status(value: str) -> dict[str, Any]:
    return {"type": "status", "chat_id": "chat-1", "status": {"status": value}}


#: Our queued prompt leaves the queue without showing up as a message: a dead end, with
#: nothing emitted before it.
LOST = Case(
    family="promotion",
    name="lost",
    given={
        "level": "translator",
        "procedure": "model_loop",
        "translator": {
            "turn_cursor": 40,
            "queued_submission": {"id": 7, "content": [{"type": "text", "text": "hi"}]},
        },
        "events": [_status("running"), {"type": "queue_update", "chat_id": "chat-1"}],
    },
    expect={
        "dead_end": {"kind": "queued_submission_lost", "retryable": False},
        "parts": [],
        "anchored_turn_cursor": 40,
    },
    path=pathlib.Path("lost.json"),
)


def test_parts_beside_a_dead_end_are_those_emitted_before_it() -> None:
    test_promotion_case_at_translator_level(LOST)
    wrong = {**LOST.expect, "parts": [{"type": "text-start", "id": "text-1"}]}
    with pytest.raises(AssertionError):
        test_promotion_case_at_translator_level(attrs.evolve(LOST, expect=wrong))
