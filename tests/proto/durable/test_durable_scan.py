"""Reading a step out of history: markers, attempts newest-first, pending client calls (G.5),
and what ``generate()`` would have returned (docs/durable-workflows.md: "Recover the result
before resubmitting")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import ChatMessage, ChatMessagesResponse, CoderAgentError, ToolCall
from coder_proto.durable._scan import (
    HistoryScan,
    default_step,
    marked_prompt,
    pending_client_calls,
    recover_structured,
    recover_text,
    step_marker,
)

M = "[wf/s2]"


def msg(mid: int, role: str, *parts: Any) -> ChatMessage:
    content = [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]
    return ChatMessage.from_json(
        {"id": mid, "role": role, "chat_id": "c", "created_at": "", "content": content}
    )


def call(cid: str, name: str, args: Any = None, **extra: Any) -> dict[str, Any]:
    part = {"type": "tool-call", "tool_call_id": cid, "tool_name": name, **extra}
    if args is not None:
        part["args"] = args
    return part


def result(cid: str, name: str, value: Any) -> dict[str, Any]:
    return {"type": "tool-result", "tool_call_id": cid, "tool_name": name, "result": value}


def page(*messages: ChatMessage, more: bool = False) -> ChatMessagesResponse:
    return ChatMessagesResponse(messages=tuple(messages), has_more=more)


def test_markers_are_stable_distinct_and_safe() -> None:
    assert step_marker("wf-1", "step-2") == "[wf-1/step-2]"
    assert step_marker("wf-1", "step-2") not in step_marker("wf-1", "step-20")
    for wf, step in (("w f", "s"), ("w", "s]"), ("[w", "s"), ("", "s")):
        with pytest.raises(CoderAgentError):
            step_marker(wf, step)
    assert default_step("hello") == default_step("hello") != default_step("hello!")
    assert default_step("x").startswith("step-")
    assert marked_prompt(M, "do it") == f"{M} do it"
    with pytest.raises(CoderAgentError, match="prompt"):
        marked_prompt(M, "  ")


def test_attempts_count_the_contiguous_tail_of_marked_prompts() -> None:
    scan = HistoryScan(M)
    scan.add(
        page(
            msg(9, "assistant", "third answer"),
            msg(8, "user", f"{M} retry 2"),
            msg(7, "assistant", "second"),
            msg(6, "user", f"{M} retry"),
            more=True,
        )
    )
    assert not scan.done and scan.next_before_id == 6
    scan.add(page(msg(5, "user", f"{M} first"), msg(3, "user", "[wf/s1] earlier"), more=True))
    assert scan.done and scan.next_before_id is None
    assert scan.attempts == 3 and scan.submitted
    assert scan.newest_message_id == 9
    assert [m.id for m in scan.turn_messages()] == [8, 9]


def test_never_submitted_and_empty_history() -> None:
    empty = HistoryScan(M)
    empty.add(page())
    assert empty.done and not empty.submitted and empty.attempts == 0
    assert empty.newest_message_id is None and empty.turn_messages() == ()
    assert empty.marked_turn() == ()
    other = HistoryScan(M)
    other.add(page(msg(2, "assistant", "x"), msg(1, "user", "[wf/s1] other")))
    assert not other.submitted and other.attempts == 0


def test_a_repeating_server_cannot_make_the_scan_loop() -> None:
    scan = HistoryScan(M)
    scan.add(page(msg(4, "user", f"{M} a"), more=True))
    assert scan.next_before_id == 4
    scan.add(page(msg(4, "user", f"{M} a"), more=True))
    assert scan.done


def test_find_mode_reaches_a_past_step_behind_later_steps() -> None:
    scan = HistoryScan(M, find=True)
    scan.add(page(msg(9, "assistant", "s3 answer"), msg(8, "user", "[wf/s3] later"), more=True))
    assert not scan.done
    scan.add(page(msg(7, "assistant", "s2 answer"), msg(6, "user", f"{M} mine"), more=True))
    assert scan.done
    assert [m.id for m in scan.marked_turn()] == [6, 7]


def test_pending_calls_are_the_last_assistants_unanswered_client_calls() -> None:
    messages = [
        msg(1, "user", f"{M} go"),
        msg(
            2,
            "assistant",
            call("a", "charge", {"n": 1}),
            call("b", "notify"),
            call("s", "web_search", {"q": 1}, provider_executed=True),
            call("x", "server_tool"),
        ),
        msg(3, "tool", result("b", "notify", "ok")),
    ]
    pending = pending_client_calls(messages, {"charge", "notify"})
    assert pending == (
        ToolCall(tool_call_id="a", tool_name="charge", input='{"n":1}', dynamic=True),
    )
    assert pending_client_calls(messages[:1], {"charge"}) == ()


def test_recovered_text_is_the_final_step_after_the_last_client_tool() -> None:
    turn = [
        msg(1, "user", f"{M} go"),
        msg(2, "assistant", "Let me charge. ", call("a", "charge", {})),
        msg(3, "tool", result("a", "charge", "ok")),
        msg(4, "assistant", "Charged. ", call("s", "search", {}, provider_executed=True), "Done."),
    ]
    assert recover_text(turn, {"charge"}) == "Charged. Done."
    assert recover_text(turn, set()) == "Let me charge. Charged. Done."


def _parse(call_part: ToolCall) -> Any:
    value = json.loads(call_part.input)
    if not isinstance(value.get("n"), int):
        raise CoderAgentError("bad")
    return value["n"]


def test_structured_recovery_takes_the_newest_valid_filing() -> None:
    turn = [
        msg(1, "user", f"{M} go"),
        msg(2, "assistant", call("f1", "structured_output", {"n": 1})),
        msg(3, "assistant", call("f2", "structured_output", {"n": "bad"})),
        msg(4, "assistant", call("f3", "structured_output", {"n": 9}, provider_executed=True)),
        msg(5, "assistant", call("f4", "structured_output")),
    ]
    assert recover_structured(turn, "structured_output", _parse) == (True, 1)
    assert recover_structured(turn[:1], "structured_output", _parse) == (False, None)


def test_scan_repr_names_the_marker() -> None:
    assert "[wf/s2]" in repr(HistoryScan(M))


@settings(max_examples=200, deadline=None)
@given(
    turns=st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=12),
    page_size=st.integers(1, 7),
)
def test_attempts_and_submission_do_not_depend_on_paging(
    turns: list[tuple[bool, int]], page_size: int
) -> None:
    """For any history (user prompts with or without the marker, each followed by some
    assistant messages) and any page size, the newest-first scan finds the trailing run of
    marked prompts and whether the newest prompt is the step's, as a full read would."""
    messages: list[ChatMessage] = []
    for marked, replies in turns:
        messages.append(msg(len(messages) + 1, "user", f"{M} x" if marked else "[wf/other] y"))
        for _ in range(replies):
            messages.append(msg(len(messages) + 1, "assistant", "answer"))
    expected = 0
    for marked, _ in reversed(turns):
        if not marked:
            break
        expected += 1
    scan = HistoryScan(M)
    newest_first = list(reversed(messages))
    before: int | None = None
    for _ in range(100):
        older = [m for m in newest_first if before is None or m.id < before]
        chunk = older[:page_size]
        scan.add(page(*chunk, more=len(older) > page_size))
        before = scan.next_before_id
        if before is None:
            break
    assert scan.attempts == expected
    assert scan.submitted == bool(turns and turns[-1][0])
