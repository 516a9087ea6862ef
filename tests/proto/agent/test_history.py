"""History -> UI messages (state machines I)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import (
    UIDynamicToolPart,
    UIFilePart,
    UIMessage,
    UIReasoningPart,
    UISourceUrlPart,
    UITextPart,
)
from coder_proto._agent.history import to_ui_messages
from coder_proto._wire import ChatMessage, FilePart


def msg(id: int, role: str, *content: dict[str, Any]) -> ChatMessage:
    return ChatMessage.from_json(
        {"id": id, "chat_id": "c", "role": role, "created_at": "", "content": list(content)}
    )


def call(id: str, name: str = "run", **extra: Any) -> dict[str, Any]:
    return {"type": "tool-call", "tool_call_id": id, "tool_name": name, "args": {"a": 1}, **extra}


def result(id: str, value: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool-result", "tool_call_id": id, "tool_name": "run", "result": value, **extra}


def only_part(messages: list[UIMessage]) -> Any:
    assert len(messages) == 1
    assert len(messages[0].parts) == 1
    return messages[0].parts[0]


def test_I_1_messages_are_sorted_by_id() -> None:
    ui = to_ui_messages([msg(9, "assistant"), msg(2, "user"), msg(5, "assistant")])
    assert [m.id for m in ui] == ["2", "5", "9"]


def test_I_3_tool_role_messages_are_skipped_but_system_and_user_kept() -> None:
    ui = to_ui_messages(
        [
            msg(1, "system", {"type": "text", "text": "s"}),
            msg(2, "user", {"type": "text", "text": "u"}),
            msg(3, "tool", result("x")),
        ]
    )
    assert [(m.id, m.role) for m in ui] == [("1", "system"), ("2", "user")]


def test_I_4_text_and_reasoning_are_done_and_empty_texts_kept() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "assistant",
                {"type": "reasoning", "text": "think"},
                {"type": "text", "text": ""},
                {"type": "text"},
            )
        ]
    )
    assert ui[0].parts == (UIReasoningPart("think"), UITextPart(""), UITextPart(""))
    assert ui[0].parts[1].state == "done"


def test_I_4_a_call_without_result_is_input_available() -> None:
    part = only_part(to_ui_messages([msg(1, "assistant", call("t1"))]))
    assert part == UIDynamicToolPart(
        tool_name="run", tool_call_id="t1", state="input-available", input={"a": 1}
    )
    assert part.provider_executed is None


def test_I_2_the_first_result_wins_across_tool_messages_and_inline_results() -> None:
    ui = to_ui_messages(
        [
            msg(4, "tool", result("t1", "second")),
            msg(1, "assistant", call("t1")),
            msg(3, "tool", result("t1", "first")),
        ]
    )
    part = only_part(ui)
    assert part.state == "output-available"
    assert part.output == "first"


def test_I_2_an_inline_result_in_a_later_assistant_message_is_folded() -> None:
    ui = to_ui_messages(
        [msg(1, "assistant", call("t1")), msg(2, "assistant", result("t1", {"v": 2}))]
    )
    assert ui[0].parts[0].output == {"v": 2}
    assert ui[1].parts == ()  # the result itself emits nothing


def test_I_2_results_without_a_call_id_are_not_indexed() -> None:
    ui = to_ui_messages([msg(1, "tool", result("", "x")), msg(2, "assistant", call("t1"))])
    assert only_part(ui).state == "input-available"


def test_I_4_tool_calls_without_id_or_name_are_skipped() -> None:
    ui = to_ui_messages(
        [msg(1, "assistant", call(""), call("t2", name=""), {"type": "text", "text": "x"})]
    )
    assert ui[0].parts == (UITextPart("x"),)


def test_I_4_error_text_rules() -> None:
    cases = {"a": "boom", "b": None, "d": {"message": "bad", "n": 1.0}, "e": [1, "é"]}
    messages = [msg(1, "assistant", *(call(k) for k in [*cases, "c"]))]
    messages += [msg(2, "tool", *(result(k, v, is_error=True) for k, v in cases.items()))]
    # A result without any "result" key.
    messages += [msg(3, "tool", {"type": "tool-result", "tool_call_id": "c", "is_error": True})]
    parts = {p.tool_call_id: p for p in to_ui_messages(messages)[0].parts}
    assert all(p.state == "output-error" for p in parts.values())
    assert parts["a"].error_text == "boom"
    assert parts["b"].error_text == ""
    assert parts["c"].error_text == ""
    assert parts["d"].error_text == '{"message":"bad","n":1}'
    assert parts["e"].error_text == '[1,"é"]'
    assert parts["a"].output is None


def test_I_4_output_available_carries_the_result_and_null_stays_null() -> None:
    ui = to_ui_messages(
        [
            msg(1, "assistant", call("t1"), call("t2")),
            msg(2, "tool", result("t1", None), {"type": "tool-result", "tool_call_id": "t2"}),
        ]
    )
    first, second = ui[0].parts
    assert (first.state, first.output) == ("output-available", None)
    assert (second.state, second.output) == ("output-available", None)


def test_I_4_provider_executed_prefers_the_call_then_the_result() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "assistant",
                call("a", provider_executed=False),
                call("b"),
                call("c"),
                result("a", provider_executed=True),
                result("b", provider_executed=True),
                result("c"),
            )
        ]
    )
    a, b, c = ui[0].parts
    assert a.provider_executed is False
    assert b.provider_executed is True
    assert c.provider_executed is None
    assert "providerExecuted" not in c.to_json()
    assert a.to_json()["providerExecuted"] is False


def test_I_4_a_call_without_args_has_no_input() -> None:
    ui = to_ui_messages(
        [msg(1, "assistant", {"type": "tool-call", "tool_call_id": "t", "tool_name": "n"})]
    )
    assert only_part(ui).input is None


def test_I_4_sources() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "assistant",
                {"type": "source", "source_id": "s1", "url": "https://a", "title": "A"},
                {"type": "source", "source_id": "", "url": "https://b", "title": ""},
                {"type": "source", "url": "", "source_id": "s3"},
            )
        ]
    )
    assert ui[0].parts == (
        UISourceUrlPart(source_id="s1", url="https://a", title="A"),
        UISourceUrlPart(source_id="https://b", url="https://b"),
    )


def test_I_4_files_use_the_resolver_then_the_part_url() -> None:
    seen: list[FilePart] = []

    def resolver(part: FilePart) -> str | None:
        seen.append(part)
        return f"https://x/{part.file_id}" if part.file_id != "none" else None

    ui = to_ui_messages(
        [
            msg(
                1,
                "user",
                {"type": "file", "file_id": "f1", "media_type": "image/png", "name": "a.png"},
                {"type": "file", "file_id": "none", "media_type": "", "url": "https://own"},
                {"type": "file", "file_id": "none", "media_type": "text/plain"},
            )
        ],
        file_url=resolver,
    )
    assert ui[0].parts == (
        UIFilePart(media_type="image/png", url="https://x/f1", filename="a.png"),
        UIFilePart(media_type="application/octet-stream", url="https://own"),
    )
    assert len(seen) == 3


def test_I_4_files_without_a_resolver_need_their_own_url() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "user",
                {"type": "file", "file_id": "f1", "media_type": "image/png"},
                {"type": "file", "media_type": "image/png", "url": "https://u", "name": ""},
            )
        ]
    )
    assert ui[0].parts == (UIFilePart(media_type="image/png", url="https://u"),)


def test_I_4_other_part_kinds_are_skipped() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "user",
                {"type": "file-reference", "file_name": "a.go", "start_line": 1},
                {"type": "context-file", "context_file_path": "x"},
                {"type": "skill", "skill_name": "s"},
                {"type": "hook-notice", "text": "n"},
                {"type": "brand-new"},
            )
        ]
    )
    assert ui == [UIMessage(id="1", role="user", parts=())]


def test_to_json_is_the_ai_sdk_shape() -> None:
    ui = to_ui_messages(
        [
            msg(
                1,
                "assistant",
                {"type": "text", "text": "t"},
                {"type": "reasoning", "text": "r"},
                call("ok"),
                call("bad"),
                call("open"),
                {"type": "source", "url": "https://s"},
                {"type": "file", "media_type": "image/png", "url": "https://f", "name": "n"},
                {"type": "file", "media_type": "text/csv", "url": "https://g"},
            ),
            msg(2, "tool", result("ok", [1]), result("bad", "no", is_error=True)),
        ]
    )
    assert ui[0].to_json() == {
        "id": "1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "t", "state": "done"},
            {"type": "reasoning", "text": "r", "state": "done"},
            {
                "type": "dynamic-tool",
                "toolName": "run",
                "toolCallId": "ok",
                "state": "output-available",
                "input": {"a": 1},
                "output": [1],
            },
            {
                "type": "dynamic-tool",
                "toolName": "run",
                "toolCallId": "bad",
                "state": "output-error",
                "input": {"a": 1},
                "errorText": "no",
            },
            {
                "type": "dynamic-tool",
                "toolName": "run",
                "toolCallId": "open",
                "state": "input-available",
                "input": {"a": 1},
            },
            {"type": "source-url", "sourceId": "https://s", "url": "https://s"},
            {"type": "file", "mediaType": "image/png", "filename": "n", "url": "https://f"},
            {"type": "file", "mediaType": "text/csv", "url": "https://g"},
        ],
    }


_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=3)),
    st.builds(lambda i: call(i), st.sampled_from(["a", "b", "c"])),
    st.builds(
        lambda i, e: result(i, "r" + i, is_error=e), st.sampled_from(["a", "b", "c"]), st.booleans()
    ),
    st.just({"type": "source", "url": "https://s"}),
    st.just({"type": "weird"}),
)
_message = st.tuples(
    st.integers(min_value=1, max_value=50),
    st.sampled_from(["user", "assistant", "tool", "system"]),
    st.lists(_part, max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_message, max_size=6))
def test_I_properties_order_independence_and_tool_messages_dropped(
    raw: list[tuple[int, str, list[dict[str, Any]]]],
) -> None:
    """The output depends only on the messages (sorted by id), never on input order; every
    non-tool message yields exactly one UI message; every call with a result in the history
    is resolved with the first such result in id order."""
    by_id = {i: (role, parts) for i, role, parts in raw}  # ids are unique in a chat
    messages = [msg(i, role, *parts) for i, (role, parts) in by_id.items()]
    forward = to_ui_messages(messages)
    backward = to_ui_messages(list(reversed(messages)))
    assert forward == backward
    non_tool = sorted(i for i, (role, _) in by_id.items() if role != "tool")
    assert [m.id for m in forward] == [str(i) for i in non_tool]
    first: dict[str, dict[str, Any]] = {}
    for i in sorted(by_id):
        for p in by_id[i][1]:
            if p["type"] == "tool-result":
                first.setdefault(p["tool_call_id"], p)
    for message in forward:
        for part in message.parts:
            if isinstance(part, UIDynamicToolPart):
                found = first.get(part.tool_call_id)
                if found is None:
                    assert part.state == "input-available"
                elif found.get("is_error"):
                    assert (part.state, part.error_text) == ("output-error", found["result"])
                else:
                    assert (part.state, part.output) == ("output-available", found["result"])
