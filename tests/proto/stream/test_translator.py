"""The turn translator, rule by rule (state machines A.1-A.12, D.3, E, F.4, G.1; D1-D3, D8,
D15, D18, D19)."""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto import (
    CoderChatError,
    CoderProtocolError,
    ErrorPart,
    Finish,
    OutputPart,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
    Usage,
)
from coder_proto._stream.promotion import QueuedSubmission
from coder_proto._stream.translator import TurnTranslator, finish_reason
from coder_proto._wire import ChatError, StreamEvent, parse_event

# -- event builders ------------------------------------------------------------------------------


def delta(text: str = "", kind: str = "text", role: str | None = "assistant") -> StreamEvent:
    payload: dict[str, Any] = {"part": {"type": kind, "text": text}}
    if role is not None:
        payload["role"] = role
    return parse_event({"type": "message_part", "chat_id": "c", "message_part": payload})


def part_delta(part: dict[str, Any], role: str = "assistant") -> StreamEvent:
    return parse_event(
        {"type": "message_part", "chat_id": "c", "message_part": {"role": role, "part": part}}
    )


def T(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def R(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "text": text}


def call(call_id: str, name: str = "web_search", **extra: Any) -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": call_id, "tool_name": name, **extra}


def result(call_id: str, name: str = "web_search", **extra: Any) -> dict[str, Any]:
    return {"type": "tool-result", "tool_call_id": call_id, "tool_name": name, **extra}


def msg(
    msg_id: int,
    *content: dict[str, Any] | str,
    role: str = "assistant",
    usage: dict[str, Any] | None = None,
    **extra: Any,
) -> StreamEvent:
    parts = [T(c) if isinstance(c, str) else c for c in content]
    body: dict[str, Any] = {"id": msg_id, "role": role, "content": parts, **extra}
    if usage is not None:
        body["usage"] = usage
    return parse_event({"type": "message", "chat_id": "c", "message": body})


def status(value: str) -> StreamEvent:
    return parse_event({"type": "status", "chat_id": "c", "status": {"status": value}})


def error(message: str = "boom", **extra: Any) -> StreamEvent:
    return parse_event({"type": "error", "chat_id": "c", "error": {"message": message, **extra}})


def action(*calls: tuple[str, str, str]) -> StreamEvent:
    return parse_event(
        {
            "type": "action_required",
            "chat_id": "c",
            "action_required": {
                "tool_calls": [{"tool_call_id": i, "tool_name": n, "args": a} for i, n, a in calls]
            },
        }
    )


def queue(*ids: int) -> StreamEvent:
    event: dict[str, Any] = {"type": "queue_update", "chat_id": "c"}
    if ids:
        event["queued_messages"] = [{"id": i, "content": [T("q")]} for i in ids]
    return parse_event(event)


def feed(tr: TurnTranslator, *events: StreamEvent) -> list[OutputPart]:
    out: list[OutputPart] = []
    for event in events:
        out += tr.ingest(event)
    return out


def text_of(parts: list[OutputPart]) -> str:
    return "".join(p.delta for p in parts if isinstance(p, TextDelta))


def reasoning_of(parts: list[OutputPart]) -> str:
    return "".join(p.delta for p in parts if isinstance(p, ReasoningDelta))


def only(parts: list[OutputPart], kind: type[Any]) -> list[Any]:
    return [p for p in parts if isinstance(p, kind)]


def the_finish(parts: list[OutputPart]) -> Finish:
    finishes: list[Finish] = only(parts, Finish)
    assert len(finishes) == 1
    return finishes[0]


def tr10(**kwargs: Any) -> TurnTranslator:
    """A translator with the worked examples' cursor (A.12)."""
    return TurnTranslator(turn_cursor=10, **kwargs)


# -- A.12 worked examples ------------------------------------------------------------------------


def test_a12_1_trailing_snapshot_after_deltas_is_a_no_op() -> None:
    tr = tr10()
    parts = feed(tr, delta("Hel"), delta("lo"), msg(11, "Hello"))
    assert parts == [TextStart("text-1"), TextDelta("text-1", "Hel"), TextDelta("text-1", "lo")]


def test_a12_2_snapshot_only() -> None:
    assert feed(tr10(), msg(11, "Hello")) == [TextStart("text-1"), TextDelta("text-1", "Hello")]


def test_a12_3_j4_committed_during_a_redial_emits_exactly_the_tail_in_the_open_block() -> None:
    tr = tr10()
    feed(tr, delta("Hel"))
    assert feed(tr, msg(11, "Hello world")) == [TextDelta("text-1", "lo world")]


def test_a12_4_j5_appended_revision_of_an_earlier_message_is_bracketed() -> None:
    tr = tr10()
    feed(tr, msg(11, "Hello"), msg(12, "Next"))
    assert feed(tr, msg(11, "Hello!!")) == [
        TextEnd("text-2"),
        TextStart("text-3"),
        TextDelta("text-3", "!!"),
        TextEnd("text-3"),
    ]


def test_a12_5_j5_rewrite_of_an_earlier_message_is_suppressed_and_ledger_unchanged() -> None:
    tr = tr10()
    feed(tr, msg(11, "Hello"), msg(12, "Next"))
    assert feed(tr, msg(11, "Howdy")) == []
    # The ledger still says "Hello": its extension is emitted, nothing of "Howdy".
    assert text_of(feed(tr, msg(11, "Hello?"))) == "?"


def test_a12_6_ownership_race_defers_the_revision_until_the_next_step_commits() -> None:
    tr = tr10()
    feed(tr, msg(11, "Hello"), delta("Wor"))
    assert feed(tr, msg(11, "Hello!!")) == []  # branch D
    parts = feed(tr, msg(12, "World"))
    assert [p.delta for p in only(parts, TextDelta)] == ["ld", "!!"]
    # The suffix sits in a block of its own.
    assert parts == [
        TextDelta("text-1", "ld"),
        TextEnd("text-1"),
        TextStart("text-2"),
        TextDelta("text-2", "!!"),
        TextEnd("text-2"),
    ]


def test_a12_7_announce_style_empty_snapshot_is_not_substantive() -> None:
    tr = tr10()
    assert feed(tr, msg(12)) == []
    parts = feed(tr, delta("Hi"), msg(12, "Hi"))
    assert text_of(parts) == "Hi"
    assert feed(tr, status("waiting")) == []
    assert text_of(tr.finish()) == ""


def test_a12_8_interleaving_recovery_keeps_wire_order() -> None:
    parts = feed(tr10(), msg(11, R("R1"), T("T1"), R("R2")))
    assert parts == [
        ReasoningStart("reasoning-1"),
        ReasoningDelta("reasoning-1", "R1"),
        ReasoningEnd("reasoning-1"),
        TextStart("text-2"),
        TextDelta("text-2", "T1"),
        TextEnd("text-2"),
        ReasoningStart("reasoning-3"),
        ReasoningDelta("reasoning-3", "R2"),
    ]


# -- A.2 block discipline ------------------------------------------------------------------------


def test_a2_opening_one_kind_closes_the_other_and_ids_share_one_counter() -> None:
    parts = feed(tr10(), delta("a", "reasoning"), delta("b"), delta("c", "reasoning"))
    assert parts == [
        ReasoningStart("reasoning-1"),
        ReasoningDelta("reasoning-1", "a"),
        ReasoningEnd("reasoning-1"),
        TextStart("text-2"),
        TextDelta("text-2", "b"),
        TextEnd("text-2"),
        ReasoningStart("reasoning-3"),
        ReasoningDelta("reasoning-3", "c"),
    ]


def test_a2_an_error_event_does_not_close_blocks() -> None:
    tr = tr10()
    parts = feed(tr, delta("a"), error(), delta("b"))
    assert [type(p) for p in parts] == [TextStart, TextDelta, ErrorPart, TextDelta]


def test_a2_a_tool_call_delta_closes_blocks_for_client_and_server_tools() -> None:
    tr = tr10(dynamic_tool_names={"mine"})
    parts = feed(tr, delta("a"), part_delta(call("x", "mine", args={})))
    assert parts[-1] == TextEnd("text-1")
    parts = feed(tr, delta("r", "reasoning"), part_delta(call("s", args_delta='{"q"')))
    assert parts[-1] == ReasoningEnd("reasoning-2")


def test_a2_finish_closes_the_open_block_before_the_finish_part() -> None:
    tr = tr10()
    feed(tr, delta("a", "reasoning"))
    parts = tr.finish()
    assert parts[0] == ReasoningEnd("reasoning-1")
    assert isinstance(parts[1], Finish)


# -- A.3 deltas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["user", "system", None, "robot"])
def test_a3_deltas_of_other_roles_or_no_role_are_ignored(role: str | None) -> None:
    tr = tr10()
    assert feed(tr, delta("x", role=role), delta("y", "reasoning", role=role)) == []
    # Nothing was pending: a snapshot emits its full text.
    assert text_of(feed(tr, msg(11, "Hello"))) == "Hello"


def test_a3_consecutive_deltas_of_one_kind_share_the_open_block() -> None:
    parts = feed(tr10(), delta("a", "reasoning"), delta("b", "reasoning"), delta("", "reasoning"))
    assert parts == [
        ReasoningStart("reasoning-1"),
        ReasoningDelta("reasoning-1", "a"),
        ReasoningDelta("reasoning-1", "b"),
    ]


def test_a3_tool_role_deltas_count() -> None:
    assert text_of(feed(tr10(), delta("x", role="tool"))) == "x"


def test_a3_an_empty_delta_opens_a_block() -> None:
    tr = tr10()
    assert feed(tr, delta("")) == [TextStart("text-1")]
    assert feed(tr, delta("")) == []
    assert feed(tr, delta("", "reasoning")) == [TextEnd("text-1"), ReasoningStart("reasoning-2")]


def test_a3_a_streamed_server_call_without_args_waits_for_the_snapshot_d19() -> None:
    tr = tr10()
    assert feed(tr, part_delta(call("s1", args_delta='{"q":'))) == []
    parts = feed(tr, msg(11, call("s1", args={"q": "x"})))
    assert only(parts, ToolCall) == [
        ToolCall(
            tool_call_id="s1",
            tool_name="web_search",
            input='{"q":"x"}',
            provider_executed=True,
            dynamic=True,
        )
    ]


def test_a3_d19_a_delta_that_carries_args_emits_the_call_once() -> None:
    tr = tr10()
    parts = feed(tr, part_delta(call("s1", args={"q": 1})))
    assert parts == [
        ToolInputStart(
            tool_call_id="s1", tool_name="web_search", provider_executed=True, dynamic=True
        ),
        ToolInputEnd(tool_call_id="s1"),
        ToolCall(
            tool_call_id="s1",
            tool_name="web_search",
            input='{"q":1}',
            provider_executed=True,
            dynamic=True,
        ),
    ]
    assert only(feed(tr, msg(11, call("s1", args={"q": 1}))), ToolCall) == []


def test_a3_tool_result_and_source_deltas_are_emitted() -> None:
    tr = tr10()
    feed(tr, part_delta(call("s1", args={})))
    parts = feed(
        tr,
        part_delta(result("s1", result={"ok": True}), role="tool"),
        part_delta({"type": "source", "url": "https://a.example"}),
    )
    assert parts == [
        ToolResult(tool_call_id="s1", tool_name="web_search", result={"ok": True}),
        Source(id="https://a.example", url="https://a.example"),
    ]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "file", "file_id": "f", "media_type": "image/png"},
        {"type": "file-reference", "file_name": "a.py"},
        {"type": "context-file", "context_file_path": "AGENTS.md"},
        {"type": "skill", "skill_name": "s"},
        {"type": "hook-notice", "text": "notice"},
        {"type": "brand-new-kind", "x": 1},
    ],
)
def test_a3_a9_other_part_types_are_ignored(part: dict[str, Any]) -> None:
    tr = tr10()
    assert feed(tr, delta("a"), part_delta(part)) == [TextStart("text-1"), TextDelta("text-1", "a")]
    assert only(feed(tr, msg(11, "a", part)), TextDelta) == []


# -- A.4 snapshots -------------------------------------------------------------------------------


def test_a4_j9_messages_at_or_below_the_cursor_contribute_nothing_but_their_id() -> None:
    tr = tr10()
    parts = feed(
        tr,
        msg(
            9, "old", call("s0", args={}), {"type": "source", "url": "u"}, usage={"input_tokens": 5}
        ),
        msg(10, result("s0", result={}), role="tool"),
    )
    assert parts == []
    assert tr.max_message_id == 10
    assert tr.usage.raw() is None
    feed(tr, msg(8, "older"))
    assert tr.max_message_id == 10


def test_a4_max_message_id_counts_every_role() -> None:
    tr = tr10()
    feed(tr, msg(11, "a"), msg(14, role="system"), msg(12, role="tool"))
    assert tr.max_message_id == 14


def test_a4_f4_usage_is_read_from_assistant_messages_only_and_replaced_by_id() -> None:
    tr = tr10()
    feed(
        tr,
        msg(11, "a", usage={"input_tokens": 10}),
        msg(12, role="tool", usage={"input_tokens": 1000}),
        msg(11, "a", usage={"input_tokens": 12}),
        msg(11, "a"),  # a later snapshot without usage keeps the recorded one
    )
    assert tr.usage.raw() == {"input_tokens": 12}


def test_a4_f4_suppressed_and_deferred_snapshots_still_record_usage() -> None:
    tr = tr10()
    feed(tr, msg(11, "Hello"), msg(12, "Next"))
    feed(tr, msg(11, "Howdy", usage={"output_tokens": 1}))  # a suppressed rewrite
    feed(tr, delta("x"), msg(12, "Nextx?", usage={"output_tokens": 2}))  # deferred (D)
    assert tr.usage.raw() == {"output_tokens": 3}


def test_a4_a1_a_new_message_without_outstanding_deltas_is_a_block_boundary() -> None:
    parts = feed(tr10(), msg(11, "A"), msg(12, "B"))
    assert parts == [
        TextStart("text-1"),
        TextDelta("text-1", "A"),
        TextEnd("text-1"),
        TextStart("text-2"),
        TextDelta("text-2", "B"),
    ]


def test_a4_a1_outstanding_deltas_keep_their_block_for_the_next_message() -> None:
    # translate-17: the open block becomes the next message's block.
    parts = feed(tr10(), msg(11, "First"), delta("Sec"), msg(12, "Second"))
    assert [p for p in parts if isinstance(p, TextStart | TextEnd)] == [TextStart("text-1")]
    assert text_of(parts) == "FirstSecond"


def test_a4_a5_text_and_reasoning_reconcile_independently() -> None:
    tr = tr10()
    feed(tr, delta("Th", "reasoning"), delta("He"))
    parts = feed(tr, msg(11, R("Thinking"), T("Xyz")))
    # Reasoning extends its pending deltas; text was rewritten and emits nothing.
    assert reasoning_of(parts) == "inking"
    assert text_of(parts) == ""


def test_a4_a8_pending_deltas_are_settled_even_when_reconciliation_fails() -> None:
    # translate-29: the rewritten commit still owns its deltas, so "Next" is clean.
    tr = tr10()
    feed(tr, delta("Hello"), msg(11, "Hi"))
    assert text_of(feed(tr, msg(12, "Next"))) == "Next"


def test_k3_a_failed_kind_records_what_was_emitted_so_nothing_is_re_emitted() -> None:
    # K.3 fixed (tests/conformance/DEVIATIONS.md): deltas "Hel", rewrite "Howdy", then
    # "Howdy!" of the same current message emits nothing (the reference re-emits it all).
    tr = tr10()
    feed(tr, delta("Hel"), msg(11, "Howdy"))
    assert text_of(feed(tr, msg(11, "Howdy!"))) == ""
    assert text_of(feed(tr, msg(11, "Hello"))) == "lo"


def test_k3_j2_replaying_a_suppressed_rewrite_commit_emits_nothing() -> None:
    tr = tr10()
    feed(tr, delta("Hello"), msg(11, "Hi"), msg(12, "Next"))
    assert feed(tr, msg(11, "Hi"), msg(12, "Next")) == []


def test_a4_a9_a_tool_only_snapshot_is_substantive_so_its_revision_defers() -> None:
    # translate-28
    tr = tr10()
    feed(tr, msg(11, call("s1", args={})), delta("Result: "))
    assert feed(tr, msg(11, "Result: 42", call("s1", args={}))) == []
    parts = feed(tr, msg(12, "Result: ok"))
    assert [p.delta for p in only(parts, TextDelta)] == ["ok", "Result: 42"]


@pytest.mark.parametrize(
    "content",
    [[], [T(""), R("")]],
)
def test_a4_a9_an_empty_snapshot_is_not_substantive_so_deltas_attribute_to_it(
    content: list[dict[str, Any]],
) -> None:
    tr = tr10()
    feed(tr, msg(11, *content), delta("Hi"))
    parts = feed(tr, msg(11, "Hi there"))
    assert text_of(parts) == " there"


def test_a4_a10_the_drain_runs_deferred_revisions_after_the_attribution() -> None:
    tr = tr10()
    feed(tr, msg(11, "A"), delta("B"), msg(11, "A+"))
    parts = feed(tr, msg(12, "B"))
    assert text_of(parts) == "+"
    # The deferred entry is gone: a later finish flushes nothing.
    assert text_of(tr.finish()) == ""


def test_a4_branch_r_replay_of_an_earlier_message_during_deltas_is_a_no_op() -> None:
    tr = tr10()
    feed(tr, msg(11, "A"), msg(12, "B"), delta("C"))
    assert feed(tr, msg(11, "A")) == []
    assert text_of(feed(tr, msg(13, "CD"))) == "D"


def test_a4_6_user_and_system_messages_at_or_below_the_cursor_have_no_effect() -> None:
    tr = tr10()
    assert feed(tr, msg(9, "x", role="user"), msg(11, "y", role="system")) == []
    assert not tr.settled
    assert text_of(feed(tr, msg(12, "z"))) == "z"


# -- A.5 revisions -------------------------------------------------------------------------------


def test_a5_revision_needs_a_strict_extension() -> None:
    tr = tr10()
    feed(tr, msg(11, "Hello"), msg(12, "B"))
    assert feed(tr, msg(11, "Hello")) == []
    assert feed(tr, msg(11, "Hell")) == []


def test_a5_a_revision_leaves_the_interrupted_steps_pending_text_alone() -> None:
    # translate-26: the suffix gets its own block; the next delta opens a fresh one and the
    # step's pending text still reconciles.
    tr = tr10()
    feed(tr, msg(11, "A"), msg(12, "B"), delta("C1"))
    parts = feed(tr, msg(11, "A amended"))
    assert parts == [
        TextEnd("text-2"),
        TextStart("text-3"),
        TextDelta("text-3", " amended"),
        TextEnd("text-3"),
    ]
    parts = feed(tr, delta("C2"), msg(13, "C1C2C3"))
    assert parts[0] == TextStart("text-4")
    assert text_of(parts) == "C2C3"


def test_a5_multi_kind_revision_emits_suffixes_in_wire_order() -> None:
    tr = tr10()
    feed(tr, msg(11, T("A"), R("R")), msg(12, "S"))
    parts = feed(tr, msg(11, T("AB"), R("RQ")))
    assert [(type(p).__name__, getattr(p, "delta", None)) for p in parts] == [
        ("TextEnd", None),
        ("TextStart", None),
        ("TextDelta", "B"),
        ("TextEnd", None),
        ("ReasoningStart", None),
        ("ReasoningDelta", "Q"),
        ("ReasoningEnd", None),
    ]


def test_a5_only_the_extending_kind_of_a_revision_is_emitted_and_recorded() -> None:
    tr = tr10()
    feed(tr, msg(11, T("A"), R("R")), msg(12, "S"))
    parts = feed(tr, msg(11, T("AB"), R("X")))
    assert (text_of(parts), reasoning_of(parts)) == ("B", "")
    parts = feed(tr, msg(11, T("AB"), R("RR")))
    assert (text_of(parts), reasoning_of(parts)) == ("", "R")


# -- A.6 deferred flush --------------------------------------------------------------------------


def test_a6_finish_flushes_a_deferred_revision_before_closing() -> None:
    # translate-32
    tr = tr10()
    feed(tr, msg(11, "A"), delta("B"), msg(11, "A+"), status("error"))
    parts = tr.finish()
    assert parts[:4] == [
        TextEnd("text-1"),
        TextStart("text-2"),
        TextDelta("text-2", "+"),
        TextEnd("text-2"),
    ]
    assert the_finish(parts).finish_reason == "error"


def test_a6_a_deferred_rewrite_stays_suppressed_at_the_flush() -> None:
    tr = tr10()
    feed(tr, msg(11, "A"), delta("B"), msg(11, "X"))
    assert text_of(tr.finish()) == ""


def test_a6_the_flush_runs_before_an_error_part() -> None:
    tr = tr10()
    feed(tr, msg(11, "A"), delta("B"), msg(11, "A+"))
    parts = feed(tr, error())
    assert text_of(parts) == "+"
    assert isinstance(parts[-1], ErrorPart)


def test_a6_the_flush_runs_before_a_new_client_tool_call() -> None:
    tr = tr10(dynamic_tool_names={"mine"})
    feed(tr, msg(11, "A"), delta("B"), msg(11, "A+"))
    parts = feed(tr, action(("c1", "mine", "{}")))
    assert text_of(parts) == "+"
    assert isinstance(parts[-1], ToolCall)


# -- A.7 tools -----------------------------------------------------------------------------------


def test_a7_server_call_then_result_across_assistant_and_tool_snapshots() -> None:
    tr = tr10()
    parts = feed(
        tr,
        msg(11, call("s1", "read_file", args={"path": "/x"})),
        msg(12, result("s1", "read_file", result={"content": "data"}, is_error=True), role="tool"),
    )
    assert parts == [
        ToolInputStart(
            tool_call_id="s1", tool_name="read_file", provider_executed=True, dynamic=True
        ),
        ToolInputEnd(tool_call_id="s1"),
        ToolCall(
            tool_call_id="s1",
            tool_name="read_file",
            input='{"path":"/x"}',
            provider_executed=True,
            dynamic=True,
        ),
        ToolResult(
            tool_call_id="s1", tool_name="read_file", result={"content": "data"}, is_error=True
        ),
    ]


def test_a7_d18_server_tool_input_is_javascript_json_and_strings_pass_through() -> None:
    tr = tr10()
    parts = feed(
        tr,
        msg(11, call("a", args={"z": 1.0, "é": [2.5, 1e21, None]}), call("b", args='{"raw": 1}')),
        msg(12, call("c", args=None)),
    )
    assert [c.input for c in only(parts, ToolCall)] == [
        '{"z":1,"é":[2.5,1e+21,null]}',
        '{"raw": 1}',
        "null",
    ]


def test_a7_server_calls_need_an_id_and_a_name() -> None:
    parts = feed(tr10(), msg(11, call("", args={}), call("x", "", args={})))
    assert only(parts, ToolCall) == []


def test_a7_orphan_and_duplicate_server_results_are_dropped() -> None:
    # translate-05: a result whose call streamed in an earlier segment.
    tr = tr10()
    assert feed(tr, msg(11, result("s-prev", result={}), role="tool")) == []
    feed(tr, msg(12, call("s1", args={})))
    parts = feed(
        tr,
        msg(13, result("s1", result=None), role="tool"),
        msg(13, result("s1", result={"again": 1}), role="tool"),
        msg(12, call("s1", args={}), result("s1", result={})),
    )
    assert only(parts, ToolResult) == [
        ToolResult(tool_call_id="s1", tool_name="web_search", result={})
    ]


def test_d19_a_result_without_a_result_key_is_not_emitted_until_one_has_it() -> None:
    tr = tr10()
    feed(tr, msg(11, call("s1", args={})))
    assert feed(tr, msg(12, result("s1"), role="tool")) == []
    parts = feed(tr, msg(12, result("s1", result=[1]), role="tool"))
    assert only(parts, ToolResult)[0].result == [1]


def test_a7_results_need_an_id_and_a_name() -> None:
    tr = tr10()
    feed(tr, msg(11, call("s1", args={})))
    parts = feed(tr, msg(12, result("", result={}), result("s1", "", result={}), role="tool"))
    assert parts == []


def test_a7_client_tools_are_ignored_in_deltas_and_snapshots() -> None:
    tr = tr10(dynamic_tool_names=["mine"])
    parts = feed(
        tr,
        part_delta(call("c1", "mine", args={})),
        msg(11, call("c1", "mine", args={})),
        msg(12, result("c1", "mine", result={}), role="tool"),
        part_delta(result("c1", "mine", result={}), role="tool"),
    )
    assert parts == []
    assert not tr.client_tool_call_seen


def test_a7_action_required_emits_new_client_calls_without_server_flags() -> None:
    tr = tr10(dynamic_tool_names={"mine"})
    parts = feed(tr, delta("a"), action(("c1", "mine", '{"x": 1}'), ("c2", "mine", "{}")))
    assert parts[2:] == [
        TextEnd("text-1"),
        ToolInputStart(tool_call_id="c1", tool_name="mine"),
        ToolInputEnd(tool_call_id="c1"),
        ToolCall(tool_call_id="c1", tool_name="mine", input='{"x": 1}'),
        ToolInputStart(tool_call_id="c2", tool_name="mine"),
        ToolInputEnd(tool_call_id="c2"),
        ToolCall(tool_call_id="c2", tool_name="mine", input="{}"),
    ]
    assert tr.client_tool_call_seen
    assert [c.tool_call_id for c in tr.client_tool_calls] == ["c1", "c2"]
    # A replayed action_required emits nothing again.
    assert feed(tr, action(("c1", "mine", "{}"))) == []


def test_a7_submitted_ids_are_read_live_at_every_action_required() -> None:
    submitted: set[str] = {"old"}
    tr = tr10(submitted_tool_call_ids=submitted)
    assert feed(tr, action(("old", "mine", "{}"))) == []
    submitted.add("later")
    assert feed(tr, action(("later", "mine", "{}"))) == []
    assert len(only(feed(tr, action(("new", "mine", "{}"))), ToolCall)) == 1


# -- A.8 sources ---------------------------------------------------------------------------------


def test_a8_source_id_falls_back_to_the_url_and_title_is_kept_when_present() -> None:
    parts = feed(
        tr10(),
        msg(
            11,
            {"type": "source", "url": "https://a"},
            {"type": "source", "url": "https://b", "source_id": "", "title": ""},
            {"type": "source", "url": "https://c", "source_id": "s3", "title": "C"},
        ),
    )
    assert parts == [
        Source(id="https://a", url="https://a"),
        Source(id="https://b", url="https://b", title=""),
        Source(id="s3", url="https://c", title="C"),
    ]


def test_a8_j8_sources_need_a_url_and_are_emitted_once_per_id() -> None:
    tr = tr10()
    parts = feed(
        tr,
        msg(11, {"type": "source", "source_id": "broken"}, {"type": "source", "url": ""}),
        msg(12, {"type": "source", "url": "https://a"}, role="tool"),
        msg(13, {"type": "source", "url": "https://a"}),
        part_delta({"type": "source", "url": "https://other", "source_id": "https://a"}),
    )
    assert parts == [Source(id="https://a", url="https://a")]


# -- A.10 other events ---------------------------------------------------------------------------


def test_a10_each_error_event_emits_an_error_part_and_the_latest_wins() -> None:
    tr = tr10(chat_id="chat-9")
    parts = feed(tr, error("first"), error("second", detail="d", kind="overloaded", retryable=True))
    assert parts == [
        ErrorPart(error=ChatError(message="first"), chat_id="chat-9"),
        ErrorPart(
            error=ChatError(message="second", detail="d", kind="overloaded", retryable=True),
            chat_id="chat-9",
        ),
    ]
    assert tr.error_seen
    assert tr.error == ChatError(message="second", detail="d", kind="overloaded", retryable=True)
    error_part = parts[1]
    assert isinstance(error_part, ErrorPart)
    exc = error_part.exception()
    assert isinstance(exc, CoderChatError)
    assert str(exc) == "second: d"
    assert exc.chat_id == "chat-9"


def test_a10_an_error_event_without_payload_is_ignored() -> None:
    tr = tr10()
    assert feed(tr, parse_event({"type": "error", "chat_id": "c"})) == []
    assert not tr.error_seen


def test_a10_j12_a_non_terminal_status_clears_the_terminal_one() -> None:
    tr = tr10()
    seen = []
    for value in ["requires_action", "running", "waiting", "paused", "completed", "new-thing"]:
        feed(tr, status(value))
        seen.append(tr.terminal_status)
    # D35: ``paused`` is terminal too.
    assert seen == ["requires_action", None, "waiting", "paused", "completed", None]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "retry", "retry": {"attempt": 1, "delay_ms": 1000, "error": "x"}},
        {"type": "queue_update", "queued_messages": [{"id": 1}]},
        {"type": "preview_reset"},
        {"type": "history_reset"},
        {"type": "brand_new_event", "payload": 1},
    ],
)
def test_a10_d15_informational_and_unknown_events_emit_nothing(event: dict[str, Any]) -> None:
    tr = tr10()
    feed(tr, msg(11, "A"), status("waiting"))
    assert tr.ingest(parse_event({**event, "chat_id": "c"})) == []
    assert tr.terminal_status == "waiting"


def test_d15_history_reset_replay_is_absorbed_by_the_cursor_and_the_ledger() -> None:
    tr = tr10()
    feed(tr, msg(11, "A"))
    parts = feed(
        tr,
        parse_event({"type": "history_reset", "chat_id": "c"}),
        msg(3, "ancient", role="user"),
        msg(4, "ancient"),
        msg(11, "A"),
    )
    assert parts == []
    assert not tr.settled


# -- G.1 finish ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error_seen", "terminal", "client_call", "unified"),
    [
        (True, None, False, "error"),
        (True, "waiting", True, "error"),
        (False, "error", True, "error"),
        (False, None, True, "tool-calls"),
        (False, "requires_action", False, "tool-calls"),
        (False, "waiting", True, "tool-calls"),
        (False, "waiting", False, "stop"),
        (False, "completed", False, "stop"),
        (False, None, False, "stop"),
    ],
)
def test_g1_finish_reason_table(
    error_seen: bool, terminal: str | None, client_call: bool, unified: str
) -> None:
    assert (
        finish_reason(
            error_seen=error_seen, terminal_status=terminal, client_tool_call_seen=client_call
        )
        == unified
    )
    tr = tr10(dynamic_tool_names={"mine"})
    if error_seen:
        feed(tr, error())
    if client_call:
        feed(tr, action(("c1", "mine", "{}")))
    if terminal is not None:
        feed(tr, status(terminal))
    assert tr.finish_reason() == unified
    finish = the_finish(tr.finish())
    # A new client call without a status means the chat waits for results (level-triggered
    # statuses, server-behaviour 3.4): the raw reason says so.
    raw = terminal if terminal is not None else ("requires_action" if client_call else None)
    assert (finish.finish_reason, finish.raw_finish_reason) == (unified, raw)
    assert finish.settled_by is None


def test_a11_finish_carries_usage_and_provider_metadata() -> None:
    tr = tr10()
    feed(
        tr,
        msg(11, "a", usage={"input_tokens": 5, "cache_read_tokens": 5, "total_cost_micros": 3}),
        status("waiting"),
    )
    finish = the_finish(tr.finish())
    assert finish.usage.input_tokens == 10
    assert finish.usage.raw == {"input_tokens": 5, "cache_read_tokens": 5, "total_cost_micros": 3}
    assert finish.provider_metadata == {"coder": {"total_cost_micros": 3}}


def test_a11_finish_without_usage_has_empty_usage_and_no_metadata() -> None:
    finish = the_finish(tr10().finish())
    assert finish.usage == Usage()
    assert finish.provider_metadata is None
    assert finish.finish_reason == "stop"


def test_finish_is_emitted_once_and_nothing_is_ingested_afterwards() -> None:
    tr = tr10()
    tr.finish()
    assert tr.finish() == []
    assert feed(tr, delta("late"), msg(11, "late"), status("waiting")) == []


def test_d2_error_payload_is_the_last_error_or_the_servers_default() -> None:
    tr = tr10()
    feed(tr, status("error"))
    assert tr.finish_reason() == "error"
    assert tr.error_payload() == ChatError(
        message="The chat request failed unexpectedly.", kind="generic", retryable=False
    )
    feed(tr, error("quota", kind="usage_limit"))
    assert tr.error_payload() == ChatError(message="quota", kind="usage_limit")


# -- D3 promotion settle -------------------------------------------------------------------------


def test_d3_a_user_message_above_the_cursor_settles_the_turn_as_a_promotion() -> None:
    tr = tr10(dynamic_tool_names={"mine"})
    parts = feed(tr, status("running"), msg(11, "mine", usage={"output_tokens": 1}))
    assert text_of(parts) == "mine"
    assert feed(tr, msg(12, "someone else's prompt", role="user")) == []
    assert tr.settled_by_promotion
    assert tr.settled
    # Nothing of the next run is attributed.
    later = feed(
        tr,
        delta("theirs"),
        msg(13, "theirs", usage={"output_tokens": 99}),
        error(),
        action(("c9", "mine", "{}")),
        status("waiting"),
    )
    assert later == []
    assert tr.max_message_id == 12
    assert tr.terminal_status is None
    assert not tr.error_seen
    parts = tr.finish()
    assert parts[0] == TextEnd("text-1")
    finish = the_finish(parts)
    assert (finish.finish_reason, finish.raw_finish_reason) == ("stop", None)
    assert finish.settled_by == "promotion"
    assert finish.usage.output_tokens == 1


def test_d3_a_promotion_settles_stop_even_after_a_terminal_status() -> None:
    tr = tr10()
    feed(tr, status("requires_action"), msg(11, role="user"))
    assert tr.finish_reason() == "stop"
    assert the_finish(tr.finish()).raw_finish_reason is None


def test_d3_exemption_at_cursor_zero_moves_the_cursor_to_the_turns_own_prompt_once() -> None:
    tr = TurnTranslator()
    parts = feed(tr, msg(1, "hi", role="user"), msg(2, "Hello"))
    assert text_of(parts) == "Hello"
    assert tr.turn_cursor == 1
    assert not tr.settled
    feed(tr, msg(3, "next prompt", role="user"))
    assert tr.settled_by_promotion
    assert tr.turn_cursor == 1


def test_d3_exemption_forgets_usage_at_or_below_the_new_cursor() -> None:
    tr = TurnTranslator(own_prompt_unknown=True, turn_cursor=5)
    feed(tr, msg(6, "concurrent", usage={"input_tokens": 7}), msg(8, role="user"))
    assert tr.turn_cursor == 8
    assert tr.usage.raw() is None
    feed(tr, msg(9, "ours", usage={"input_tokens": 1}))
    assert tr.usage.raw() == {"input_tokens": 1}


def test_d3_own_prompt_known_means_no_exemption_even_at_cursor_zero() -> None:
    tr = TurnTranslator(own_prompt_unknown=False)
    feed(tr, msg(1, role="user"))
    assert tr.settled_by_promotion


def test_d3_system_messages_above_the_cursor_never_settle() -> None:
    tr = tr10()
    feed(tr, msg(11, "x", role="system"))
    assert not tr.settled


def test_d3_a_queued_turn_never_takes_the_exemption() -> None:
    tr = TurnTranslator(queued_submission=QueuedSubmission(None, None))
    feed(tr, msg(1, role="user"))  # anchors the gate
    assert tr.turn_cursor == 1
    feed(tr, msg(2, "a"), msg(3, role="user"))
    assert tr.settled_by_promotion


# -- E via the translator ------------------------------------------------------------------------


def test_e2_j13_while_gated_nothing_is_attributed_but_ids_are_seen() -> None:
    tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(7, [T("q")]))
    assert tr.gated
    parts = feed(
        tr,
        status("running"),
        delta("old tail"),
        msg(41, "old tail", usage={"input_tokens": 999, "total_cost_micros": 999}),
        status("waiting"),
        action(("x", "mine", "{}")),
    )
    assert parts == []
    assert tr.max_message_id == 41
    assert tr.terminal_status is None
    assert tr.usage.raw() is None
    assert tr.turn_cursor == 40
    assert not tr.settled


def test_e2_j13_the_anchoring_queue_update_replays_the_buffer_through_the_normal_path() -> None:
    # promotion-08
    tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(7, [T("q")]))
    assert feed(tr, msg(42, "q", role="user")) == []
    assert feed(tr, msg(43, "Already committed.", usage={"input_tokens": 3})) == []
    parts = tr.ingest(queue())
    assert parts == [TextStart("text-1"), TextDelta("text-1", "Already committed.")]
    assert not tr.gated
    assert tr.turn_cursor == 42
    assert tr.usage.raw() == {"input_tokens": 3}
    # J.14: replays at or below the anchor never contribute.
    assert feed(tr, msg(41, "old", usage={"input_tokens": 5}), msg(42, "q", role="user")) == []
    assert tr.usage.raw() == {"input_tokens": 3}


def test_e4_a_promotion_inside_the_replayed_buffer_settles_the_turn() -> None:
    tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(7, [T("q")]))
    feed(tr, msg(42, "q", role="user"), msg(43, "mine"), msg(44, "theirs", role="user"))
    feed(tr, msg(45, "their answer"))
    parts = tr.ingest(queue())
    assert text_of(parts) == "mine"
    assert tr.settled_by_promotion


def test_e2_dead_end_is_exposed_and_later_events_are_ignored() -> None:
    tr = TurnTranslator(
        turn_cursor=40, queued_submission=QueuedSubmission(7, [T("q")]), chat_id="chat-1"
    )
    assert feed(tr, error("provider down")) == []
    dead = tr.dead_end
    assert dead is not None
    assert dead.kind == "queued_submission_lost"
    assert dead.chat_id == "chat-1"
    assert tr.gated  # E.5: a dead end withdraws
    assert feed(tr, msg(50, "q", role="user"), queue()) == []
    assert tr.max_message_id == 0
    assert not tr.error_seen


def test_d8_a_stamped_promotion_of_our_entry_anchors_through_the_translator() -> None:
    tr = TurnTranslator(turn_cursor=40, queued_submission=QueuedSubmission(7, [T("q")]))
    feed(tr, msg(41, "q", role="user", queued_message_id=6))
    assert tr.gated
    feed(tr, msg(42, "q", role="user", queued_message_id=7))
    assert not tr.gated
    assert tr.turn_cursor == 42
    assert text_of(feed(tr, delta("Fresh"))) == "Fresh"


# -- hot path and robustness ---------------------------------------------------------------------


def test_hot_path_a_very_long_delta_stream_reconciles_with_its_snapshot() -> None:
    tr = tr10()
    chunks = [f"{i % 10}" for i in range(100_000)]
    out: list[OutputPart] = []
    for chunk in chunks:
        out += tr.ingest(delta(chunk))
    full = "".join(chunks)
    assert feed(tr, msg(11, full)) == []
    assert text_of(feed(tr, msg(11, full + "!"))) == "!"
    assert text_of(out) == full


def test_server_tool_args_too_deep_to_serialize_are_a_protocol_error() -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(CoderProtocolError):
        tr10().ingest(part_delta(call("s1", args=deep)))
