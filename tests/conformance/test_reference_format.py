"""Reading a corpus in the reference client's format (``CODER_CONFORMANCE_DIR``).

Every expectation key of the reference format's closed list for session-level cases maps to
one of ours (checked value by value on a synthetic case that uses them all); a key outside the
list fails loudly, naming the key and the file; and the runners really read the directory the
environment variable names. Everything here is written to a temporary directory.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from .convert import ConversionError, convert_case, convert_file
from .corpus import Unreadable, load_family
from .session import OUTCOME_CHECKS, TRAFFIC_CHECKS

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF = "/api/experimental/chats"
OURS = "/api/v2/chats"


def _write(directory: pathlib.Path, case: dict[str, Any]) -> pathlib.Path:
    path = directory / f"{case['id']}.json"
    path.write_text(json.dumps(case), encoding="utf-8")
    return path


def _status(value: str) -> dict[str, Any]:
    return {"type": "status", "chat_id": "chat-1", "status": {"status": value}}


USER_PROMPT = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
TS_USAGE = {
    "inputTokens": 3,
    "noCacheTokens": 3,
    "cacheReadTokens": None,
    "cacheWriteTokens": None,
    "outputTokens": 2,
    "reasoningTokens": None,
    "textTokens": None,
    "totalTokens": 5,
    "raw": {"input_tokens": 3, "output_tokens": 2},
}
OUR_USAGE = {
    "input_tokens": 3,
    "no_cache_tokens": 3,
    "cache_read_tokens": None,
    "cache_write_tokens": None,
    "output_tokens": 2,
    "reasoning_tokens": None,
    "text_tokens": None,
    "total_tokens": 5,
    "raw": {"input_tokens": 3, "output_tokens": 2},
}
TS_FINISH = {
    "type": "finish",
    "finishReason": {"unified": "stop", "raw": "waiting"},
    "usage": TS_USAGE,
    "providerMetadata": None,
}
OUR_FINISH = {
    "type": "finish",
    "finish_reason": "stop",
    "raw_finish_reason": "waiting",
    "usage": OUR_USAGE,
    "provider_metadata": None,
}
TS_SOURCE = {
    "type": "source",
    "sourceType": "url",
    "id": "s1",
    "url": "https://a.test",
    "title": "A",
}
OUR_SOURCE = {"source_type": "url", "id": "s1", "url": "https://a.test", "title": "A"}

#: A turn case in the reference format whose ``expected`` uses every key of the closed list
#: (outcome keys at the top and under a call id, traffic keys, checkpoint keys).
EVERY_KEY_TURN: dict[str, Any] = {
    "id": "turn-90-every-key",
    "kind": "turn",
    "source": {"file": "a test", "test": "a title"},
    "provenance": "test",
    "asserted": ["text"],
    "notes": "prose that is not carried over",
    "input": {
        "transport": "real-reader",
        "config": {"organizationId": "org-1", "requestTimeoutMs": 1500, "chatId": "chat-1"},
        "rest": {
            "GET messages": {"delayMs": 250, "body": {"messages": []}},
            "getMessages(limit=1)": {"messages": []},
            "createChatMessage": {"queued": False},
            f"POST {REF}/chat-1/tool-results": [{"status": 500, "body": {}}, {"hang": True}],
        },
        "calls": [
            {"kind": "doStream", "id": "s1", "prompt": USER_PROMPT, "abortable": True},
            {"kind": "doGenerate", "id": "retry", "prompt": USER_PROMPT, "startsAfter": "one"},
        ],
        "timeline": [
            {"advanceMs": 1500},
            {"ws": 0, "frame": [_status("running")]},
            {"ws": 0, "drop": True, "code": 1006},
            {"ws": 1, "drop": True, "code": 1011},
            {"ws": 2, "error": {"message": "unexpected server response: 401"}},
            {"ws": 3, "error": {"message": "getaddrinfo ENOTFOUND"}},
            {"checkpoint": "one"},
            {"realTimeMs": 20},
            {"abort": True},
        ],
    },
    "expected": {
        "text": "Hello",
        "textContains": "ell",
        "stepCount": 1,
        "toolCallCount": 1,
        "toolCalls": [{"toolCallId": "c1", "toolName": "get", "input": "{}"}],
        "finishReason": {"unified": "stop", "raw": "waiting"},
        "usage": {"outputTokens": 2},
        "providerMetadata": {"coder": {"total_cost_micros": 7}},
        "chatId": "chat-1",
        "contentText": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}],
        "contentSources": [TS_SOURCE],
        "streamedSources": [TS_SOURCE],
        "lastPart": TS_FINISH,
        "partsContainError": False,
        "streamEndsCleanly": True,
        "error": {
            "name": "CoderChatError",
            "kind": "timeout",
            "retryable": True,
            "isRetryable": True,
            "isCoderChatError": True,
            "chatId": "chat-1",
            "status": 504,
            "messageMatches": "time",
            "messagePrefix": "Coder",
        },
        "failed": False,
        "rejects": False,
        "isAPICallError": False,
        "segmentSettle": {
            "error": {"name": "AbortError", "messageMatches": "abort"},
            "status": None,
            "finishReason": None,
        },
        "segments": [
            {"type": "segment:start", "segment": 1},
            {"type": "segment:settle", "segment": 1, "status": "waiting", "finishReason": "stop"},
        ],
        "lastKnownChatId": "chat-1",
        "chatIdAfter": None,
        "s1": {"text": "Hi", "streamEndsCleanly": True},
        "retry": {"error": {"name": "AbortError"}},
        "requests": {f"GET {REF}/chat-1/messages?limit=200": 1, "interrupt": 1},
        "requestsAtCheckpoint": {f"GET {REF}/chat-1/messages?limit=200": 0},
        "createChatRequest": {"system_prompt": "be brief", "unsafe_dynamic_tools_names": ["get"]},
        "createChatRequests": 1,
        "submittedToolResults": [{"results": [{"tool_call_id": "c1", "is_error": False}]}],
        "toolResultsPosts": 1,
        "toolExecutions": [{"city": "Paris"}],
        "interruptRequests": 1,
        "interrupted": ["chat-1"],
        "sockets": 2,
        "dials": 2,
        "wsDials": 2,
        "socketUrls": [f"wss://coder.example{REF}/chat-1/stream?after_id=1"],
        "redialBackoffsMs": [1000, 2500],
        "wsCloses": 1,
        "wsCloseEvents": 1,
        "wsErrorEvents": [{"attempt": 1, "message": "unexpected server response: 401"}],
        "socket0Closed": True,
        "socket0ClosedAtEnd": True,
        "socket0ClosedByClient": True,
        "atCheckpoint": {"toolExecutions": [], "toolResultsPosts": 0, "sockets": 1},
        "anchoredTurnCursor": 42,
        "clientOps": ["getMessages(chat-1, limit=1)", "streamEvents(chat-1, afterId=40)"],
        "deletedQueueEntries": [["chat-1", 7]],
        "parts": [{"type": "text-start", "id": "text-1"}, TS_FINISH],
        "partsBeforeError": [{"type": "stream-start", "warnings": []}],
        "getMessagesCalls": 2,
        "lastSeenMessageIdAfter": 43,
        "deadEnd": {"kind": "queued_submission_lost", "retryable": False, "messageMatches": "q"},
    },
}

#: The same case in our format.
EVERY_KEY_TURN_OURS: dict[str, Any] = {
    "family": "turn",
    "name": "90-every-key",
    "given": {
        "transport": "websocket",
        "config": {"organization_id": "org-1", "chat_id": "chat-1", "request_timeout": 1.5},
        "rest": {
            f"GET {OURS}/chat-1/messages": {"status": 200, "body": {"messages": []}, "delay": 0.25},
            f"GET {OURS}/chat-1/messages?limit=1": {"status": 200, "body": {"messages": []}},
            f"POST {OURS}/chat-1/messages": {"status": 200, "body": {"queued": False}},
            f"POST {OURS}/chat-1/tool-results": [{"status": 500, "body": {}}, {"hang": True}],
        },
        "calls": [
            {"id": "s1", "call": "segment", "mode": "stream", "prompt": USER_PROMPT},
            {
                "id": "retry",
                "call": "segment",
                "mode": "generate",
                "prompt": USER_PROMPT,
                "starts_after": "one",
            },
        ],
        "timeline": [
            {"advance": 1.5},
            {"socket": 0, "frame": [_status("running")]},
            {"socket": 0, "drop": True},
            {"socket": 1, "close": 1011},
            {"socket": 2, "reject": 401},
            {"socket": 3, "fail": "getaddrinfo ENOTFOUND"},
            {"checkpoint": "one"},
            {"advance": 0.02},
            {"cancel": True},
        ],
    },
    "expect": {
        "text": "Hello",
        "text_contains": "ell",
        "step_count": 1,
        "tool_call_count": 1,
        "tool_calls": [{"tool_call_id": "c1", "tool_name": "get", "input": "{}"}],
        "finish_reason": "stop",
        "raw_finish_reason": "waiting",
        "usage": {"output_tokens": 2},
        "provider_metadata": {"coder": {"total_cost_micros": 7}},
        "chat_id": "chat-1",
        "content_text": ["Hel", "lo"],
        "content_sources": [OUR_SOURCE],
        "streamed_sources": [OUR_SOURCE],
        "last_part": OUR_FINISH,
        "emits_error_part": False,
        "ends_cleanly": True,
        "error": {
            "type": "CoderChatError",
            "kind": "timeout",
            "chat_id": "chat-1",
            "status": 504,
            "message_matches": "time",
            "message_prefix": "Coder",
            "retryable": True,
            "isinstance": {"CoderChatError": True, "CoderStreamError": False},
        },
        "raised": False,
        "segment_settle": {
            "status": None,
            "finish_reason": None,
            "error": {"name": "CallerCancelled", "message_matches": "abort"},
        },
        "segment_events": [
            {"type": "segment:start", "segment": 1},
            {"type": "segment:settle", "segment": 1, "status": "waiting", "finish_reason": "stop"},
        ],
        "last_known_chat_id": "chat-1",
        "chat_id_after": None,
        "calls": {
            "s1": {"text": "Hi", "ends_cleanly": True},
            "retry": {"error": {"type": "CallerCancelled"}},
        },
        "requests": {f"GET {OURS}/chat-1/messages?limit=200": 1},
        "interrupt_requests": 1,
        "at_checkpoint": {
            "requests": {f"GET {OURS}/chat-1/messages?limit=200": 0},
            "tool_inputs": [],
            "tool_results_posts": 0,
            "dials": 1,
        },
        "create_chat_body": {
            "system_prompt": "be brief",
            "unsafe_dynamic_tools": [{"name": "get"}],
        },
        "create_chat_requests": 1,
        "tool_results_bodies": [{"results": [{"tool_call_id": "c1", "is_error": False}]}],
        "tool_results_posts": 1,
        "tool_inputs": [{"city": "Paris"}],
        "interrupted_chats": ["chat-1"],
        "dials": 2,
        "ws_dial_events": 2,
        "socket_paths": [f"{OURS}/chat-1/stream?after_id=1"],
        "redial_backoffs": [1.0, 2.5],
        "ws_close_events": 1,
        "ws_error_events": [{"attempt": 1, "message": "unexpected server response: 401"}],
        "first_socket_closed_at_end": True,
        "first_socket_closed_by_client": True,
        "anchored_turn_cursor": 42,
        "client_ops": ["get_messages(chat-1, limit=1)", "stream_events(chat-1, after_id=40)"],
        "deleted_queue_entries": [["chat-1", 7]],
        "parts": [{"type": "text-start", "id": "text-1"}, OUR_FINISH],
        "parts_before_error": [{"type": "stream-start", "warnings": []}],
        "get_messages_calls": 2,
        "last_seen_message_id_after": 43,
        "dead_end": {
            "kind": "queued_submission_lost",
            "retryable": False,
            "message_matches": "q",
        },
    },
}

#: A translator-level promotion case with the keys that only apply at that level.
TRANSLATOR_PROMOTION: dict[str, Any] = {
    "id": "promotion-90-translator-keys",
    "kind": "promotion",
    "input": {
        "level": "translator",
        "procedure": "ingest-each-then-finish",
        "options": {
            "dynamicToolNames": [],
            "turnCursor": 40,
            "submittedToolCallIds": [],
            "queuedSubmission": {"id": 7, "content": [{"type": "text", "text": "hi"}]},
        },
        "events": [_status("waiting"), {"drop": True, "code": 1006}],
    },
    "expected": {
        "perEvent": [[{"type": "tool-call", "toolCallId": "c1", "toolName": "get", "input": "{}"}]],
        "finish": [TS_FINISH],
        "anchoredTurnCursor": 42,
    },
}


def test_every_session_key_of_the_reference_format_maps_to_ours(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, EVERY_KEY_TURN)
    (case,) = load_family("turn", tmp_path)
    assert not isinstance(case, Unreadable), case
    converted = {"family": case.family, "name": case.name, "given": case.given}
    converted["expect"] = case.expect
    assert converted == EVERY_KEY_TURN_OURS


def test_every_converted_session_key_has_a_check() -> None:
    expect = EVERY_KEY_TURN_OURS["expect"]
    keys = set(expect) - {"calls", "at_checkpoint"}
    keys |= {k for call in expect["calls"].values() for k in call}
    assert keys <= set(OUTCOME_CHECKS) | set(TRAFFIC_CHECKS)
    assert set(expect["at_checkpoint"]) <= set(TRAFFIC_CHECKS)


def test_translator_level_promotion_keys_map_to_ours() -> None:
    converted = convert_case(TRANSLATOR_PROMOTION, source="promotion-90.json")
    assert converted["given"] == {
        "level": "translator",
        "procedure": "ingest_each_then_finish",
        "translator": {
            "dynamic_tool_names": [],
            "turn_cursor": 40,
            "submitted_tool_call_ids": [],
            "queued_submission": {"id": 7, "content": [{"type": "text", "text": "hi"}]},
        },
        "events": [_status("waiting"), {"drop": True}],
    }
    assert converted["expect"] == {
        "per_event": [
            [
                {
                    "type": "tool-call",
                    "tool_call_id": "c1",
                    "tool_name": "get",
                    "input": "{}",
                    "provider_executed": False,
                    "dynamic": False,
                }
            ]
        ],
        "finish": [OUR_FINISH],
        "anchored_turn_cursor": 42,
    }


def test_a_finish_reason_may_be_the_unified_string_alone() -> None:
    case = _with(EVERY_KEY_TURN, ("expected",), "finishReason", "tool-calls")
    case["expected"]["lastPart"] = {**TS_FINISH, "finishReason": "stop"}
    expect = convert_case(case, source="x.json")["expect"]
    assert expect["finish_reason"] == "tool-calls" and "raw_finish_reason" not in expect
    assert expect["last_part"]["finish_reason"] == "stop"
    assert "raw_finish_reason" not in expect["last_part"]


def test_a_last_part_states_only_the_keys_it_gives() -> None:
    """``lastPart`` is matched as a subset: the flags a whole trace's part gets when the
    reference leaves them out are not added to it."""
    part = {"type": "tool-call", "toolCallId": "c1", "toolName": "get"}
    case = _with(EVERY_KEY_TURN, ("expected",), "lastPart", part)
    case["expected"]["parts"] = [part]
    expect = convert_case(case, source="x.json")["expect"]
    assert expect["last_part"] == {"type": "tool-call", "tool_call_id": "c1", "tool_name": "get"}
    assert expect["parts"] == [
        {
            "type": "tool-call",
            "tool_call_id": "c1",
            "tool_name": "get",
            "provider_executed": False,
            "dynamic": False,
        }
    ]


def _tool_case(execute: str, schema: dict[str, str] | None = None) -> dict[str, Any]:
    case = json.loads(json.dumps(EVERY_KEY_TURN))
    spec: dict[str, Any] = {"execute": execute}
    if schema is not None:
        spec["inputSchema"] = schema
    case["input"]["config"]["tools"] = {"getWeather": spec}
    return case


@pytest.mark.parametrize(
    ("execute", "schema", "behaviour"),
    [
        (
            "returns {city, tempC: 21}",
            {"city": "string"},
            {"from_input": ["city"], "literal": {"tempC": 21}},
        ),
        # The tool accepts any input: a bare key names the input's key, declared or not.
        ("returns {city, unit}", None, {"from_input": ["city", "unit"]}),
        ('returns {ok: true, note: "x"}', None, {"literal": {"ok": True, "note": "x"}}),
    ],
)
def test_a_tool_described_in_prose_returns_exactly_the_keys_named(
    execute: str, schema: dict[str, str] | None, behaviour: dict[str, Any]
) -> None:
    given = convert_case(_tool_case(execute, schema), source="x.json")["given"]
    assert given["tool_outputs"] == {"getWeather": behaviour}


@pytest.mark.parametrize(
    ("execute", "problem"),
    [
        ("echoes its input", "unknown tool behaviour"),
        ("returns {city, tempC: warm}", "not a JSON literal"),
        ("returns {city name}", "not a key"),
    ],
)
def test_a_tool_prose_that_cannot_be_read_is_refused(execute: str, problem: str) -> None:
    with pytest.raises(ConversionError, match=problem):
        convert_case(_tool_case(execute), source="x.json")


def test_a_scripted_client_takes_a_timeline_too() -> None:
    case = json.loads(json.dumps(EVERY_KEY_TURN))
    case["input"]["transport"] = "scripted-client"
    case["input"]["streamBatches"] = [[_status("running")]]
    case["input"]["timeline"] = [{"advanceMs": 500}, {"checkpoint": "one"}, {"abort": True}]
    given = convert_case(case, source="x.json")["given"]
    assert given["transport"] == "scripted"
    assert given["timeline"] == [{"advance": 0.5}, {"checkpoint": "one"}, {"cancel": True}]


#: A prefix case whose error results state the request path they belong to.
PREFIX_PATHS: dict[str, Any] = {
    "id": "prefix-90-error-paths",
    "kind": "prefix",
    "input": {
        "calls": [{"op": "getChat", "chatId": "c1"}, {"op": "getChat", "chatId": "c2"}],
        "responses": {
            "GET /api/v2/chats/c1": [404],
            f"GET {REF}/c1": [404],
            "GET /api/v2/chats/c2": ["network-error"],
        },
    },
    "expected": {
        "requests": ["GET /api/v2/chats/c1", f"GET {REF}/c1", "GET /api/v2/chats/c2"],
        "results": [
            {"error": {"name": "CoderApiError", "status": 404, "path": "/api/v2/chats/c1"}},
            {"error": {"kind": "network", "path": "/api/v2/chats/c2"}},
        ],
    },
}


def test_a_prefix_error_states_the_path_it_belongs_to() -> None:
    """Paths of prefix cases are literal (the prefix is what they are about)."""
    expect = convert_case(PREFIX_PATHS, source="x.json")["expect"]
    assert expect["results"] == [
        {"error": {"type": "CoderApiError", "status": 404, "path": "/api/v2/chats/c1"}},
        {"error": {"type": "CoderNetworkError", "path": "/api/v2/chats/c2"}},
    ]


def _with(case: dict[str, Any], path: tuple[str, ...], key: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(case))
    node = out
    for step in path:
        node = node[step]
    node[key] = value
    return out


@pytest.mark.parametrize(
    ("path", "key", "where"),
    [
        (("expected",), "fooBar", "case.expected.fooBar"),
        (("expected", "error"), "severity", "case.expected.error.severity"),
        (("expected", "s1"), "fooBar", "case.expected.s1.fooBar"),
        (("expected", "atCheckpoint"), "fooBar", "case.expected.atCheckpoint.fooBar"),
        (("input",), "fooBar", "case.input.fooBar"),
        (("input", "config"), "fooBar", "case.input.config.fooBar"),
        (("input", "calls", 0), "fooBar", "case.input.calls[0].fooBar"),  # type: ignore[arg-type]
        (("input", "timeline", 1), "fooBar", "case.input.timeline[1].fooBar"),  # type: ignore[arg-type]
        ((), "fooBar", "case.fooBar"),
    ],
)
def test_an_unknown_key_names_the_key_and_the_file(
    tmp_path: pathlib.Path, path: tuple[Any, ...], key: str, where: str
) -> None:
    file = _write(tmp_path, _with(EVERY_KEY_TURN, path, key, 1))
    with pytest.raises(ConversionError) as info:
        convert_file(file)
    assert info.value.where == where
    assert str(file) in str(info.value) and key in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("perEvent", [], "translator-level"),
        ("s7", {"text": "x"}, "names no call"),
        ("sockets", 3, "contradicts"),  # "dials" says 2
    ],
)
def test_keys_that_cannot_apply_are_refused(key: str, value: Any, problem: str) -> None:
    case = _with(EVERY_KEY_TURN, ("expected",), key, value)
    with pytest.raises(ConversionError, match=problem):
        convert_case(case, source="x.json")


def test_a_retry_key_must_name_a_call() -> None:
    case = _with(EVERY_KEY_TURN, ("expected",), "retry", {"text": "x"})
    case["input"]["calls"][1]["id"] = "second"
    with pytest.raises(ConversionError, match="retry: names no call"):
        convert_case(case, source="x.json")


def test_unreadable_files_fail_their_own_test_only(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, EVERY_KEY_TURN)
    _write(tmp_path, {**_with(EVERY_KEY_TURN, ("expected",), "fooBar", 1), "id": "turn-91-bad"})
    good, bad = load_family("turn", tmp_path)
    assert good.name == "90-every-key"
    assert isinstance(bad, Unreadable)
    with pytest.raises(ConversionError, match=re.escape("turn-91-bad.json: case.expected.fooBar")):
        bad.load()


# -- the environment variable, end to end ---------------------------------------------------

SNAPSHOT_ONLY: dict[str, Any] = {
    "id": "translate-90-snapshot-only",
    "kind": "translate",
    "input": {
        "procedure": "run",
        "options": {"dynamicToolNames": [], "turnCursor": 1, "submittedToolCallIds": []},
        "events": [
            _status("running"),
            {
                "type": "message",
                "chat_id": "chat-1",
                "message": {
                    "id": 2,
                    "chat_id": "chat-1",
                    "role": "assistant",
                    "created_at": "",
                    "content": [{"type": "text", "text": "Hi there"}],
                },
            },
            _status("waiting"),
        ],
    },
    "expected": {
        "parts": [
            {"type": "text-start", "id": "text-1"},
            {"type": "text-delta", "id": "text-1", "delta": "Hi there"},
            {"type": "text-end", "id": "text-1"},
            {
                "type": "finish",
                "finishReason": {"unified": "stop", "raw": "waiting"},
                "usage": {"raw": None},
                "providerMetadata": None,
            },
        ],
        "textBlocks": ["Hi there"],
        "toolCallCount": 0,
    },
}


def _pytest(directory: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CODER_CONFORMANCE_DIR": str(directory)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--no-cov",
            "tests/conformance/test_translate.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


def test_the_runners_read_the_directory_the_variable_names(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, SNAPSHOT_ONLY)
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout
    # A wrong expectation in that directory fails (the cases are really the ones run).
    wrong = _with(SNAPSHOT_ONLY, ("expected",), "textBlocks", ["Hi"])
    _write(tmp_path, wrong)
    proc = _pytest(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "translate-90-snapshot-only" in proc.stdout


def test_an_unknown_key_in_the_directory_fails_the_run_loudly(tmp_path: pathlib.Path) -> None:
    _write(tmp_path, SNAPSHOT_ONLY)
    broken = _with({**SNAPSHOT_ONLY, "id": "translate-91-broken"}, ("expected",), "glyphs", 3)
    path = _write(tmp_path, broken)
    proc = _pytest(tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 failed, 1 passed" in proc.stdout
    assert f"{path}: case.expected.glyphs: unknown key" in proc.stdout
