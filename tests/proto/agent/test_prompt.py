"""Prompt classification and mapping to wire input (state machines appendix P, K.5)."""

from __future__ import annotations

import pytest

from coder_proto import (
    AssistantMessage,
    CoderAgentError,
    FileContent,
    FileInput,
    FileReferenceInput,
    SystemMessage,
    TextContent,
    TextInput,
    ToolMessage,
    ToolResultContent,
    ToolResultInput,
    UserMessage,
)
from coder_proto._agent.prompt import (
    NewTurn,
    Noop,
    PendingUpload,
    Resume,
    classify_prompt,
    input_parts,
    normalize_prompt,
    system_prompt,
    tool_output_to_wire,
)


def result(call_id: str, output: object = "ok", is_error: bool = False) -> ToolResultContent:
    return ToolResultContent(tool_call_id=call_id, output=output, is_error=is_error)


# -- normalize ----------------------------------------------------------------------------------


def test_a_string_prompt_is_one_user_text_message() -> None:
    assert normalize_prompt("hi") == (UserMessage((TextContent("hi"),)),)


def test_a_sequence_of_content_parts_is_one_user_message_and_strings_become_text() -> None:
    file = FileContent(file_id="f1")
    assert normalize_prompt(["look", file]) == (UserMessage((TextContent("look"), file)),)


def test_single_message_and_single_content_part_are_accepted() -> None:
    message = UserMessage((TextContent("x"),))
    assert normalize_prompt(message) == (message,)
    assert normalize_prompt(TextContent("y")) == (UserMessage((TextContent("y"),)),)


def test_a_sequence_of_messages_is_kept_in_order() -> None:
    messages = [SystemMessage("s"), UserMessage((TextContent("u"),))]
    assert normalize_prompt(messages) == tuple(messages)


@pytest.mark.parametrize("bad", [42, None, b"bytes", [SystemMessage("s"), "mixed"], {"a": 1}])
def test_unsupported_prompts_raise_a_typed_error(bad: object) -> None:
    with pytest.raises(CoderAgentError):
        normalize_prompt(bad)


# -- P.1 classification ---------------------------------------------------------------------------


def test_an_empty_prompt_is_a_noop() -> None:
    assert classify_prompt(()) == Noop()


def test_a_prompt_ending_with_a_user_message_sends_only_that_message() -> None:
    messages = (
        UserMessage((TextContent("earlier"),)),
        AssistantMessage(("answer",)),
        UserMessage((TextContent("latest"),)),
    )
    assert classify_prompt(messages) == NewTurn((TextContent("latest"),))


@pytest.mark.parametrize("last", [AssistantMessage(()), SystemMessage("s")])
def test_a_prompt_ending_with_anything_else_is_a_noop(last: object) -> None:
    assert classify_prompt((UserMessage((TextContent("u"),)), last)) == Noop()  # type: ignore[arg-type]


def test_trailing_tool_messages_resume_with_every_result_in_chronological_order() -> None:
    """P.1 with K.5 fixed deliberately: messages and the parts within each keep their order
    (the server checks the set of ids, not the order)."""
    messages = (
        ToolMessage((result("old"),)),
        UserMessage((TextContent("u"),)),
        AssistantMessage(()),
        ToolMessage((result("a"), result("b", {"x": 1}))),
        ToolMessage((result("c", "failed", is_error=True),)),
    )
    assert classify_prompt(messages) == Resume(
        (
            ToolResultInput(tool_call_id="a", output="ok", is_error=False),
            ToolResultInput(tool_call_id="b", output={"x": 1}, is_error=False),
            ToolResultInput(tool_call_id="c", output="failed", is_error=True),
        )
    )


# -- P.3 / P.4 --------------------------------------------------------------------------------------


def test_input_parts_drop_empty_text_and_keep_order() -> None:
    reference = FileReferenceInput(file_name="a.py", start_line=1, end_line=2, content="x")
    upload = FileContent(data=b"\x01", media_type="text/plain", filename="a.txt")
    parts = input_parts(
        [TextContent(""), TextContent("hi"), FileContent(file_id="f1"), upload, reference]
    )
    assert parts == [TextInput("hi"), FileInput("f1"), PendingUpload(upload), reference]


def test_a_file_needs_an_id_or_bytes() -> None:
    with pytest.raises(CoderAgentError):
        FileContent()
    with pytest.raises(CoderAgentError):
        FileContent(file_id="")
    with pytest.raises(CoderAgentError):
        FileContent(data="text")  # type: ignore[arg-type]


def test_a_non_empty_file_id_wins_over_bytes() -> None:
    file = FileContent(data=b"x", file_id="f9", media_type="text/plain")
    assert input_parts([file]) == [FileInput("f9")]


def test_the_repr_of_a_file_does_not_dump_its_bytes() -> None:
    assert "<3 bytes>" in repr(FileContent(data=b"abc", media_type="text/plain"))


def test_system_prompt_joins_instructions_and_system_messages_with_a_blank_line() -> None:
    messages = (SystemMessage("  be brief"), UserMessage(()), SystemMessage("use metric "))
    assert system_prompt("You help.", messages) == "You help.\n\n  be brief\n\nuse metric"


@pytest.mark.parametrize(
    ("instructions", "messages"), [(None, ()), ("", ()), ("   ", (SystemMessage(" "),))]
)
def test_an_empty_system_prompt_is_not_sent(
    instructions: str | None, messages: tuple[SystemMessage, ...]
) -> None:
    assert system_prompt(instructions, messages) is None


# -- P.2 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "wire"),
    [
        ({"type": "text", "value": "hello"}, ("hello", False)),
        ({"type": "json", "value": {"t": 21}}, ({"t": 21}, False)),
        ({"type": "error-text", "value": "bad"}, ("bad", True)),
        ({"type": "error-json", "value": {"e": 1}}, ({"e": 1}, True)),
        (
            {"type": "execution-denied", "reason": "no"},
            ({"execution_denied": True, "reason": "no"}, True),
        ),
        ({"type": "execution-denied"}, ({"execution_denied": True}, True)),
        ({"type": "content", "value": [{"type": "text"}]}, ([{"type": "text"}], False)),
        ({"type": "future", "x": 1}, ({"type": "future", "x": 1}, False)),
    ],
)
def test_tool_output_mapping_table(output: dict[str, object], wire: tuple[object, bool]) -> None:
    assert tool_output_to_wire(output) == wire


def test_other_content_kinds_are_dropped() -> None:
    """P.3: parts other than text, files and file references are not sent."""
    assert input_parts([object(), TextContent("kept")]) == [TextInput("kept")]  # type: ignore[list-item]
