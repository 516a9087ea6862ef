"""The ``coder`` model through ``llm``'s Python API, against the fake Coder server: text and
streaming, the conversation kept on one chat, usage, reasoning, tools, attachments,
structured output and failures."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llm
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgentError, CoderApiError
from coder_io_sync.integrations.llm import CoderModel, register_models
from coder_proto.fake import CallClientTool, ReportUsage, Say, Script, Think, Wait


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as server:
        yield server


def _connection(server: FakeCoderServer) -> dict[str, Any]:
    return {"key": server.token, "url": server.url, "organization_id": server.organization_id}


def _user_texts(server: FakeCoderServer, chat_id: str) -> list[str]:
    chat = server.model.chat(chat_id)
    return [
        block["text"]
        for message in chat.messages
        if message.role == "user"
        for block in message.content
        if block.get("type") == "text"
    ]


def test_the_plugin_hook_registers_the_coder_model() -> None:
    registered: list[llm.Model] = []
    register_models(registered.append)
    assert [model.model_id for model in registered] == ["coder"]
    assert str(registered[0]) == "Coder agent: coder"


def test_a_conversation_streams_its_answers_on_one_chat_with_usage(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script(
            [
                Think("Counting."),
                Say("One, two.", chunk=4),
                ReportUsage(input_tokens=10, output_tokens=5),
            ]
        )
    )
    conversation = CoderModel().conversation()
    first = conversation.prompt("Count to two.", system="Be brief.", **_connection(server))
    assert "".join(first) == "One, two."
    assert first.text() == "One, two."
    reasoning = [
        part.text
        for message in first.messages()
        for part in message.parts
        if type(part).__name__ == "ReasoningPart" and part.text
    ]
    assert reasoning == ["Counting."]
    chat_id = first.response_json["coder"]["chat_id"]
    assert first.response_json["coder"]["finish_reason"] == "stop"
    assert first.usage().input == 10
    assert first.usage().output == 5
    assert server.model.chat(chat_id).system_prompt is not None
    assert "Be brief." in server.model.chat(chat_id).system_prompt

    second = conversation.prompt("And three?", **_connection(server))
    assert second.text() == "You said: And three?"
    assert second.response_json["coder"]["chat_id"] == chat_id
    assert (
        second.response_json["coder"]["last_seen_message_id"]
        > (first.response_json["coder"]["last_seen_message_id"])
    )
    assert _user_texts(server, chat_id) == ["Count to two.", "And three?"]
    assert len(server.model.chats) == 1
    assert not server.model.chat(chat_id).archived


def test_a_prompt_without_a_conversation_starts_a_chat_of_its_own(
    server: FakeCoderServer,
) -> None:
    model = CoderModel()
    first = model.prompt("hello", stream=False, **_connection(server))
    second = model.prompt("hello", stream=False, **_connection(server))
    assert first.text().startswith("Hello!")
    assert second.text().startswith("Hello!")
    assert first.response_json["coder"]["chat_id"] != second.response_json["coder"]["chat_id"]


def test_client_tools_run_inside_the_turn_and_are_logged_as_executed_calls(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("Paris: {tool_result.temp_c} degrees."),
            ]
        )
    )
    cities: list[str] = []

    def get_weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        cities.append(city)
        return {"city": city, "temp_c": 21}

    response = CoderModel().prompt("Weather in Paris?", tools=[get_weather], **_connection(server))
    assert response.text() == "Paris: 21 degrees."
    assert cities == ["Paris"]
    # The agent ran the call: llm has nothing left to run.
    assert response.tool_calls() == []
    assert response.response_json["coder"]["steps"] == 2
    chat = server.model.chat(response.response_json["coder"]["chat_id"])
    assert [tool["name"] for tool in chat.dynamic_tools] == ["get_weather"]
    parts = [part for message in response.messages() for part in message.parts]
    calls = [part for part in parts if type(part).__name__ == "ToolCallPart"]
    results = [part for part in parts if type(part).__name__ == "ToolResultPart"]
    assert [(call.name, call.arguments, call.server_executed) for call in calls] == [
        ("get_weather", {"city": "Paris"}, True)
    ]
    assert [json.loads(result.output) for result in results] == [{"city": "Paris", "temp_c": 21}]


def test_a_tool_with_a_text_answer_is_logged_as_that_text(server: FakeCoderServer) -> None:
    server.config.scripts.push(
        Script([CallClientTool(name="shout", args={"word": "hi"}), Say("Shouted.")])
    )

    def shout(word: str) -> str:
        """Shout a word."""
        return word.upper()

    response = CoderModel().prompt("Shout hi.", tools=[shout], **_connection(server))
    assert response.text() == "Shouted."
    results = [
        part
        for message in response.messages()
        for part in message.parts
        if type(part).__name__ == "ToolResultPart"
    ]
    assert [result.output for result in results] == ["HI"]


def test_a_schema_is_answered_by_the_structured_output_tool(server: FakeCoderServer) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="structured_output", args={"name": "Ada", "age": 36}),
                Say("Filed."),
            ]
        )
    )
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    response = CoderModel().prompt("Who?", schema=schema, max_steps=4, **_connection(server))
    assert json.loads(response.text()) == {"name": "Ada", "age": 36}


def test_an_attachment_reaches_the_chat(server: FakeCoderServer, tmp_path: Path) -> None:
    server.config.scripts.push(Script([Say("Read: {attachment}")]))
    notes = tmp_path / "notes.txt"
    notes.write_text("buy milk")
    response = CoderModel().prompt(
        "Read this.", attachments=[llm.Attachment(path=str(notes))], **_connection(server)
    )
    assert response.text() == "Read: buy milk"


def test_a_prompt_of_attachments_only_is_sent(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Say("Read: {attachment}")]))
    response = CoderModel().prompt(
        None,
        attachments=[llm.Attachment(content=b"milk", type="text/plain")],
        **_connection(server),
    )
    assert response.text() == "Read: milk"


def test_a_rejected_token_is_a_typed_error_without_the_token(server: FakeCoderServer) -> None:
    connection = {**_connection(server), "key": "not-the-token"}
    with pytest.raises(CoderApiError) as caught:
        CoderModel().prompt("hello", **connection).text()
    assert "not-the-token" not in str(caught.value)


def test_the_timeout_option_ends_a_slow_prompt(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Wait(30), Say("late")]))
    conversation = CoderModel().conversation()
    with pytest.raises(TimeoutError):
        conversation.prompt("slow", timeout=0.5, **_connection(server)).text()
    # The conversation goes on: a later prompt is answered.
    answer = conversation.prompt("hello", **_connection(server))
    assert answer.text().startswith("Hello!")


def test_importing_the_blocking_adapter_does_not_import_llm() -> None:
    code = "import sys, coder_io_sync; print('llm' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_attachment_over_the_limit_is_refused_before_a_chat_exists(
    server: FakeCoderServer,
) -> None:
    big = llm.Attachment(content=b"x" * (10 * 2**20 + 1), type="text/plain")
    with pytest.raises(CoderAgentError):
        CoderModel().prompt("Read this.", attachments=[big], **_connection(server)).text()
    assert server.model.chats == {}
