"""The session-case checks no corpus case uses yet: each holds on a run that shows it, and a
wrong value fails. Together with the corpus (every key of which is load-bearing, see
``test_corpus.py``) this covers the whole vocabulary of ``session.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .session import OUTCOME_CHECKS, TRAFFIC_CHECKS, run_case

CHAT = "chat-1"
SOURCE = {"type": "source", "source_id": "s1", "url": "https://a.test/doc", "title": "Doc"}


def status(value: str) -> dict[str, Any]:
    return {"type": "status", "chat_id": CHAT, "status": {"status": value}}


def delta(text: str, seq: int) -> dict[str, Any]:
    part = {"role": "assistant", "part": {"type": "text", "text": text}}
    return {
        "type": "message_part",
        "chat_id": CHAT,
        "message_part": {**part, "history_version": 1, "generation_attempt": 1, "seq": seq},
    }


def message(message_id: int, content: list[Any], **extra: Any) -> dict[str, Any]:
    body = {
        "id": message_id,
        "chat_id": CHAT,
        "role": "assistant",
        "created_at": "",
        "content": content,
        **extra,
    }
    return {"type": "message", "chat_id": CHAT, "message": body}


USAGE = {"input_tokens": 3, "output_tokens": 2}

#: A streamed segment whose run reports an error: the error travels as a part.
RUN_ERROR_IN_STREAM: dict[str, Any] = {
    "transport": "websocket",
    "config": {"organization_id": "org-1"},
    "calls": [{"call": "segment", "mode": "stream", "prompt": "hi"}],
    "timeline": [
        {
            "socket": 0,
            "frame": [
                status("running"),
                delta("Hel", 1),
                delta("lo", 2),
                message(2, [{"type": "text", "text": "Hello"}, SOURCE], usage=USAGE),
            ],
        },
        {"checkpoint": "text streamed"},
        {
            "socket": 0,
            "frame": [
                {
                    "type": "error",
                    "chat_id": CHAT,
                    "error": {
                        "message": "model overloaded",
                        "kind": "overloaded",
                        "retryable": True,
                    },
                },
                status("error"),
            ],
        },
        {"advance": 0.0},
    ],
}
RUN_ERROR_EXPECT: dict[str, Any] = {
    "streamed_sources": [
        {"id": "s1", "url": "https://a.test/doc", "title": "Doc", "source_type": "url"}
    ],
    "emits_error_part": True,
    "ends_cleanly": True,
    "raised": False,
    "last_part": {
        "type": "finish",
        "finish_reason": "error",
        "raw_finish_reason": "error",
        "usage": {
            "input_tokens": 3,
            "no_cache_tokens": 3,
            "output_tokens": 2,
            "total_tokens": 5,
            "raw": USAGE,
        },
    },
    "segment_settle": {
        "status": "error",
        "error": {"name": "CoderChatError", "message_matches": "overloaded"},
    },
    "last_known_chat_id": CHAT,
    "last_seen_message_id_after": 2,
    "socket_paths": [f"/api/v2/chats/{CHAT}/stream"],
    "first_socket_closed_by_client": True,
    "get_messages_calls": 0,
    "at_checkpoint": {"dials": 1, "tool_results_posts": 0, "interrupt_requests": 0},
}
RUN_ERROR_WRONG: dict[tuple[str, ...], Any] = {
    ("streamed_sources",): [],
    ("emits_error_part",): False,
    ("ends_cleanly",): False,
    ("raised",): True,
    ("last_part", "finish_reason"): "stop",
    ("segment_settle", "status"): "waiting",
    ("segment_settle", "error", "message_matches"): "rate limited",
    ("last_known_chat_id",): "chat-2",
    ("last_seen_message_id_after",): 3,
    ("socket_paths",): [f"/api/v2/chats/{CHAT}/stream?after_id=1"],
    ("first_socket_closed_by_client",): False,
    ("get_messages_calls",): 1,
    ("at_checkpoint", "dials"): 2,
}

#: One generate-mode segment: two text blocks around a server tool, and a source.
GENERATE: dict[str, Any] = {
    "transport": "websocket",
    "config": {"organization_id": "org-1"},
    "calls": [{"call": "segment", "mode": "generate", "prompt": "hi"}],
    "timeline": [
        {
            "socket": 0,
            "frame": [
                status("running"),
                message(
                    2,
                    [
                        {"type": "text", "text": "One."},
                        {
                            "type": "tool-call",
                            "tool_call_id": "t1",
                            "tool_name": "search",
                            "args": {"q": "x"},
                            "provider_executed": True,
                        },
                        {
                            "type": "tool-result",
                            "tool_call_id": "t1",
                            "tool_name": "search",
                            "result": {"hits": 1},
                        },
                        {"type": "text", "text": "Two."},
                        SOURCE,
                    ],
                ),
                status("waiting"),
            ],
        },
        {"advance": 0.0},
    ],
}
GENERATE_EXPECT: dict[str, Any] = {
    "content_text": ["One.", "Two."],
    "content_sources": [
        {"id": "s1", "url": "https://a.test/doc", "title": "Doc", "source_type": "url"}
    ],
    "ends_cleanly": True,
}
GENERATE_WRONG: dict[tuple[str, ...], Any] = {
    ("content_text",): ["One."],
    ("content_sources",): [],
}

#: The stand-in stream ends before the run settles: the call raises after some text.
ENDS_EARLY: dict[str, Any] = {
    "transport": "scripted",
    "config": {"organization_id": "org-1"},
    "stream_batches": [[status("running"), delta("partial", 1)]],
    "stream_then": "end",
    "calls": [{"call": "segment", "mode": "stream", "prompt": "hi"}],
}
ENDS_EARLY_EXPECT: dict[str, Any] = {
    "raised": True,
    "ends_cleanly": False,
    "parts_before_error": [
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "partial"},
    ],
    "segment_settle": {"status": None, "error": {"name": "CoderChatError"}},
}
ENDS_EARLY_WRONG: dict[tuple[str, ...], Any] = {
    ("raised",): False,
    ("parts_before_error",): [{"type": "text-start", "id": "text-1"}],
    ("segment_settle", "error"): None,
}

#: A queued prompt whose queue entry vanishes before it shows up as a message.
QUEUED_AND_LOST: dict[str, Any] = {
    "transport": "websocket",
    "config": {"organization_id": "org-1", "chat_id": CHAT},
    "rest": {
        f"GET /api/v2/chats/{CHAT}/messages?limit=1": {
            "status": 200,
            "body": {
                "messages": [{"id": 40, "chat_id": CHAT, "role": "assistant", "created_at": ""}],
                "queued_messages": [],
                "has_more": False,
            },
        },
        f"POST /api/v2/chats/{CHAT}/messages": {
            "status": 200,
            "body": {
                "queued": True,
                "queued_message": {"id": 7, "chat_id": CHAT, "content": [], "created_at": ""},
            },
        },
    },
    "calls": [{"call": "segment", "mode": "stream", "prompt": "hi again"}],
    "timeline": [
        {"socket": 0, "frame": [status("running"), {"type": "queue_update", "chat_id": CHAT}]},
        {"until_done": 60.0},
    ],
}
QUEUED_AND_LOST_EXPECT: dict[str, Any] = {
    "dead_end": {
        "kind": "queued_submission_lost",
        "retryable": False,
        "message_matches": "queue",
    },
    "get_messages_calls": 1,
    "deleted_queue_entries": [[CHAT, 7]],
    "last_seen_message_id_after": 40,
    "anchored_turn_cursor": 40,
}
QUEUED_AND_LOST_WRONG: dict[tuple[str, ...], Any] = {
    ("dead_end", "kind"): "timeout",
    ("dead_end", "retryable"): True,
    ("dead_end", "message_matches"): "^interrupted",
}

CASES = {
    "run-error-in-stream": (RUN_ERROR_IN_STREAM, RUN_ERROR_EXPECT, RUN_ERROR_WRONG),
    "generate": (GENERATE, GENERATE_EXPECT, GENERATE_WRONG),
    "ends-early": (ENDS_EARLY, ENDS_EARLY_EXPECT, ENDS_EARLY_WRONG),
    "queued-and-lost": (QUEUED_AND_LOST, QUEUED_AND_LOST_EXPECT, QUEUED_AND_LOST_WRONG),
}


def _replace(expect: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(expect)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_the_expectations_hold(name: str) -> None:
    given, expect, _ = CASES[name]
    run_case(given, expect)


@pytest.mark.parametrize(
    ("name", "path"), [(name, path) for name, (_, _, wrong) in CASES.items() for path in wrong]
)
def test_a_wrong_value_fails(name: str, path: tuple[str, ...]) -> None:
    given, expect, wrong = CASES[name]
    with pytest.raises(AssertionError):
        run_case(given, _replace(expect, path, wrong[path]))


def test_parts_before_error_needs_the_call_to_fail() -> None:
    with pytest.raises(AssertionError, match="expected to fail"):
        run_case(RUN_ERROR_IN_STREAM, {"parts_before_error": []})


def test_an_unknown_expectation_fails_the_case() -> None:
    with pytest.raises(AssertionError, match="not part of the traffic vocabulary"):
        run_case(GENERATE, {"glyph_count": 3})
    with pytest.raises(AssertionError, match="not part of the call vocabulary"):
        run_case(GENERATE, {"calls": {"call-0": {"glyph_count": 3}}})
    with pytest.raises(AssertionError, match="not part of the vocabulary"):
        run_case(ENDS_EARLY, {"error": {"severity": "high"}})


def test_at_checkpoint_needs_a_checkpoint() -> None:
    with pytest.raises(AssertionError, match="no checkpoint"):
        run_case(GENERATE, {"at_checkpoint": {"dials": 1}})


def test_these_cases_and_the_corpus_use_every_check() -> None:
    from .corpus import our_cases

    used: set[str] = set()
    expectations = [c.expect for c in our_cases("turn")]
    expectations += [c.expect for c in our_cases("promotion") if c.level == "session"]
    expectations += [expect for _, expect, _ in CASES.values()]
    for expect in expectations:
        used |= set(expect) - {"calls", "at_checkpoint"}
        used |= set(expect.get("at_checkpoint", {}))
        for call in expect.get("calls", {}).values():
            used |= set(call)
    assert set(OUTCOME_CHECKS) | set(TRAFFIC_CHECKS) <= used


# -- shapes of the reference format (FORMAT §6) ------------------------------------------------


def test_a_last_part_is_matched_as_a_subset() -> None:
    """``last_part`` states only some keys of the part (here not its usage)."""
    run_case(RUN_ERROR_IN_STREAM, {"last_part": {"type": "finish", "finish_reason": "error"}})
    with pytest.raises(AssertionError):
        run_case(RUN_ERROR_IN_STREAM, {"last_part": {"type": "finish", "finish_reason": "stop"}})


def test_parts_are_matched_as_subsets_in_order() -> None:
    parts = ENDS_EARLY_EXPECT["parts_before_error"]
    run_case(ENDS_EARLY, {"parts_before_error": [{"type": "text-start"}, {"delta": "partial"}]})
    with pytest.raises(AssertionError):
        run_case(ENDS_EARLY, {"parts_before_error": [{"type": "text-start"}, {"delta": "x"}]})
    with pytest.raises(AssertionError):  # one part too many
        run_case(ENDS_EARLY, {"parts_before_error": [*parts, {"type": "text-end"}]})


def test_a_generate_call_reports_the_sources_its_stream_carried() -> None:
    source = {"id": "s1", "url": "https://a.test/doc", "title": "Doc", "source_type": "url"}
    run_case(GENERATE, {"streamed_sources": [source]})
    with pytest.raises(AssertionError):
        run_case(GENERATE, {"streamed_sources": []})


#: A stand-in stream that stays open after a running status and some text: only the
#: timeline's entries end the call.
SCRIPTED_OPEN: dict[str, Any] = {
    "transport": "scripted",
    "config": {"organization_id": "org-1"},
    "stream_batches": [[status("running"), delta("partial", 1)]],
    "calls": [{"call": "segment", "mode": "stream", "prompt": "hi"}],
    "timeline": [{"advance": 1.0}, {"checkpoint": "streaming"}, {"cancel": True}],
}


def test_a_timeline_acts_on_the_call_in_flight_of_a_scripted_stream() -> None:
    """With the stand-in stream, ``advance``, ``checkpoint`` and ``cancel`` act on the call in
    flight: it is cancelled with the caller's own cancellation after its text arrived."""
    run_case(
        SCRIPTED_OPEN,
        {
            "error": {"type": "CallerCancelled"},
            "parts_before_error": [
                {"type": "text-start", "id": "text-1"},
                {"type": "text-delta", "id": "text-1", "delta": "partial"},
            ],
            "at_checkpoint": {"dials": 1, "interrupt_requests": 0},
        },
    )
    with pytest.raises(AssertionError):
        run_case(SCRIPTED_OPEN, {"at_checkpoint": {"dials": 2}})
    without_cancel = {**SCRIPTED_OPEN, "timeline": SCRIPTED_OPEN["timeline"][:2]}
    run_case(without_cancel, {"raised": False, "ends_cleanly": False})


def test_a_scripted_stream_has_no_socket_to_drive() -> None:
    given = {**SCRIPTED_OPEN, "timeline": [{"socket": 0, "frame": [status("waiting")]}]}
    with pytest.raises(AssertionError, match="no socket to drive"):
        run_case(given, {})


#: A client tool whose input has a key the case's behaviour does not name.
TOOL_KEYS: dict[str, Any] = {
    "transport": "scripted",
    "config": {
        "organization_id": "org-1",
        "tools": [{"name": "getWeather", "input_schema": {"type": "object"}}],
    },
    "tool_outputs": {"getWeather": {"from_input": ["city", "unit"], "literal": {"tempC": 21}}},
    "calls": [{"call": "generate", "prompt": "weather?"}],
    "stream_batches": [
        [
            status("running"),
            status("requires_action"),
            {
                "type": "action_required",
                "chat_id": CHAT,
                "action_required": {
                    "tool_calls": [
                        {
                            "tool_call_id": "tc1",
                            "tool_name": "getWeather",
                            "args": '{"city": "Paris", "country": "FR"}',
                        }
                    ]
                },
            },
        ],
        [status("running"), message(3, [{"type": "text", "text": "Mild."}]), status("waiting")],
    ],
}


def test_a_tool_returns_exactly_the_keys_its_behaviour_names() -> None:
    """Named keys come from the input (absent when the input lacks them), the others are
    literal; the input's other keys are not returned."""
    result = {"tool_call_id": "tc1", "output": {"city": "Paris", "tempC": 21}}
    run_case(TOOL_KEYS, {"tool_results_bodies": [{"results": [result]}], "step_count": 2})
    echoed = {**result, "output": {"city": "Paris", "country": "FR", "tempC": 21}}
    with pytest.raises(AssertionError):
        run_case(TOOL_KEYS, {"tool_results_bodies": [{"results": [echoed]}]})
